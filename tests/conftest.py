"""Test-wide setup: the shared harness modules (tests/policy/dispatch_harness.py, tests/live/live_harness.py, tests/sim/simkit.py) import
by their plain names; test modules themselves import by path (``--import-mode=importlib``), so two folders may hold
test files of the same name."""

import sys
from pathlib import Path

HERE = Path(__file__).parent
for folder in ("policy", "live", "sim"):
    if str(HERE / folder) not in sys.path:
        sys.path.insert(0, str(HERE / folder))
