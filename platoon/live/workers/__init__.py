"""Rollout workers (``train.workflow_config.rollout_isolation: process``): each rollout in a process of its own.

- ``pool``: the trainer's side (``WorkerPool``): starts a worker per rollout, serves its model calls on the real
  model service, cancels and ends it, cleans its scratch files;
- ``worker``: the worker's side: the workflow's per-rollout code with a proxy of the model service;
- ``preload`` and ``screen``: the fork server (``worker_start_method: forkserver``) and what it imports ahead,
  screened for fork safety; ``envs``: the environments a worker plays, built or found in its fork server;
- ``channel``: the messages between the two sides.

docs/rollout-workers.md is the user's guide.
"""

from platoon.live.workers.envs import EnvSpec
from platoon.live.workers.pool import WorkerDied, WorkerPool, node_scratch
from platoon.live.workers.preload import ForkServerRefused, PreloadPlan, preload_plan

__all__ = ["EnvSpec", "ForkServerRefused", "PreloadPlan", "WorkerDied", "WorkerPool", "node_scratch", "preload_plan"]

