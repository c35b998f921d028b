"""Per-tenant precision decisions: a tenant is a workload plus a quality policy (``spec``); what its runtime serves
(``runtimes``, ``forms``); the decision joining the gate under its policy and the planner's fit (``decide``); a run's
side of it (``run``). docs/tenants.md."""
