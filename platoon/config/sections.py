"""The run-level sections beside ``train``, under platoon 0.4.0's names and defaults: ``checkpoint``, ``eval``,
``stats`` (its trackers), ``watchdog``, and an entry's ``dataset_kwargs``.

What acts here (docs/configuration.md): ``checkpoint.every`` (checkpoints kept for good), ``checkpoint.recovery_every``
and ``keep_recovery`` (checkpoints a resume starts from, the oldest pruned), ``checkpoint.strategy`` and
``eval.strategy`` (``every`` counts steps, or epochs: passes over the training tasks), ``eval.every``,
``eval.at_start``, ``stats.experiment_name``/``trial_name`` (the run directory under ``log_path``), and the listing
keys of ``dataset_kwargs``, and the trackers (``stats.loggers``, ``stats.wandb``, ``stats.mlflow``:
``platoon.config.tracking``). ``watchdog`` and ``checkpoint.load_checkpoint_path`` name components this backend does
not have: typed as 0.4.0 types them, warned about when set (``platoon.config.base``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from platoon.config.base import ConfigModel
from platoon.config.bounds import INT64_MAX, INT64_MIN, MAX_ROLLOUTS, MAX_STEPS, MAX_TASKS
from platoon.config.tracking import Logger, MlflowConfig, WandbConfig

_STRATEGY = ("step", "epoch")


def _strategy_hint(section: str, replacement: str) -> Any:
    def check(v: object) -> object:
        if v == "none":
            raise ValueError(f"'none' is not one of 'step', 'epoch'; platoon 0.3.0 removed it; use {section}.every: 0, "
                             f"which {replacement}")
        return v
    return check


class CheckpointConfig(ConfigModel):
    """When a run writes full checkpoints (weights, optimizer, dispatch and statistics: what a resume reads).

    Checkpoints are written when a run starts, after the last step, every ``every`` steps (kept for good) and every
    ``recovery_every`` steps (the newest ``keep_recovery`` kept). ``strategy: epoch`` counts both in passes over the
    training tasks."""

    NO_EFFECT: ClassVar[frozenset[str]] = frozenset({"load_checkpoint_path"})

    every: int | None = Field(
        None, ge=0, le=MAX_STEPS,
        description="Write a checkpoint kept for good every this many steps (epochs under strategy: epoch); 0: "
        "none; null: 0, or 1 when strategy is set.",
    )
    strategy: Literal["step", "epoch"] | None = Field(
        None, description="The unit of every and recovery_every: step or epoch (a pass over the training tasks); "
        "null: step.",
    )
    load_checkpoint_path: str | None = Field(None, description="A Tinker checkpoint to start from (no effect here).")
    recovery_every: int | None = Field(
        None, ge=1, le=MAX_STEPS,
        description="Write a recovery checkpoint (a resume's starting point, pruned by keep_recovery) every this many "
        "steps; null: none beyond the launch and final ones.",
    )
    keep_recovery: int | None = Field(
        None, ge=1, le=MAX_STEPS,
        description="Recovery checkpoints to keep, the newest (a resume falls back to an older one that reads "
        "back); null: every one.",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _removed(cls, v: object) -> object:
        return _strategy_hint("checkpoint", "saves no permanent checkpoint")(v)


class EvalConfig(ConfigModel):
    """Held-out evaluation during training: pass@1 on each entry's eval split."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "num_concurrent_rollout_workflow_workers": "unknown key; platoon 0.3.0 removed it; use "
        "eval.max_concurrent_rollouts",
        "max_starting_rollouts": "unknown key; train.max_starting_rollouts limits evaluation's start-ups too",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = frozenset({"workflow_config"})

    every: int | None = Field(
        None, ge=0, le=MAX_STEPS,
        description="Evaluate every this many steps (epochs under strategy: epoch) and after the last; 0: never; "
        "null: 0, or 1 when strategy is set.",
    )
    strategy: Literal["step", "epoch"] | None = Field(None, description="The unit of every; null: step.")
    at_start: bool = Field(False, description="Also evaluate the starting policy, at step 0.")
    max_concurrent_rollouts: int | None = Field(
        None, ge=1, le=MAX_ROLLOUTS,
        description="Evaluation's rollouts at once (live; platoon eval's batch); null: model.max_batch.")
    workflow_config: dict[str, Any] = Field(default_factory=dict,
                                            description="Evaluation's workflow settings (no effect here).")

    @field_validator("strategy", mode="before")
    @classmethod
    def _removed(cls, v: object) -> object:
        return _strategy_hint("eval", "never evaluates")(v)


class StatsConfig(ConfigModel):
    """Where a run's directory lies under ``log_path``, and the trackers its metrics also go to (docs/tracking.md)."""

    experiment_name: str = Field("platoon_tinker", min_length=1,
                                 description="The run directory is log_path/experiment_name/trial_name.")
    trial_name: str = Field("run", min_length=1, description="See experiment_name.")
    loggers: list[Logger] = Field(
        default_factory=list, description="This project's own: the trackers each metrics.jsonl row also goes to "
        "(tensorboard, wandb, mlflow), with the config as their parameters; each needs its extra installed.")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="Weights & Biases; a project set here "
                               "turns it on (0.4.0's meaning).")
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description="This project's own: MLflow's run.")
    close_timeout_seconds: float = Field(
        60.0, gt=0, le=86400, description="This project's own: how long a run's end waits for its trackers to take "
        "the rows they have not yet (a slow server's); the rest go to them when the run is resumed.")

    @field_validator("loggers")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"names a logger twice: {v}")
        return v

    @field_validator("experiment_name", "trial_name")
    @classmethod
    def _one_component(cls, v: str) -> str:
        if "/" in v or "\\" in v or v in (".", ".."):
            raise ValueError(f"must be one path component (no '/', not '.' or '..'), got {v!r}")
        return v


