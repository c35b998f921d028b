"""Statistical simulations of the gate: error rates, samples and seconds to decide, on synthetic paired outcomes
(no model)."""
