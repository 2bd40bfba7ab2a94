"""Where a run's metrics go beside ``metrics.jsonl``: the trackers of ``stats`` (docs/tracking.md).

``stats.loggers`` (this project's own key) lists them: ``tensorboard``, ``wandb``, ``mlflow``. 0.4.0's
``stats.wandb`` keeps its meaning: its keys set up the W&B run, and a ``project`` set there turns W&B on even when
``loggers`` does not name it (``mode: disabled`` keeps it off). ``stats.mlflow`` is this project's own. What this
module owns: those sections, ``chosen_loggers`` (the loggers a config turns on) and ``problems`` (a logger whose
package is not installed, named with its extra; W&B named and disabled at once).
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field

from platoon.config.base import ConfigModel
from platoon.config.problems import Problem

__all__ = ["LOGGERS", "MlflowConfig", "WandbConfig", "chosen_loggers", "problems"]

Logger = Literal["tensorboard", "wandb", "mlflow"]
LOGGERS: tuple[str, ...] = ("tensorboard", "wandb", "mlflow")
PACKAGES = {"tensorboard": ("tensorboard",), "wandb": ("wandb",), "mlflow": ("mlflow", "sqlalchemy", "alembic")}
"""The modules each logger imports (MLflow's database store: SQLAlchemy and Alembic)."""


class WandbConfig(ConfigModel):
    """Weights & Biases (platoon 0.4.0's section): the run's files under the run directory (``RUN/wandb``), online
    only with credentials (``api_key``, ``WANDB_API_KEY`` or ``wandb login``), else offline, to ``wandb sync`` later."""

    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="online: to the W&B server when credentials are found, else offline (said at start); "
        "offline: files only, synced later with wandb sync; disabled: off even when project is set.")
    project: str | None = Field(None, description="The W&B project; set, it turns W&B on (0.4.0's meaning); "
                                "null: stats.experiment_name.")
    entity: str | None = Field(None, description="The W&B entity (team or user); null: the credentials' default.")
    name: str | None = Field(None, description="The run's display name; null: stats.trial_name (a sweep point: its "
                             "directory's name).")
    group: str | None = Field(None, description="The run's group; null: none (a sweep point: the sweep's name).")
    notes: str | None = Field(None, description="The run's notes.")
    api_key: str | None = Field(None, description="A W&B API key (else WANDB_API_KEY, or wandb login's).")
    base_url: str | None = Field(None, description="A W&B server of your own (else WANDB_BASE_URL, or W&B's).")
    resume_run_id: str | None = Field(None, description="The W&B run id to log to (a run begun elsewhere); null: "
                                      "a new id, kept in the run directory, so that a resume continues it.")
    tags: list[str] = Field(default_factory=list, description="Tags added to platoon's own (runtime, time axis).")


class MlflowConfig(ConfigModel):
    """This project's own: the MLflow run of ``stats.loggers: [mlflow]``."""

    tracking_uri: str | None = Field(
        None, description="Where runs are stored (an MLflow server's http(s) URL, or a database URI such as "
        "sqlite:////path/mlflow.db); null: a SQLite database under the run directory (RUN/mlflow.db).")
    experiment: str | None = Field(None, description="The MLflow experiment; null: stats.experiment_name (a sweep "
                                   "point: the sweep's name).")
    run_name: str | None = Field(None, description="The run's name; null: stats.trial_name (a sweep point: its "
                                 "directory's name).")


def chosen_loggers(loggers: list[str], wandb: WandbConfig) -> list[str]:
    """The trackers a config turns on, in ``LOGGERS``' order (``stats.loggers``, W&B too when its project is set)."""
    on = set(loggers)
    if wandb.project is not None:
        on.add("wandb")
    if wandb.mode == "disabled":
        on.discard("wandb")
    return [name for name in LOGGERS if name in on]


def problems(loggers: list[str], wandb: WandbConfig, mlflow: MlflowConfig) -> list[Problem]:
    """A chosen logger whose package is not installed, naming the extra; W&B both listed and disabled; an MLflow
    file store, which cannot hold platoon's metric groups."""
    out = []
    uri = mlflow.tracking_uri or ""
    if "mlflow" in loggers and (uri.startswith("file:") or (uri and "://" not in uri)):
        out.append(Problem("stats.mlflow.tracking_uri", f"{uri!r} is an MLflow file store, which cannot hold a metric "
                           "that is also a group of others (train/sampler/draws beside train/sampler/draws/explore); "
                           "use a database (sqlite:////path/mlflow.db) or a server (http://host:5000)"))
    if "wandb" in loggers and wandb.mode == "disabled":
        out.append(Problem("stats.wandb.mode", "disabled, while stats.loggers lists wandb: drop one of them"))
    for name in chosen_loggers(loggers, wandb):
        if any(importlib.util.find_spec(module) is None for module in PACKAGES[name]):
            why = "stats.wandb.project is set" if name == "wandb" and name not in loggers else "stats.loggers lists it"
            out.append(Problem("stats.loggers" if name in loggers else "stats.wandb.project",
                               f"{name} is chosen ({why}) but not installed: pip install 'platoon[{name}]'"))
    return out
