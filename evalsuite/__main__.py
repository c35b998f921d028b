"""``python -m evalsuite``: the ``evalsuite`` command (``evalsuite.cli.main``)."""
from evalsuite.cli import main

if __name__ == "__main__":
    main()
