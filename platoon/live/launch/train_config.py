"""A live run's config as ``platoon train`` loads it, and the errors of starting or going on with a run.

``load_train_config``: a config file (or, with none, the embedded default: ``platoon.config.models.EMBEDDED_DEFAULT``)
with its overrides, resolved (stage 2) and planning some steps. It hands on
``platoon.live.launch.errors``' ``TrainError`` and ``TrainUsageError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from platoon.config.loader import load_config
from platoon.config.models import RunConfig
from platoon.config.steps import check_plan
from platoon.live.launch.errors import TrainError, TrainUsageError

__all__ = ["TrainError", "TrainUsageError", "load_train_config"]


def load_train_config(config: Path | None, overrides: Sequence[str] = (), steps: int | None = None, *,
                      out: Path | None = None) -> RunConfig:
    """``config`` with ``overrides`` (no config: the embedded default), resolved (stage 2), planning some steps;
    ConfigError if not. A config file needs ``log_path`` unless ``out`` names the run directory."""
    extra: list[str] = []
    if steps is not None:
        extra += [f"train.max_training_steps={steps}", "train.num_epochs=null"]
    cfg = load_config(config, [*extra, *overrides], strict_resolve=True,
                      needs_log_path=config is not None and out is None)
    check_plan(cfg, str(config) if config is not None else "<default>")
    return cfg
