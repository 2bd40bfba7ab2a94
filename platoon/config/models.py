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

Below the models, ``describe_errors`` turns pydantic's errors into ``<dotted.path>: message`` lines. It sits here,
beside the schema whose hints it reads, because the loader, the core option checks (``components``) and stage 2
(``resolve``) all need it and this is the one module below all three; that is why the module runs past 400 lines.
"""

from __future__ import annotations

import difflib
import math
import re
import types
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from platoon.config.bounds import (
    INT64_MAX,
    INT64_MIN,
    MAX_BATCH,
    MAX_GROUP,
    MAX_GROUPS_PER_STEP,
    MAX_MODEL,
    MAX_ROLLOUTS,
    MAX_SECONDS,
    MAX_STALENESS,
    MAX_STEPS,
    MAX_TASKS,
    MAX_WEIGHT,
    MIN_WEIGHT,
)
from platoon.config.losses import DEFAULT_LOSS_FN, DEFAULT_LOSS_FN_CONFIG, LOSS_FNS, TINKER_ONLY_LOSS_FNS
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


class _Config(BaseModel):
    """Base of every config model: frozen, strict, unknown keys refused (with the class's hints), floats finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {}
    """Unknown key -> the whole message after ``<path>: `` (starting ``unknown key; ...``)."""


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


_DOTTED_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class WorkflowConfig(_Config):
    """How a group's rollouts are credited and filtered into training datums, and how rollout workers start.

    A rollout's advantage is its reward minus the group's mean reward (with ``leave_one_out_baseline``, the mean of
    the other members), over the members that completed with a score; no division by the rewards' spread.
    """

    leave_one_out_baseline: bool = Field(
        False,
        description="Center each rollout's reward on the mean of the other scored members rather than the whole "
        "group's (a group with one scored member: advantage 0).",
    )
    filter_zero_advantage_datums: bool = Field(
        True,
        description="Leave datums whose advantage is 0 out of the trainer's forward and backward passes (their "
        "tokens still count in the loss's denominator, so no gradient changes); only under a loss_fn_config "
        "without kl_coef or entropy_coef. Either way a step whose every advantage is 0 takes no optimizer "
        "update and keeps its policy version.",
    )
    min_successful_group_size: int = Field(
        1,
        ge=1,
        le=MAX_GROUP,
        description="Fewest members of a group that must complete with a score for it to train; a group with "
        "fewer trains no datums (verdict below_min). At most every entry's group_size.",
    )

    worker_preload: list[str] = Field(
        default_factory=list,
        description="Extra modules (dotted names) the workers' fork server imports before it forks them: modules "
        "an environment imports only when it opens.",
    )
    worker_start_method: Literal["forkserver", "fork", "spawn", "exec"] = Field(
        "forkserver", description="How rollout workers start; under exec nothing is imported ahead."
    )
    rollout_isolation: Literal["inprocess", "process"] = Field(
        "inprocess",
        description="inprocess: rollouts run in the trainer's process; process: in worker processes.",
    )
    worker_startup_budget_seconds: float = Field(
        300.0, gt=0, le=MAX_SECONDS, description="How long a worker may take to start before it counts as failed, in seconds."
    )

    @field_validator("worker_preload")
    @classmethod
    def _modules(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if not _DOTTED_MODULE.fullmatch(m)]
        if bad:
            raise ValueError(f"must be dotted module names such as pkg.mod, got {', '.join(map(repr, bad))}")
        return v


class StragglerConfig(_Config):
    """A deadline against runaway rollouts, not a throughput lever.

    When set, a group's rollouts that run ``timeout_s`` past their own start (shifted by each member's start delay
    under rolling starts) are cancelled once ``quorum`` members have finished; what it cancels is logged as
    censoring (``train/batch/censoring/*``). Cutting stragglers biases a group toward its fast rollouts; raise the
    permits or the staleness bound for throughput instead.
    """

    timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Cancel a rollout this many seconds after its start once the quorum has finished; "
        "null: no straggler policy (a deadline against runaway rollouts, not a throughput lever).",
    )
    quorum: int | None = Field(
        None,
        ge=1,
        le=MAX_GROUP,
        description="Members of a group that must finish before stragglers are cut; null: group_size - 1.",
    )


