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
from platoon.live.workers.preload import PreloadPlan, preload_plan

__all__ = ["EnvSpec", "PreloadPlan", "WorkerDied", "WorkerPool", "node_scratch", "preload_plan", "rollout_workers"]


def rollout_workers(cfg, envs, *, from_config: bool = True) -> WorkerPool | None:
    """The worker pool of run config ``cfg`` (None under ``rollout_isolation: inprocess``), its fork server opening.
    ``envs``: the entries' environments; ``from_config``: they were built from the config's entries (a worker builds
    its own, or finds its fork server's), else they travel pickled."""
    w = cfg.train.workflow_config
    if w.rollout_isolation != "process":
        return None
    specs = {}
    if from_config:
        from platoon.live.build import entry_splits

        specs = {e.label: EnvSpec(e.env, dict(e.service_kwargs), e.package, tuple(entry_splits(e, envs[e.label])))
                 for e in cfg.environments}
    plan = None if w.worker_python_env_isolation else preload_plan(specs, envs, w.worker_preload)
    pool = WorkerPool(method=w.worker_start_method, plan=plan, env_specs=specs,
                      grace_s=w.worker_termination_grace_seconds)
    pool.open()
    return pool
