"""evalsuite: is this quantized variant safe to release, and for whom?

Importing evalsuite (or any of its modules) changes nothing in the process: no environment variable is set and no
file is read or written. The process-wide choices evalsuite makes for its own runs (how torch's OpenMP threads
wait, ``evalsuite.cpu.threads``; MKL's reproducibility mode, ``evalsuite.cpu.mkl``) are made by the command line
(``evalsuite.cli.main``) before torch loads, and the MKL mode also when a model is loaded (``models.load_model``).
Where files go: ``evalsuite.paths``.
"""

__version__ = "0.1.0"
