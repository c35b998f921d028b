"""evalsuite: is this quantized variant safe to release, and for whom?"""
from pathlib import Path

__version__ = "0.1.0"

#: Repository root (editable install): holds tasks/, baselines/, reports/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
