"""The run config's schema: frozen pydantic models, one per section, every field described.

Rules the models keep:
- every model is frozen, strict (YAML's types are the config's types: ``"8"`` is not an int, ``true`` is not a
  number) and forbids unknown keys; a class's ``UNKNOWN_KEY_HINTS`` maps a removed or misremembered key to the
  exact message the loader prints after ``<path>: `` (so ``train.task_order`` names its replacement);
- a field's own range lives on the field; a check that reads two fields lives in ``platoon.config.loader``
  (``config_problems``), so a config with many mistakes reports all of them and a config built in code can be
  checked the same way;
- every field has a ``description``: ``platoon config show --defaults`` prints it as a comment.

The simulator's section (``SimConfig``, its parts and the duration union discriminated on ``dist``) lives in
``platoon.config.sim``, which the simulator owns; this module re-exports it.

Validation errors become ``<dotted.path>: message`` lines in ``platoon.config.problems``.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from platoon.config.base import ConfigModel
from platoon.config.bounds import (
    INT64_MAX,
    INT64_MIN,
    MAX_BATCH,
    MAX_GROUPS_PER_STEP,
    MAX_MODEL,
    MAX_ROLLOUTS,
    MAX_STALENESS,
    MAX_STEPS,
    MAX_TASKS,
    MAX_WEIGHT,
    MIN_WEIGHT,
)
from platoon.config.inference import InferenceConfig, LaunchConfig
from platoon.config.losses import DEFAULT_LOSS_FN, DEFAULT_LOSS_FN_CONFIG, LOSS_FNS, TINKER_ONLY_LOSS_FNS
from platoon.config.ray import RayConfig
from platoon.config.sections import (
    CheckpointConfig,
    DatasetKwargs,
    EvalConfig,
    SftConfig,
    StatsConfig,
    TraceConfig,
    WatchdogConfig,
)
from platoon.config.sim import (
    Duration,
    EmpiricalDuration,
    ExponentialDuration,
    FixedDuration,
    LognormalDuration,
    SimConfig,
    SimLearningConfig,
    SimPopulationConfig,
    SimRolloutConfig,
    SimTrainerConfig,
)
from platoon.config.workflow import EntryWorkflowConfig, WorkflowConfig

_Config = ConfigModel


# --- train -----------------------------------------------------------------------------------------------------


class RefillConfig(_Config):
    """How far a step under a group admission rule may look for admitted groups."""

    max_groups_per_step: float = Field(
        3.0,
        description="A step stops waiting once it has counted this many times batch_size groups, training what it "
        "admitted (a finite number of at least 1; validated even without a rule).",
    )

    @field_validator("max_groups_per_step", mode="before")
    @classmethod
    def _cap(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 1:
            raise ValueError(f"must be a finite number of at least 1 (a multiple of batch_size), got {v!r}")
        if v > MAX_GROUPS_PER_STEP:
            raise ValueError(f"must be at most {MAX_GROUPS_PER_STEP:g} (a multiple of batch_size), got {v!r}")
        return v


class OptimizerConfig(_Config):
    """Adam's settings (0.4.0's ``AdamParams``): decoupled weight decay (AdamW), as the Tinker service applies it."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {"lr": "unknown key; did you mean 'learning_rate'?"}

    learning_rate: float = Field(3e-5, gt=0, le=10, description="Adam's learning rate.")
    beta1: float = Field(0.9, ge=0, lt=1, description="Adam's decay rate of the gradient's running mean.")
    beta2: float = Field(0.95, ge=0, lt=1, description="Adam's decay rate of the squared gradient's running mean.")
    eps: float = Field(1e-8, gt=0, le=1, description="Added to Adam's denominator for numerical stability.")
    weight_decay: float = Field(
        0.0, ge=0, le=10, description="Decoupled weight decay (AdamW): each step shrinks the weights by lr x this."
    )
    grad_clip_norm: float = Field(
        0.0, ge=0, le=1e12,
        description="Clip the gradient's global norm to this; 0: no clipping (the norm is reported either way).",
    )


_TINKER_NO_EFFECT = frozenset({
    "sample_timeout_seconds", "num_microbatches", "lora_rank",
    "forward_backward_timeout_seconds", "optim_step_timeout_seconds",
})