class TrainConfig(_Config):
    """The trainer and the dispatch policy: what is drawn, when it starts, what a step trains."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "task_order": "unknown key; platoon 0.4.0 removed it; use train.task_sampler",
        "rollout_group_key": "unknown key; platoon 0.3.0 removed it; use train.label_by",
        "num_concurrent_rollout_workflow_workers": "unknown key; use train.max_concurrent_rollouts",
        "on_stale": "unknown key; not in this release: a stale group is dropped, and under a group admission rule "
        "the step takes another in its place",
        "loss": "unknown key; use train.loss_fn (ppo, importance_sampling, cispo) and train.loss_fn_config "
        "(clip_low_threshold, clip_high_threshold, kl_coef, entropy_coef)",
    }

    steps: int = Field(100, ge=1, le=MAX_STEPS, description="Training steps (policy updates) of the run.")
    batch_size: int = Field(32, ge=1, le=MAX_BATCH, description="Groups per step.")
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
    max_staleness: int | None = Field(
        1,
        ge=0,
        le=MAX_STALENESS,
        description="How many policy versions a group may lag when trained; null: only the plan bounds "
        "drawing ahead.",
    )
    max_starting_rollouts: int | None = Field(
        None,
        ge=1,
        le=MAX_ROLLOUTS,
        description="At most this many rollouts setting up at once (experimental); null: no limit.",
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
    num_minibatches: int = Field(
        1, ge=1, le=MAX_BATCH, description="Optimizer steps per batch; must be 1 beside an admission rule."
    )
    seed: int = Field(
        0, ge=INT64_MIN, le=INT64_MAX,
        description="The run's seed (a 64-bit integer): every random choice derives from it and a counter.",
    )
    checkpoint_every: int = Field(10, ge=1, le=MAX_STEPS, description="Write a full checkpoint every this many steps.")
    keep_checkpoints: int | None = Field(
        3, ge=1, le=MAX_STEPS, description="Full checkpoints to keep on disk: the newest this many (a resume goes on "
        "from the newest that reads back; the older ones are its fallbacks); null: keep every one.",
    )
    eval_every: int | None = Field(
        10, ge=1, le=MAX_STEPS, description="Evaluate held-out pass@1 every this many steps; null: never."
    )
    label_by: str | None = Field(
        None,
        description="The task column whose value labels a group (metrics, group limits); null: the entry's name.",
    )
    rollout_group_limits: dict[str, Annotated[int, Field(ge=1, le=MAX_ROLLOUTS)]] = Field(
        default_factory=dict, description="Label -> at most this many of its groups in flight at once."
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
    workflow_config: WorkflowConfig = Field(
        default_factory=WorkflowConfig,
        description="How a group's rollouts become datums (baseline, filters) and how rollout workers start.",
    )
    straggler: StragglerConfig = Field(
        default_factory=StragglerConfig, description="A deadline against runaway rollouts (off by default)."
    )


# --- environments ----------------------------------------------------------------------------------------------


class EnvironmentConfig(_Config):
    """One environment entry: a label, its tasks, its weight and group size, and optionally its own policy."""

    name: str = Field(
        ..., min_length=1,
        description="The entry's label, unique across entries ('/' allowed; no control characters: it names "
        "metrics and is printed in comments).",
    )
    env: str = Field("number_search", min_length=1, description="A registered environment, or module:Class.")
    package: str | None = Field(
        None,
        description="A module to import before the run resolves components: it registers samplers, rules "
        "and environments.",
    )
    weight: float | Literal["tasks"] = Field(
        1.0,
        description="The entry's share of the slots under weighted: a positive number, or tasks (its number "
        "of training tasks).",
    )
    group_size: int = Field(8, ge=1, le=MAX_GROUP, description="Rollouts per group.")
    success_threshold: float = Field(1.0, description="A rollout passes when its reward is at least this.")
    seed: int = Field(
        0, ge=INT64_MIN, le=INT64_MAX, description="The entry's seed (a 64-bit integer), added to its sampler's "
        "decision key.",
    )
    split: str = Field("train", description="The environment's split the entry trains on.")
    eval_split: str = Field("heldout", description="The split held-out pass@1 is measured on.")
    tasks: list[str] | None = Field(
        None, max_length=MAX_TASKS, description="Task ids to train on, each once; null: the whole split."
    )
    env_options: dict[str, Any] = Field(default_factory=dict, description="Passed to the environment as is.")
    max_staleness: int | None = Field(
        None, ge=0, le=MAX_STALENESS, description="The entry's own staleness bound; null: the run's."
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
    sim: dict[str, Any] = Field(
        default_factory=dict,
        description="This entry's overrides of the run's sim block (simulator workload).",
    )

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v: str) -> str:
        bad = sorted({c for c in v if ord(c) < 32 or ord(c) == 127})
        if bad:
            raise ValueError(f"must not contain control characters, got {v!r}")
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

    @field_validator("tasks", mode="before")
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
    return [EnvironmentConfig(name="number-search", env="number_search", group_size=8)]


# --- model -----------------------------------------------------------------------------------------------------


class ModelConfig(_Config):
    """The live policy. ``tiny`` is the built-in small transformer the CPU demo trains; ``hf`` loads a local
    Hugging Face checkpoint (the ``hf`` extra)."""

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {
        "lr": "unknown key; use train.optimizer.learning_rate",
        "weight_decay": "unknown key; use train.optimizer.weight_decay",
        "grad_clip": "unknown key; use train.optimizer.grad_clip_norm (0: no clipping)",
    }

    kind: Literal["tiny", "hf"] = Field(
        "tiny", description="tiny: the built-in small policy; hf: a local checkpoint."
    )
    path: str | None = Field(None, min_length=1, description="For hf: a local directory holding the checkpoint.")
    d_model: int = Field(64, ge=1, le=MAX_MODEL["d_model"], description="tiny: width of the transformer; a multiple of n_heads.")
    n_layers: int = Field(2, ge=1, le=MAX_MODEL["n_layers"], description="tiny: transformer layers.")
    n_heads: int = Field(4, ge=1, le=MAX_MODEL["n_heads"], description="tiny: attention heads.")
    temperature: float = Field(1.0, gt=0, le=100, description="Sampling temperature of training rollouts.")
    max_new_tokens: int = Field(8, ge=1, le=MAX_MODEL["max_new_tokens"], description="Tokens a rollout's model call may generate.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu.")
    max_batch: int = Field(256, ge=1, le=MAX_MODEL["max_batch"], description="The model service's largest batch of sequences.")


# --- the run ---------------------------------------------------------------------------------------------------


class RunConfig(_Config):
    """A whole run: ``platoon simulate`` and ``platoon train`` read the same file."""

    train: TrainConfig = Field(
        default_factory=TrainConfig, description="The trainer and the dispatch policy."
    )
    environments: list[EnvironmentConfig] = Field(
        default_factory=_default_environments, description="The environment entries (at least one)."
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The live policy (live backend).")
    sim: SimConfig = Field(default_factory=SimConfig, description="The workload model (simulator).")

    @field_validator("environments")
    @classmethod
    def _some(cls, v: list[EnvironmentConfig]) -> list[EnvironmentConfig]:
        if not v:
            raise ValueError("at least one environment entry is required")
        return v


# --- problems: pydantic's errors as ``<dotted.path>: <message>`` lines ----------------------------------------------


class Problem(NamedTuple):
    """One problem of a config: its dotted key path and what is wrong there; ``str()`` is the report line."""

    path: str
    message: str
    loc: tuple[str | int, ...] = ()
    """The path as keys and list indices into the data that was validated (without the prefix)."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