class TraceConfig(ConfigModel):
    """This project's own section: the run's timeline, ``trace.json`` (docs/run-directory.md, "trace.json")."""

    enabled: bool = Field(True, description="Write trace.json (Chrome Trace Event format; opens in Perfetto).")
    group_every: int = Field(
        8, ge=1, le=MAX_STEPS,
        description="Trace the rollouts of every n-th drawn group (by draw position); the trainer's and the model "
        "service's spans are always traced. 1: every rollout.",
    )
    max_events: int | None = Field(
        1_000_000, ge=1, le=1_000_000_000,
        description="The most rollout spans one run start writes (about 100 bytes each); past it only the trainer's "
        "and the model service's spans are written. null: no cap.",
    )


class WatchdogConfig(ConfigModel):
    """0.4.0's restart watchdog (no effect here: a run that stops is resumed with ``platoon train --resume``)."""

    NO_EFFECT_ALL: ClassVar[bool] = True

    enabled: bool = Field(True, description="No effect here.")
    timeout_seconds: float = Field(600, gt=0, description="No effect here.")
    exit_code: int = Field(2, description="No effect here.")
    max_restarts: int = Field(0, ge=0, description="No effect here.")


class DatasetKwargs(ConfigModel):
    """How an entry lists its tasks: which split(s), shuffled by which seed, how many.

    Other keys load (``model_extra``) and are refused when the run resolves its environments (stage 2), as platoon
    0.4.0 refuses them: there these keys go to the environment's dataset loader, so ``config validate --no-resolve``
    passes a misspelt one."""

    model_config = ConfigDict(extra="allow")

    split_name: str | list[str] | None = Field(
        None, description="The split (or splits, listed in order) to list; null: train for training, the "
        "environment's evaluation split for eval_dataset_kwargs.",
    )
    shuffle_seed: int | None = Field(
        None, ge=INT64_MIN, le=INT64_MAX, description="Shuffle the listing with this seed before limit; null: keep "
        "the environment's order.",
    )
    limit: int | None = Field(None, ge=1, le=MAX_TASKS, description="Keep the first this many tasks; null: all.")
    where: dict[str, Any] | None = Field(
        None, description="Keep the tasks whose columns match, before exclude_tasks, shuffle_seed and limit: "
        "column -> a value, a list of values, or {min: x, max: y} (inclusive, either may be left out). A curriculum: "
        "TextCraft's {depth: 2}, {crafts: {max: 4}}. Null: every task.",
    )

    @field_validator("where")
    @classmethod
    def _conditions(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        for column, condition in (v or {}).items():
            if isinstance(condition, dict):
                extra = sorted(set(condition) - {"min", "max"})
                if extra or not condition:
                    raise ValueError(f"{column}: a range takes min and/or max, got {sorted(condition)}")
                if any(isinstance(b, bool) or not isinstance(b, int | float) for b in condition.values()):
                    raise ValueError(f"{column}: a range's min and max are numbers, got {condition}")
            elif isinstance(condition, list) and not condition:
                raise ValueError(f"{column}: a list of values must hold at least one")
        return v

    def matches(self, columns: dict[str, Any]) -> bool:
        """Whether a task with ``columns`` passes ``where`` (a task that lacks a column named there does not)."""
        for column, condition in (self.where or {}).items():
            if column not in columns:
                return False
            value = columns[column]
            if isinstance(condition, dict):
                if isinstance(value, bool) or not isinstance(value, int | float):
                    return False
                if value < condition.get("min", value) or value > condition.get("max", value):
                    return False
            elif value not in (condition if isinstance(condition, list) else [condition]):
                return False
        return True

    @field_validator("split_name")
    @classmethod
    def _splits(cls, v: str | list[str] | None) -> str | list[str] | None:
        names = [v] if isinstance(v, str) else (v or [])
        if isinstance(v, list) and not v:
            raise ValueError("must name at least one split")
        if any(not n for n in names):
            raise ValueError("a split name must not be empty")
        return v

    def splits(self, default: str) -> list[str]:
        """The splits to list, in order (``default`` when ``split_name`` is null)."""
        if self.split_name is None:
            return [default]
        return [self.split_name] if isinstance(self.split_name, str) else list(self.split_name)


class SftConfig(ConfigModel):
    """Supervised fine-tuning on demonstrations (``platoon sft``, docs/warm-start.md): the same model, renderer,
    environments, evaluation and checkpoints as the run's RL, trained on the assistant's tokens of each
    demonstration."""

    demonstrations: str = Field(
        "environment", min_length=1,
        description="environment: each training task's demonstration, from its environment (one that offers "
        "demonstration(task_id), as TextCraft does); else a JSONL file of conversations in the messages form "
        "(a path).",
    )
    steps: int = Field(200, ge=1, le=MAX_STEPS, description="Optimizer steps of the fine-tuning.")
    batch_size: int = Field(16, ge=1, le=4096, description="Demonstrations per step (the demonstrations are "
                                                           "drawn in a fresh shuffle each pass).")
    learning_rate: float | None = Field(None, gt=0, le=1, description="AdamW's learning rate; null: "
                                                                      "train.optimizer.learning_rate.")
    max_demonstrations: int | None = Field(None, ge=1, le=MAX_TASKS, description="Use at most this many "
                                                                                   "demonstrations (the first); "
                                                                                   "null: all.")


__all__ = ["CheckpointConfig", "DatasetKwargs", "EvalConfig", "SftConfig", "StatsConfig", "WandbConfig",
           "WatchdogConfig"]
