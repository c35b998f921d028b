"""``python -m evalsuite.lmeval``: lm-eval's CLI with ``--model evalsuite`` available."""
from evalsuite.lmeval.harness import main

main()