MISSING_KEY = "missing required key"

_TYPE_WORDS = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "string_too_short": "must not be empty",
    "finite_number": "must be a finite number",
}


def show_value(v: object) -> str:
    """A value as a YAML reader wrote it: ``null``, ``true``, ``'text'``, ``3``, or ``a mapping``/``a list``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list | tuple):
        return "a list"
    return repr(v)


def describe_errors(exc: ValidationError, *, root: Any, data: Any, prefix: str = "") -> list[Problem]:
    """Translate every error of ``exc`` (from validating ``data`` as ``root``) into a Problem.

    Paths follow the data, not pydantic's locations: a discriminated union's tag and pydantic's internal names
    are left out, so ``sim.rollout.duration.fixed.value_s`` reads ``sim.rollout.duration.value_s``. An unknown key
    gets its model's ``UNKNOWN_KEY_HINTS`` message, else a did-you-mean among the model's fields.
    """
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = _data_loc(err["loc"], data, err["type"])
        path = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc)
        out.append(Problem(path, _message(err, root, loc, data), loc))
    return out


def _data_loc(loc: tuple[Any, ...], data: Any, kind: str) -> tuple[str | int, ...]:
    node, out = data, []
    for i, el in enumerate(loc):
        if isinstance(node, dict) and el in node:
            out.append(el)
            node = node[el]
        elif isinstance(node, list) and isinstance(el, int) and 0 <= el < len(node):
            out.append(el)
            node = node[el]
        elif i == len(loc) - 1 and kind == "missing" and isinstance(node, dict):
            out.append(el)
        # anything else is a union tag or one of pydantic's own names ("[key]", "function-after[...]")
    return tuple(out)


def _message(err: Any, root: Any, loc: tuple[str | int, ...], data: Any) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return MISSING_KEY
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        model = model_at(root, loc[:-1], data)
        if model is None:
            return "unknown key"
        hint = getattr(model, "UNKNOWN_KEY_HINTS", {}).get(key)
        if hint:
            return hint
        close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
        return f"unknown key; did you mean {close[0]!r}?" if close else "unknown key"
    if kind in ("value_error", "assertion_error"):
        msg = str(err["msg"])
        return msg.split(", ", 1)[1] if msg.startswith(("Value error, ", "Assertion failed, ")) else msg
    if kind == "union_tag_invalid":
        return f"dist must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}"
    if kind == "union_tag_not_found":
        return f"needs a dist: one of {', '.join(_DIST_TAGS)}"
    if err["loc"] and err["loc"][-1] == "[key]":
        text = "a key here must be a string"
    elif kind == "float_type" and _reads_as_float(err.get("input")):
        return (f"must be a number; YAML reads {err['input']} as text, since its floats need a dot and a signed "
                f"exponent: write {_as_yaml_float(err['input'])}")
    elif kind in _TYPE_WORDS:
        text = _TYPE_WORDS[kind]
    elif kind in ("greater_than_equal", "less_than_equal") and ctx.get("ge", ctx.get("le")) in (INT64_MIN, INT64_MAX):
        text = "must be a 64-bit integer, from -2**63 to 2**63 - 1"
    elif kind == "greater_than_equal":
        text = f"must be at least {ctx['ge']}"
    elif kind == "greater_than":
        text = f"must be above {ctx['gt']}"
    elif kind == "less_than_equal":
        text = f"must be at most {ctx['le']}"
    elif kind == "less_than":
        text = f"must be below {ctx['lt']}"
    elif kind == "literal_error":
        text = f"must be {ctx['expected']}"
    elif kind == "string_pattern_mismatch":
        text = f"must match {ctx['pattern']}"
    else:
        msg = str(err["msg"])
        text = msg[:1].lower() + msg[1:]
    return f"{text}, got {show_value(err.get('input'))}"


_EXPONENT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _reads_as_float(v: object) -> bool:
    """Whether ``v`` is text that YAML 1.2 would read as a float and PyYAML (YAML 1.1) reads as text: ``1e308``."""
    return isinstance(v, str) and _EXPONENT_TEXT.fullmatch(v) is not None


def _as_yaml_float(text: str) -> str:
    """``1e308`` as YAML 1.1 reads it as a float: ``1.0e+308``."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent and exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}" if exponent else mantissa


