"""``build_policy``: the policy layer of one start of a run, its plug-ins resolved first.

It resolves the config's task samplers and admission rules (``samplers``, ``admission`` here: registry, imports,
entry points) and hands the policy layer's ``assemble_policy`` the sets built from them, so that both runtimes build
the same driver the same way and the policy layer never loads a plug-in. Errors are the resolution's: an
``ExtensionError`` for a sampler reference, a ``ValueError`` for its options, a ``ConfigError`` listing every
problem of the rules.
"""

from __future__ import annotations

from platoon.components.admission import admission_set
from platoon.components.samplers import sampler_set
from platoon.config.models import RunConfig
from platoon.policy import Measure, PolicyLayer, TaskPool, assemble_policy


def build_policy(cfg: RunConfig, pool: TaskPool, *, start: int = 1, rolling: bool = True,
                 measure: Measure | None = None, runtime: str = "sim", now: float = 0.0,
                 group_workflow: bool = True) -> PolicyLayer:
    """The driver and what it drives, built from ``cfg`` over ``pool``. ``measure`` calls each sampler decision and
    answers how long it took (``train/sampler/decision_ms``, the runtime's measurement; None: untimed); the rest is
    ``platoon.policy.assemble_policy``'s (``rolling``, ``runtime``, ``now``, ``group_workflow``)."""
    train = cfg.train
    samplers = sampler_set(
        pool, run_sampler=train.task_sampler, run_options=train.task_sampler_options,
        entry_samplers={e.label: (e.task_sampler, e.task_sampler_options) for e in cfg.environments},
        batch_size=train.batch_size, seed=train.seed, measure=measure)
    admission = admission_set(
        run_rule=train.group_admission, run_options=train.group_admission_options,
        entry_rules={e.label: (e.group_admission, e.group_admission_options) for e in cfg.environments},
        entries=pool.entries, batch_size=train.batch_size, label_column=train.label_by)
    return assemble_policy(cfg, pool, samplers, admission, start=start, rolling=rolling, runtime=runtime, now=now,
                           group_workflow=group_workflow)
