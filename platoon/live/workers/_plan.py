"""Imported last by the rollout workers' fork server: builds the environments its preload plan names
(``envs.run_plan``), counts the server's modules, notes whether its imports started the CUDA driver (the server then
refuses to serve: ``preload``) and freezes its objects (``gc.freeze``).

The plan travels in the environment variable ``PLATOON_WORKER_PRELOAD_PLAN`` (JSON), set only while the trainer
starts the fork server; the server removes it here, so that no worker sees it.
"""

import gc
import json
import os
import sys

from platoon.live.workers.envs import PLAN_VARIABLE, run_plan
from platoon.live.workers.worker import cuda_started

run_plan(json.loads(os.environ.pop(PLAN_VARIABLE, None) or "{}").get("builds", ()))

MODULES = len(sys.modules)
"""The fork server's modules once everything is imported and built."""

CUDA_STARTED = cuda_started()
"""Whether what the server imported or built started the CUDA driver (checked, not started, here)."""

# What the server holds now is every worker's to share: out of the collector's reach, no worker's collection walks it
# (touching, so copying, its pages).
gc.freeze()
