"""Each entry's effective settings: what a config means for one environment entry once inheritance is decided.

What this module owns: the run's and each entry's task sampler (``auto`` decided), group admission rule, workflow
settings, group size, staleness bound, straggler policy and ``sim`` block, the run's rollout permits and step cap,
and the one-line summary ``config show`` prints per entry.

Rules it keeps:
- an entry's own key wins; a key it leaves null inherits the run's (``train``'s), and a label's straggler policy
  wins over both (docs/configuration.md);
- everything here is a pure function of the config: nothing is imported or resolved (that is stage 2,
  ``platoon.config.resolve``), so the loader's checks, the runtimes and the policy layer read the same answers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platoon.config.components import CORE_TASK_SAMPLERS
from platoon.config.models import RunConfig, SimConfig
from platoon.config.sections import DatasetKwargs

RUN_LEVEL = "run"
ENTRY_LEVEL = "entry"


def run_sampler(cfg: RunConfig) -> str:
    """``train.task_sampler`` with ``auto`` decided: uniform for one entry whose own sampler is unset or uniform,
    weighted otherwise. Other names are returned as written."""
    name = cfg.train.task_sampler
    if name != "auto":
        return name
    if len(cfg.environments) == 1 and cfg.environments[0].task_sampler in (None, "uniform"):
        return "uniform"
    return "weighted"


def core_hands_slots(cfg: RunConfig) -> bool | None:
    """Whether the run's sampler hands slots to entries' samplers: known for core names, None for others (their
    class's ``entry_slots`` decides, at stage 2)."""
    name = run_sampler(cfg)
    if name in CORE_TASK_SAMPLERS:
        return name == "weighted"
    return None


def entry_sampler(cfg: RunConfig, i: int) -> str | None:
    """The sampler that fills entry ``i``'s slots (its own ``task_sampler``, else uniform), or None when the run's
    core sampler chooses over every task itself (uniform, pass_rate, or auto over one plain entry)."""
    if core_hands_slots(cfg) is False:
        return None
    return cfg.environments[i].task_sampler or "uniform"


def entry_admission(cfg: RunConfig, i: int) -> tuple[str, dict[str, Any], str]:
    """``(rule name, options, level)`` of entry ``i``: its own rule, else the run's (level ``run``)."""
    e = cfg.environments[i]
    if e.group_admission is not None:
        return e.group_admission, dict(e.group_admission_options), ENTRY_LEVEL
    return cfg.train.group_admission, dict(cfg.train.group_admission_options), RUN_LEVEL


def is_rule_mode(cfg: RunConfig) -> bool:
    """True when any entry's effective rule is not literally ``all`` (decided by name: a module:Class that admits
    everything still counts), or, without entries, when the run's is not."""
    if not cfg.environments:
        return cfg.train.group_admission != "all"
    return any(entry_admission(cfg, i)[0] != "all" for i in range(len(cfg.environments)))


@dataclass(frozen=True)
class EntryWorkflow:
    """An entry's effective ``workflow_config``: its own keys, else ``train.workflow_config``'s."""

    group_size: int
    leave_one_out_baseline: bool
    min_successful_group_size: int
    straggler_timeout_s: float | None
    straggler_quorum: int | None


def entry_workflow(cfg: RunConfig, i: int) -> EntryWorkflow:
    """Entry ``i``'s effective workflow settings (docs/configuration.md, "train.workflow_config")."""
    run, own = cfg.train.workflow_config, cfg.environments[i].workflow_config

    def pick(mine: Any, theirs: Any) -> Any:
        return theirs if mine is None else mine

    return EntryWorkflow(
        group_size=pick(own.group_size, run.group_size),
        leave_one_out_baseline=pick(own.leave_one_out_baseline, run.leave_one_out_baseline),
        min_successful_group_size=pick(own.min_successful_group_size, run.min_successful_group_size),
        straggler_timeout_s=pick(own.straggler_timeout_seconds, run.straggler_timeout_seconds),
        straggler_quorum=pick(own.straggler_quorum, run.straggler_quorum),
    )


def sampling(cfg: RunConfig) -> tuple[float, int | None]:
    """``(temperature, max_completion_tokens)`` of the run's rollouts (``train.workflow_config.rollout_config.
    inference_params``; temperature null: 1.0, tokens null: the environment's own limit)."""
    params = cfg.train.workflow_config.rollout_config.inference_params
    return (1.0 if params.temperature is None else float(params.temperature)), params.max_completion_tokens


def group_size(cfg: RunConfig, i: int) -> int:
    """Entry ``i``'s group size: its ``workflow_config.group_size``, else ``train.workflow_config.group_size``."""
    own = cfg.environments[i].workflow_config.group_size
    return own if own is not None else cfg.train.workflow_config.group_size


def straggler_policy(cfg: RunConfig, i: int, label: str) -> tuple[float | None, int | None]:
    """``(timeout_s, quorum)`` of a group of entry ``i`` labelled ``label``: the label's policy from
    ``train.workflow_config.straggler_policies``, else the entry's keys, else the run's (timeout None: no cutoff)."""
    listed = cfg.train.workflow_config.straggler_policies.get(label)
    if listed is not None:
        return listed.timeout_seconds, listed.quorum
    w = entry_workflow(cfg, i)
    return w.straggler_timeout_s, w.straggler_quorum


def any_straggler_policy(cfg: RunConfig) -> bool:
    """Whether some group may have a straggler cutoff (the run's, an entry's or a label's timeout is set)."""
    policies = cfg.train.workflow_config.straggler_policies.values()
    return (any(entry_workflow(cfg, i).straggler_timeout_s is not None for i in range(len(cfg.environments)))
            or any(p.timeout_seconds is not None for p in policies))


def select_tasks(listed: Sequence[str], kwargs: DatasetKwargs, exclude: Sequence[str],
                 columns: Callable[[str], Mapping[str, Any]] | None = None) -> list[str]:
    """The tasks an entry lists, in order: ``listed`` (its split's, or its own ``tasks``) whose ``columns(task_id)``
    match ``kwargs.where`` (when set), without ``exclude``, shuffled by ``kwargs.shuffle_seed`` (when set), the first
    ``kwargs.limit`` (when set). ``columns`` is needed when ``where`` is set (ValueError without it)."""
    gone = set(exclude)
    ids = [t for t in listed if t not in gone]
    if kwargs.where:
        if columns is None:
            raise ValueError("dataset_kwargs.where selects tasks by their columns, and these tasks have none here")
        ids = [t for t in ids if kwargs.matches(dict(columns(t)))]
    if kwargs.shuffle_seed is not None:
        random.Random(kwargs.shuffle_seed).shuffle(ids)
    return ids if kwargs.limit is None else ids[: kwargs.limit]


def effective_group_size(cfg: RunConfig) -> int:
    """The run's group size G: the largest entry's (a permit budget must hold one such group)."""
    return max((group_size(cfg, i) for i in range(len(cfg.environments))), default=1)


def max_concurrent_rollouts(cfg: RunConfig) -> int:
    """The rollout permits: ``train.max_concurrent_rollouts``, or by default B x G."""
    if cfg.train.max_concurrent_rollouts is not None:
        return cfg.train.max_concurrent_rollouts
    return cfg.train.batch_size * effective_group_size(cfg)


def eval_concurrency(cfg: RunConfig) -> int:
    """Evaluation's rollouts at once (live): ``eval.max_concurrent_rollouts``, else ``model.max_batch``."""
    return cfg.eval.max_concurrent_rollouts or cfg.model.max_batch


def entry_max_staleness(cfg: RunConfig, i: int) -> int | None:
    """Entry ``i``'s staleness bound: its own, else the run's (None: unbounded)."""
    own = cfg.environments[i].max_staleness
    return own if own is not None else cfg.train.max_staleness


def step_cap(cfg: RunConfig) -> int:
    """Groups a step counts at most in rule mode: ``max(B, ceil(round(max_groups_per_step * B, 9)))``; the rounding
    makes 1.1 x 10 give 11, not 12."""
    b = cfg.train.batch_size
    return max(b, math.ceil(round(cfg.train.refill.max_groups_per_step * b, 9)))


RUN_ONLY_SIM_KEYS = ("trainer", "service", "gpus", "preset")
"""Keys of ``sim`` that are the run's alone (one trainer, one model service): an entry's ``sim`` may not set them."""


def merge_sim(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge an entry's ``sim`` overrides onto a sim block; a mapping with a ``dist`` replaces whole, since
    one distribution's fields mean nothing to another."""
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping) and "dist" not in value:
            out[key] = merge_sim(old, value)
        else:
            out[key] = value
    return out


def entry_sim(cfg: RunConfig, i: int) -> SimConfig:
    """Entry ``i``'s workload: the run's ``sim`` with the entry's overrides merged in (validated at load)."""
    own = cfg.environments[i].sim
    if not own:
        return cfg.sim
    return SimConfig.model_validate(merge_sim(cfg.sim.model_dump(), own))


def entry_summary(cfg: RunConfig, i: int) -> str:
    """One line of entry ``i``'s effective settings, as ``config show`` prints them."""
    e = cfg.environments[i]
    sampler = entry_sampler(cfg, i)
    drawn = f"{sampler}@{e.label} under {run_sampler(cfg)}" if sampler else f"the run's {run_sampler(cfg)}"
    rule, options, level = entry_admission(cfg, i)
    rule_text = f"{rule} {options}" if options else rule
    return (
        f"{e.label}: drawn by {drawn}; group_admission: {rule_text} ({level}); group_size {group_size(cfg, i)}; "
        f"max_staleness {entry_max_staleness(cfg, i)}"
    )
