"""Imported first by the rollout workers' fork server: takes the trainer's ``sys.path`` (Python 3.11's fork server
is handed it and does not set it) and runs the trainer's main script, when it is one, as ``__mp_main__``, as the
standard library's ``spawn`` would run it again in each worker (the fork server's own ``__main__`` preload never
receives the script's path); a trainer started as ``python -m ...`` has none. Both come in the preload plan
(``PLATOON_WORKER_PRELOAD_PLAN``, which ``_plan`` reads last and removes)."""

import json
import os
import sys
from multiprocessing import process, spawn

from platoon.live.workers.envs import PLAN_VARIABLE

_plan = json.loads(os.environ.get(PLAN_VARIABLE) or "{}")
if _plan.get("sys_path"):
    sys.path[:] = _plan["sys_path"]
_path = _plan.get("main_path")
if _path:
    process.current_process()._inheriting = True  # as the fork server does around it: no bootstrapping error
    try:
        spawn.import_main_path(_path)
    finally:
        del process.current_process()._inheriting