class TrainConfig(_Config):
    """The trainer and the dispatch policy: what is drawn, when it starts, what a step trains."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "task_order": "unknown key; platoon 0.4.0 removed it; use train.task_sampler",
        "rollout_group_key": "unknown key; platoon 0.3.0 removed it; use train.label_by",
        "straggler_policy_key": "unknown key; platoon 0.3.0 removed it; use train.label_by",
        "num_concurrent_rollout_workflow_workers": "unknown key; platoon 0.3.0 removed it; use "
        "train.max_concurrent_rollouts",
        "on_stale": "unknown key; not in this release: a stale group is dropped, and under a group admission rule "
        "the step takes another in its place",
        "steps": "unknown key; use train.max_training_steps (or train.num_epochs)",
        "checkpoint_every": "unknown key; use checkpoint.recovery_every (checkpoints a resume starts from, pruned) "
        "or checkpoint.every (kept for good)",
        "keep_checkpoints": "unknown key; use checkpoint.keep_recovery",
        "eval_every": "unknown key; use eval.every (and eval.at_start for step 0)",
        "straggler": "unknown key; use train.workflow_config.straggler_timeout_seconds and straggler_quorum (by "
        "label: straggler_policies)",
        "loss": "unknown key; use train.loss_fn (ppo, importance_sampling, cispo) and train.loss_fn_config "
        "(clip_low_threshold, clip_high_threshold, kl_coef, entropy_coef)",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = _TINKER_NO_EFFECT

    model_name: str = Field(
        ..., min_length=1,
        description="The policy: tiny (the built-in small transformer), a local Hugging Face checkpoint "
        "directory, or a model id already in the local Hugging Face cache (never downloaded).",
    )
    init_from: str | None = Field(
        None, min_length=1,
        description="A run directory (platoon sft's, or another run's) whose newest checkpoint's weights the policy "
        "starts from, the model named by model_name and shaped alike; null: model_name's own weights "
        "(docs/warm-start.md).",
    )
    renderer_name: str = Field(
        ..., min_length=1,
        description="How conversations become the model's tokens and completions become tool calls: role_colon "
        "(the tiny model's), or chat_template (the tokenizer's own chat template; 0.4.0's model-family names such "
        "as qwen3 read as it, the ones it cannot honour refused). docs/renderers.md.",
    )
    renderer_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="The renderer's options (chat_template: tool_call_parser, by default the "
        "one whose syntax the template writes; chat_template_kwargs, end_tokens, reasoning_markers, chat_template (a "
        "template of your own), tool_fallback; role_colon takes none).",
    )
    sample_timeout_seconds: float | None = Field(None, description="Tinker sampling calls (no effect here).")
    context_window_length: int | None = Field(
        None, ge=2, le=1_048_576,
        description="The tokens an episode's context may hold (an episode that fills it ends, graded); the tiny "
        "model's positions. Null: the model's own (the tiny model's: 256).",
    )
    batch_size: int = Field(32, ge=1, le=MAX_BATCH, description="Groups per step.")
    num_epochs: int | None = Field(
        None, ge=1, le=MAX_STEPS,
        description="Passes over the training tasks (ceil(tasks / batch_size) steps each); with "
        "max_training_steps the shorter wins. train refuses a config with neither.",
    )
    max_training_steps: int | None = Field(
        None, ge=1, le=MAX_STEPS, description="Training steps (policy updates) of the run; with num_epochs the "
        "shorter wins.",
    )
    num_minibatches: int = Field(
        1, ge=1, le=MAX_BATCH, description="Optimizer steps per batch; must be 1 beside an admission rule."
    )
    num_microbatches: int = Field(1, ge=1, le=MAX_BATCH, description="Tinker microbatches (no effect here).")
    max_staleness: int | None = Field(
        None,
        ge=0,
        le=MAX_STALENESS,
        description="How many policy versions a group may lag when trained; null: no bound (only the plan bounds "
        "drawing ahead).",
    )
    lora_rank: int = Field(32, ge=1, description="LoRA rank of the Tinker service (no effect here: the whole "
                                                 "model trains).")
    workflow_config: WorkflowConfig = Field(
        default_factory=WorkflowConfig, description="Each group's rollouts, what a group trains, rollout workers."
    )
    max_concurrent_rollouts: int | None = Field(
        None,
        ge=1,
        le=MAX_ROLLOUTS,
        description="Rollout permits; null: batch_size x the largest group size. Must hold one group.",
    )
    permit_release: Literal["rollout", "group"] = Field(
        "rollout",
        description="rollout: a permit comes back as its rollout ends; group: when its group's workflow "
        "returns (as in 0.3).",
    )
    max_starting_rollouts: int | None = Field(
        None,
        ge=1,
        le=MAX_ROLLOUTS,
        description="At most this many rollouts setting up at once, training's and evaluation's together "
        "(experimental); null: no limit.",
    )
    label_by: str | None = Field(
        None,
        description="The task column whose value labels a group (metrics, group limits, straggler policies); null: "
        "the entry's name.",
    )
    rollout_group_limits: dict[str, Annotated[int, Field(ge=1, le=MAX_ROLLOUTS)]] = Field(
        default_factory=dict, description="Label -> at most this many of its groups in flight at once."
    )
    task_sampler: str = Field(
        "auto",
        description="auto (weighted for a mixture, uniform for one environment), weighted, uniform, "
        "pass_rate, a name an environment's package registers, or module:Class.",
    )
    task_sampler_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of train.task_sampler, checked against its schema."
    )
    group_admission: str = Field(
        "all", description="all (admit every group), informative, a registered name, or module:Class."
    )
    group_admission_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of train.group_admission, e.g. {band: [0.1, 0.9]}."
    )
    refill: RefillConfig = Field(
        default_factory=RefillConfig, description="Refill under a group admission rule."
    )
    forward_backward_timeout_seconds: float = Field(5400.0, description="Tinker calls (no effect here).")
    optim_step_timeout_seconds: float = Field(300.0, description="Tinker calls (no effect here).")
    seed: int = Field(
        0, ge=INT64_MIN, le=INT64_MAX,
        description="The run's seed (a 64-bit integer): every random choice derives from it and a counter.",
    )
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig, description="Adam's settings (live backend's trainer)."
    )
    loss_fn: str = Field(
        DEFAULT_LOSS_FN,
        description=f"The policy-gradient loss, as Tinker defines it: {', '.join(sorted(LOSS_FNS))}.",
    )
    loss_fn_config: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_LOSS_FN_CONFIG),
        description="The loss's settings, replacing the default whole: clip_low_threshold and "
        "clip_high_threshold (absolute bounds on the probability ratio), and this project's own kl_coef "
        "(a KL penalty to the initial policy) and entropy_coef (an entropy bonus).",
    )
    inference: InferenceConfig = Field(
        default_factory=InferenceConfig, description="The engine rollouts sample from: builtin (the trainer's own "
        "model) or vllm servers, and how the trainer's weights reach them (docs/inference-engines.md).",
    )
    ray: RayConfig = Field(
        default_factory=RayConfig, description="The Ray cluster rollouts run on under workflow_config."
        "rollout_isolation: ray, and what each rollout actor holds (docs/scale-out.md).",
    )

    @field_validator("loss_fn")
    @classmethod
    def _implemented_loss(cls, v: str) -> str:
        if v in LOSS_FNS:
            return v
        known = ", ".join(sorted(LOSS_FNS))
        if v in TINKER_ONLY_LOSS_FNS:
            raise ValueError(f"{v!r} is a Tinker loss this trainer does not implement; one of {known}")
        raise ValueError(f"must be one of {known}, got {v!r}")


# --- environments ----------------------------------------------------------------------------------------------

_ENTRY_NO_EFFECT = frozenset({
    "trainer_config", "dataset_loader", "eval_dataset_loader", "task_loader", "rollout", "eval_rollout",
    "reward_processor", "workflow", "workflow_kwargs", "eval_workflow_kwargs", "service", "harness", "placement",
    "builtins", "on_context_overflow", "on_harness_exit", "program", "harness_options", "eval_overrides", "agents",
})


class EnvironmentConfig(_Config):
    """One environment entry: its tasks, its weight and group size, and optionally its own policy."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "group_size": "unknown key; use the entry's workflow_config.group_size",
        "env_options": "unknown key; use service_kwargs",
        "split": "unknown key; use dataset_kwargs.split_name",
        "eval_split": "unknown key; use eval_dataset_kwargs.split_name",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = _ENTRY_NO_EFFECT

    env: str = Field(
        "platoon-number-search", min_length=1,
        description="A registered environment (name or name@version), or module:Class.",
    )
    package: str | None = Field(
        None,
        description="A module to import before the run resolves components: it registers samplers, rules "
        "and environments.",
    )
    name: str | None = Field(
        None, min_length=1,
        description="The entry's label, required and unique in a mixture (null: default); no '::' and no control "
        "characters (it names metrics and is printed in comments).",
    )
    weight: float | Literal["tasks"] = Field(
        "tasks",
        description="The entry's share of the slots under weighted: tasks (its number of training tasks) or a "
        "positive number; a mixture's weights are all numbers or all tasks.",
    )
    task_sampler: str | None = Field(
        None,
        description="The entry's own sampler under weighted: uniform, pass_rate, a registered name or "
        "module:Class; null: uniform.",
    )
    task_sampler_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the entry's task_sampler."
    )
    group_admission: str | None = Field(None, description="The entry's own admission rule; null: the run's.")
    group_admission_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the entry's group_admission (only beside it)."
    )
    workflow_config: EntryWorkflowConfig = Field(
        default_factory=EntryWorkflowConfig,
        description="This entry's group_size, straggler keys, min_successful_group_size, leave_one_out_baseline and "
        "sampling parameters; each null one inherits train.workflow_config's.",
    )
    max_staleness: int | None = Field(
        None, ge=0, le=MAX_STALENESS, description="The entry's own staleness bound; null: the run's."
    )
    success_threshold: float = Field(1.0, description="A rollout passes when its reward is at least this.")
    seed: int = Field(
        0, ge=INT64_MIN, le=INT64_MAX, description="The entry's seed (a 64-bit integer), added to its sampler's "
        "decision key.",
    )
    dataset_kwargs: DatasetKwargs = Field(
        default_factory=DatasetKwargs, description="How the entry lists its training tasks: split_name (train), "
        "shuffle_seed, limit.",
    )
    eval_dataset_kwargs: DatasetKwargs = Field(
        default_factory=DatasetKwargs, description="How the entry lists its evaluation tasks: split_name (the "
        "environment's evaluation split), shuffle_seed, limit.",
    )
    exclude_tasks: list[str] = Field(
        default_factory=list, max_length=MAX_TASKS,
        description="The environment's task ids (no '<entry>::') left out of training and evaluation.",
    )
    tasks: list[str] | None = Field(
        None, max_length=MAX_TASKS, description="The environment's task ids (no '<entry>::') to train on, each once, "
        "of the listed split(s); null: every task listed.",
    )
    service_kwargs: dict[str, Any] = Field(default_factory=dict, description="The environment's own options.")
    sim: dict[str, Any] = Field(
        default_factory=dict,
        description="This entry's overrides of the run's sim block (simulator workload).",
    )
    trainer_config: str | None = Field(None, description="No effect here.")
    dataset_loader: str | None = Field(None, description="No effect here.")
    eval_dataset_loader: str | None = Field(None, description="No effect here.")
    task_loader: str | None = Field(None, description="No effect here.")
    rollout: str | None = Field(None, description="No effect here.")
    eval_rollout: str | None = Field(None, description="No effect here.")
    reward_processor: str | None = Field(None, description="No effect here.")
    workflow: str = Field("group_rollout", description="No effect here (every entry runs group rollouts).")
    workflow_kwargs: dict[str, Any] = Field(default_factory=dict, description="No effect here.")
    eval_workflow_kwargs: dict[str, Any] = Field(default_factory=dict, description="No effect here.")
    service: str | None = Field(None, description="An environment service (no effect here; env names it).")
    harness: str | dict[str, float] | None = Field(None, description="An agent harness (no effect here).")
    placement: Literal["task_sandbox", "local", "auto"] = Field("auto", description="No effect here.")
    builtins: Literal["keep", "disable", "default"] = Field("default", description="No effect here.")
    on_context_overflow: Literal["grade", "exclude"] = Field("grade", description="No effect here.")
    on_harness_exit: dict[str, str] = Field(default_factory=dict, description="No effect here.")
    program: str = Field("single", description="No effect here.")
    harness_options: dict[str, Any] = Field(default_factory=dict, description="No effect here.")
    eval_overrides: dict[str, Any] = Field(default_factory=dict, description="No effect here.")
    agents: dict[str, Any] = Field(default_factory=dict, description="No effect here.")

    @property
    def label(self) -> str:
        """The entry's label: its name, else ``default`` (a single entry may leave its name out)."""
        return self.name or "default"

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if any(unicodedata.category(c) == "Cc" for c in v):  # C0, DEL and C1: none survives YAML round trips
            raise ValueError(f"must not contain control characters, got {v!r}")
        if "::" in v:
            raise ValueError(f"must not contain '::' (it separates the entry from the task in a task id), got {v!r}")
        return v

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, v: object) -> object:
        if v == "tasks" and isinstance(v, str):
            return v
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"must be a positive number or 'tasks', got {v!r}")
        if not MIN_WEIGHT <= v <= MAX_WEIGHT:
            raise ValueError(f"must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g} (only ratios matter), got {v!r}")
        return float(v)

    @field_validator("tasks", "exclude_tasks", mode="before")
    @classmethod
    def _task_ids(cls, v: object) -> object:
        # YAML reads an unquoted id such as 17 as an int; a task id is its text either way.
        if isinstance(v, list):
            return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        return v

    @field_validator("tasks")
    @classmethod
    def _once(cls, v: list[str] | None) -> list[str] | None:
        first: dict[str, int] = {}
        for i, task in enumerate(v or ()):
            if task in first:
                raise ValueError(f"task {task!r} is listed twice (items {first[task]} and {i}); list each task once")
            first[task] = i
        return v


