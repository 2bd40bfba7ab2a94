"""How long a run is and where it writes: its planned steps, the steps between its checkpoints and evaluations,
and its run directory.

Rules it keeps:
- a run plans ``max_training_steps``, ``num_epochs`` passes over its training tasks, or the shorter of the two; a
  config that sets neither plans nothing, and ``train`` and ``simulate`` refuse it (``check_plan``, exit 78);
- ``--steps`` replaces the plan whole (``with_steps``: ``num_epochs`` cleared).
"""

from __future__ import annotations

from pathlib import Path

from platoon.config.errors import ConfigError
from platoon.config.models import RunConfig


def steps_per_epoch(cfg: RunConfig, tasks: int) -> int:
    """Steps of one pass over ``tasks`` training tasks: ``ceil(tasks / batch_size)`` (at least 1)."""
    return max(1, -(-tasks // cfg.train.batch_size))


def planned_steps(cfg: RunConfig, tasks: int) -> int | None:
    """The run's training steps over ``tasks`` training tasks: ``max_training_steps``, ``num_epochs`` passes, the
    shorter when both are set; None when neither is (``train`` and ``simulate`` refuse such a config)."""
    t = cfg.train
    by_epochs = None if t.num_epochs is None else t.num_epochs * steps_per_epoch(cfg, tasks)
    if by_epochs is not None and t.max_training_steps is not None:
        return min(by_epochs, t.max_training_steps)
    return by_epochs if by_epochs is not None else t.max_training_steps


def with_steps(cfg: RunConfig, steps: int) -> RunConfig:
    """``cfg`` planned for exactly ``steps`` steps (``--steps``: ``max_training_steps`` set, ``num_epochs`` cleared)."""
    train = cfg.train.model_copy(update={"max_training_steps": steps, "num_epochs": None})
    return cfg.model_copy(update={"train": train})


NO_PLAN = "set num_epochs or max_training_steps (with both, training runs the shorter)"
"""The problem at ``train`` of a config that sets neither, which ``train`` and ``simulate`` refuse."""


def check_plan(cfg: RunConfig, source: str = "<config>") -> None:
    """Refuse (ConfigError, exit 78) a config that plans no steps: neither num_epochs nor max_training_steps."""
    if cfg.train.num_epochs is None and cfg.train.max_training_steps is None:
        raise ConfigError([f"train: {NO_PLAN}"], source)


def run_directory(cfg: RunConfig) -> Path | None:
    """``log_path/stats.experiment_name/stats.trial_name``, or None without ``log_path``."""
    if cfg.log_path is None:
        return None
    return Path(cfg.log_path).expanduser() / cfg.stats.experiment_name / cfg.stats.trial_name


def event_interval(every: int | None, strategy: str | None, per_epoch: int) -> int | None:
    """Steps between the events a ``checkpoint``/``eval`` trigger asks for, or None for none: ``every`` (null: 1 when
    ``strategy`` is set, else 0 = never) steps, or epochs of ``per_epoch`` steps under ``strategy: epoch``."""
    n = (1 if strategy is not None else 0) if every is None else every
    if n < 1:
        return None
    return n * per_epoch if strategy == "epoch" else n
