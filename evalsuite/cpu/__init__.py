"""What the CPU does to a run: MKL's reproducibility mode (``mkl``), oneDNN's kernel level (``onednn``), how torch's
threads wait (``threads``) and the CPU class a float32 baseline's answers belong to (``cpuclass``)."""
