"""Test-wide setup: the shared harness modules (tests/policy/dispatch_harness.py, tests/live/live_harness.py, tests/sim/simkit.py, tests/config/config_kit.py, tests/process_tree.py) import
by their plain names; test modules themselves import by path (``--import-mode=importlib``), so two folders may hold
test files of the same name."""

import os
import sys
from pathlib import Path

from hypothesis import settings

HERE = Path(__file__).parent
for folder in ("config", "policy", "live", "sim", ""):
    if str(HERE / folder) not in sys.path:
        sys.path.insert(0, str(HERE / folder))


# CI explores the same examples on every run (a failure there is reproducible from its log); a developer's runs keep
# drawing new ones, which is how new bad inputs are found.
if os.environ.get("CI"):
    settings.register_profile("ci", derandomize=True, database=None)
    settings.load_profile("ci")
