"""Imported last by the rollout workers' fork server: builds the environments its preload plan names
(``envs.run_plan``) and counts the server's modules.

The plan travels in the environment variable ``PLATOON_WORKER_PRELOAD_PLAN`` (JSON), set only while the trainer
starts the fork server; the server removes it here, so that no worker sees it.
"""

import json
import os
import sys

from platoon.live.workers.envs import PLAN_VARIABLE, run_plan

run_plan(json.loads(os.environ.pop(PLAN_VARIABLE, None) or "{}").get("builds", ()))

MODULES = len(sys.modules)
"""The fork server's modules once everything is imported and built."""