def _default_environments() -> list[EnvironmentConfig]:
    return [EnvironmentConfig()]


# --- model -----------------------------------------------------------------------------------------------------


class ModelConfig(_Config):
    """The built-in model's shape and the model service (``train.model_name`` chooses the model)."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "kind": "unknown key; use train.model_name (tiny, a local checkpoint directory or a cached model id)",
        "path": "unknown key; use train.model_name (a local checkpoint directory or a cached model id)",
        "temperature": "unknown key; use train.workflow_config.rollout_config.inference_params.temperature",
        "max_new_tokens": "unknown key; use train.workflow_config.rollout_config.inference_params."
        "max_completion_tokens",
        "lr": "unknown key; use train.optimizer.learning_rate",
        "weight_decay": "unknown key; use train.optimizer.weight_decay",
        "grad_clip": "unknown key; use train.optimizer.grad_clip_norm (0: no clipping)",
    }

    d_model: int = Field(64, ge=1, le=MAX_MODEL["d_model"], description="tiny: width of the transformer; a multiple of n_heads.")
    n_layers: int = Field(2, ge=1, le=MAX_MODEL["n_layers"], description="tiny: transformer layers.")
    n_heads: int = Field(4, ge=1, le=MAX_MODEL["n_heads"], description="tiny: attention heads.")
    copying: bool = Field(False, description="tiny: a copying read-out beside the vocabulary's (a pointer over the "
                       "context), so the model can write a token it has only read, such as an item name no training "
                       "task wrote (docs/live-backend.md).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu.")
    max_batch: int = Field(256, ge=1, le=MAX_MODEL["max_batch"], description="The model service's largest batch of sequences.")


# --- the run ---------------------------------------------------------------------------------------------------


class RunConfig(_Config):
    """A whole run: ``platoon simulate`` and ``platoon train`` read the same file (platoon 0.4.0's training config,
    with this project's ``model`` and ``sim`` sections)."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "inference": "unknown key; inference is the platoon eval config's section, not a training config's",
    }
    NO_EFFECT: ClassVar[frozenset[str]] = frozenset({"tinker_base_url"})

    train: TrainConfig = Field(..., description="The trainer and the dispatch policy.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation during training.")
    log_path: str | None = Field(
        None, min_length=1,
        description="Runs go to log_path/stats.experiment_name/stats.trial_name (--out names the directory "
        "instead); config validate, and train without --out, require it (simulate without either writes "
        "runs/sim-<config>-<n>).",
    )
    tinker_base_url: str | None = Field(None, description="A Tinker service (no effect here).")
    environments: list[EnvironmentConfig] = Field(
        default_factory=_default_environments, description="The environment entries (at least one)."
    )
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="When checkpoints are written.")
    stats: StatsConfig = Field(default_factory=StatsConfig, description="The run directory's name, loggers.")
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig, description="No effect here.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The built-in model's shape, the model "
                                                                       "service (live backend).")
    sim: SimConfig = Field(default_factory=SimConfig, description="The workload model (simulator).")
    trace: TraceConfig = Field(default_factory=TraceConfig, description="The run's timeline, trace.json (both "
                                                                       "runtimes).")
    sft: SftConfig = Field(default_factory=SftConfig, description="Supervised fine-tuning on demonstrations "
                                                                  "(platoon sft).")

    @field_validator("environments", mode="before")
    @classmethod
    def _a_list(cls, v: object) -> object:
        if isinstance(v, dict):
            raise ValueError("must be a list of entries (a mapping is refused: write '- name: ...' items)")
        return v

    @field_validator("environments")
    @classmethod
    def _some(cls, v: list[EnvironmentConfig]) -> list[EnvironmentConfig]:
        if not v:
            raise ValueError("at least one environment entry is required")
        return v


