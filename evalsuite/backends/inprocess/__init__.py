"""The in-process torch engine: the decoder (batched greedy/sampled decode), refill and cache growth, KLD,
verification against the baseline's answer, prompt K/V snapshots, the speed probe and the backend built on them."""