def model_at(root: Any, loc: tuple[str | int, ...], data: Any) -> type[BaseModel] | None:
    """The model class that validates the node at ``loc`` of ``data`` (a union picked by the node's ``dist``)."""
    t: Any = root
    node = data
    for el in loc:
        t = _unwrap(t, node)
        if isinstance(t, type) and issubclass(t, BaseModel):
            field = t.model_fields.get(el) if isinstance(el, str) else None
            if field is None:
                return None
            t = field.annotation
        elif get_origin(t) in (list, dict):
            t = get_args(t)[-1]
        else:
            return None
        try:
            node = node[el]
        except (KeyError, IndexError, TypeError):
            node = None
    t = _unwrap(t, node)
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _unwrap(t: Any, node: Any) -> Any:
    while True:
        origin = get_origin(t)
        if origin is Annotated:
            t = get_args(t)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(t) if a is not type(None)]
            if len(members) == 1:
                t = members[0]
                continue
            tag = node.get("dist") if isinstance(node, dict) else None
            for m in members:
                m = _unwrap(m, None)
                if isinstance(m, type) and issubclass(m, BaseModel) and "dist" in m.model_fields:
                    if tag in get_args(m.model_fields["dist"].annotation):
                        return m
            return None
        else:
            return t


_DIST_TAGS = ("fixed", "exponential", "lognormal", "empirical")


__all__ = [
    "Duration",
    "EmpiricalDuration",
    "EnvironmentConfig",
    "ExponentialDuration",
    "FixedDuration",
    "LognormalDuration",
    "ModelConfig",
    "OptimizerConfig",
    "Problem",
    "RefillConfig",
    "RunConfig",
    "SimConfig",
    "SimLearningConfig",
    "SimPopulationConfig",
    "SimRolloutConfig",
    "SimTrainerConfig",
    "StragglerConfig",
    "TrainConfig",
    "WorkflowConfig",
    "describe_errors",
    "model_at",
    "show_value",
]