EMBEDDED_DEFAULT: dict[str, Any] = {
    "train": {
        "model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 300, "batch_size": 32,
        "max_staleness": 1, "optimizer": {"learning_rate": 0.003}, "loss_fn": "ppo",
        "loss_fn_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28, "entropy_coef": 0.003},
    },
    "eval": {"every": 50, "at_start": True},
    "checkpoint": {"recovery_every": 50, "keep_recovery": 3},
    "environments": [{"env": "platoon-number-search", "service_kwargs": {"show_range": True}}],
}
"""The config a command runs without a file (``train``, ``sft``, ``eval``, ``config show``; ``simulate`` takes a
preset instead): the CPU demo. The tiny model on ``platoon-number-search`` (groups of 8; each answer shows the range still open), 300 steps
of 32 groups at most one version stale, held-out pass@1 every 50 steps, and a learning rate, loss and clip range for
the tiny model (0.4.0's defaults, cispo at learning rate 3e-5, are tuned for LoRA on large models): ppo with the ratio
clipped to [0.8, 1.28] and an entropy bonus of 0.003. Through the tool-calling harness and ``role_colon`` (seed 0,
shared cores): held-out pass@1 0.000 at step 0 (it has to learn to call the tool first), 0.535 at step 200 and 0.652
at the end (docs/live-backend.md, "Does it learn?"). A config file starts from the schema's defaults (0.4.0's), not
from this: ``config show`` prints this as a file to start from."""


