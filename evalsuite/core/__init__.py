"""The run's shared vocabulary, torch-free: the run config (``config``), the gate's ``Decision`` (``decision``) and what
deciding costs in samples and seconds (``costs``). What a run stores is ``evalsuite.store``."""
