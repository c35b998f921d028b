"""CPU kernels, threads and dtypes: MKL and oneDNN modes, OpenMP waiting, packed Linear weights, attention."""