def schema_defaults() -> RunConfig:
    """What a config file starts from: every key at the schema's default (0.4.0's), the required train keys as the
    embedded default's."""
    return RunConfig.model_validate({"train": {k: EMBEDDED_DEFAULT["train"][k] for k in ("model_name", "renderer_name")}})


def default_config() -> RunConfig:
    """``EMBEDDED_DEFAULT`` as a config: what a command without a config file runs, and ``config show`` prints."""
    return RunConfig.model_validate(EMBEDDED_DEFAULT)


__all__ = [
    "Duration",
    "EmpiricalDuration",
    "EMBEDDED_DEFAULT",
    "EnvironmentConfig",
    "default_config",
    "schema_defaults",
    "ExponentialDuration",
    "FixedDuration",
    "InferenceConfig",
    "LaunchConfig",
    "LognormalDuration",
    "ModelConfig",
    "OptimizerConfig",
    "RefillConfig",
    "RunConfig",
    "SimConfig",
    "SimLearningConfig",
    "SimPopulationConfig",
    "SimRolloutConfig",
    "SimTrainerConfig",
    "StatsConfig",
    "CheckpointConfig",
    "EvalConfig",
    "DatasetKwargs",
    "EntryWorkflowConfig",
    "WatchdogConfig",
    "TrainConfig",
    "WorkflowConfig",
]
