"""Build the policy layer of one start of a run from its config: pool -> samplers, statistics, admission, dispatcher.

Both runtimes call ``build_policy``; only the pool differs (the simulator's tasks are synthetic, the live backend's
come from its environments), so the dispatcher they drive is the same object built the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from platoon.config.models import RunConfig
from platoon.config.resolve import effective_group_size
from platoon.policy.admission import AdmissionSet
from platoon.policy.dispatcher import Dispatcher, dispatch_config
from platoon.policy.pool import TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.runtime import SamplerSet


@dataclass
class Policy:
    """The policy-layer objects of one start of a run."""

    pool: TaskPool
    samplers: SamplerSet
    recorder: StatsRecorder
    admission: AdmissionSet
    dispatcher: Dispatcher


def build_policy(cfg: RunConfig, pool: TaskPool, *, start: int = 1, rolling: bool = True,
                 clock: Callable[[], float] | None = None) -> Policy:
    """The dispatcher and what it drives, built from ``cfg`` over ``pool``. ``rolling``: the training workflow runs
    its rollouts on the lease; ``clock`` times sampler decisions (None: no timing, as the simulator wants, so its
    metrics do not depend on how fast the host decides)."""
    train = cfg.train
    samplers = SamplerSet(
        pool, run_sampler=train.task_sampler, run_options=train.task_sampler_options,
        entry_samplers={e.name: (e.task_sampler, e.task_sampler_options) for e in cfg.environments},
        batch_size=train.batch_size, seed=train.seed, clock=clock)
    recorder = StatsRecorder.for_pool(pool, start=start, group_size=effective_group_size(cfg))
    recorder.add_listener(samplers.observe)
    admission = AdmissionSet(
        run_rule=train.group_admission, run_options=train.group_admission_options,
        entry_rules={e.name: (e.group_admission, e.group_admission_options) for e in cfg.environments},
        entries=pool.entries, batch_size=train.batch_size, label_column=train.label_by)
    dispatcher = Dispatcher(dispatch_config(cfg), pool, samplers, recorder, admission, rolling=rolling,
                            start=start)
    return Policy(pool, samplers, recorder, admission, dispatcher)
