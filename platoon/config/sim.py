"""The simulator's section of the run config (``sim:``): the workload model ``platoon simulate`` runs.

Owns ``SimConfig`` and its parts. ``platoon.config.models`` imports them into ``RunConfig``; this module imports
nothing of the config layer, so that the two cannot import each other in a circle (its base class repeats
``models._Config``'s three settings for that reason).

The model, in one paragraph (docs/simulator.md has the long form): a rollout holds its permit for a start-up
(``rollout.first_call_s``, shared by every start-up running at once when ``rollout.startup_capacity`` is set) and then
its run: either one drawn duration (``rollout.duration``, or ``fail_duration`` for a failing one) times its task's
length multiplier, or, with ``rollout.turns``, its turns, each a model call queued at the batching model service
(``service``: a batch of n takes ``base_s + per_sequence_s x n``; under ``train.inference.engine: vllm`` the
engine's servers, each batching continuously and paused for ``pause_s`` at each publish) and an environment step (``rollout.env_step_s``,
times the length multiplier); it then tears down in the background (``rollout.teardown_s``). It passes with its task's pass rate, ``sigmoid(ability +
skill - difficulty)`` under the learning model, or the rate a task file gives. Training a step takes ``step_s +
per_datum_s x datums`` of work (in turns mode done at 1/(1 + ``service_slowdown``) of its speed while the model
service runs a batch), publishing ``publish_s`` and an evaluation, where the schedule has one, ``eval_s``. Every
informative group a step trains adds ``gain`` to its task's skill and ``gain x transfer`` to the policy's ability,
which held-out tasks share (``eval/pass@1``).

Rules the models keep: frozen, strict, unknown keys refused, every field described; durations are a union
discriminated on ``dist``; files are named relative to the config that names them (the loader makes them absolute).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from platoon.config.bounds import (
    MAX_GPUS,
    MAX_LOGIT,
    MAX_SECONDS,
    MAX_SIGMA,
    MAX_SLOWDOWN,
    MAX_TASKS,
    MIN_STARTUP_CAPACITY,
)


class _SimModel(BaseModel):
    """Base of the sim models: frozen, strict, unknown keys refused, floats finite (as ``models._Config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    UNKNOWN_KEY_HINTS: ClassVar[dict[str, str]] = {}


# --- durations -------------------------------------------------------------------------------------------------


class FixedDuration(_SimModel):
    """Always the same duration."""

    dist: Literal["fixed"] = Field(description="fixed")
    value_s: float = Field(ge=0, le=MAX_SECONDS, description="The duration, in seconds.")


class ExponentialDuration(_SimModel):
    """Exponentially distributed durations."""

    dist: Literal["exponential"] = Field(description="exponential")
    mean_s: float = Field(gt=0, le=MAX_SECONDS, description="The mean, in seconds.")


class LognormalDuration(_SimModel):
    """Log-normally distributed durations (long-tailed, as agentic rollouts are): ``median_s x exp(sigma x Z)``."""

    dist: Literal["lognormal"] = Field(description="lognormal")
    median_s: float = Field(gt=0, le=MAX_SECONDS, description="The median, in seconds.")
    sigma: float = Field(ge=0, le=MAX_SIGMA, description="The standard deviation of the log of the duration.")


class EmpiricalDuration(_SimModel):
    """Durations resampled from measurements: a file of seconds (one a line, a JSON list, or a CSV with a
    ``seconds`` column) or inline values."""

    dist: Literal["empirical"] = Field(description="empirical")
    file: str | None = Field(None, min_length=1, description="A file of measured durations in seconds (relative to the config).")
    values: list[Annotated[float, Field(ge=0, le=MAX_SECONDS)]] | None = Field(None, description="Measured durations in seconds.")

    @model_validator(mode="after")
    def _one_source(self) -> EmpiricalDuration:
        if (self.file is None) == (self.values is None):
            raise ValueError("give exactly one of file and values")
        if self.values is not None and not self.values:
            raise ValueError("values must hold at least one duration")
        return self


Duration = Annotated[
    FixedDuration | ExponentialDuration | LognormalDuration | EmpiricalDuration, Field(discriminator="dist")
]
"""A duration distribution: ``{dist: fixed|exponential|lognormal|empirical, ...}``."""


# --- parts -----------------------------------------------------------------------------------------------------

MAX_TURNS = 1_000_000
"""A rollout's model calls (``model_calls``, a ``turns`` count)."""

Turns = Annotated[int, Field(ge=1, le=MAX_TURNS)]


def _one_problem(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One problem for a bad turn count, not one per member of the union."""
    try:
        return handler(value)
    except ValidationError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"must be an integer from 1 to {MAX_TURNS:,}, or a non-empty list of them; got {shown}") \
            from None


TurnCount = Annotated[Turns | Annotated[list[Turns], Field(min_length=1, max_length=MAX_TURNS)],
                      WrapValidator(_one_problem)]
"""A number of turns, or an empirical distribution of them (a list, drawn from uniformly)."""


class SimTurnsConfig(_SimModel):
    """How many turns (model calls, each followed by an environment step) a rollout makes, by its outcome: an int,
    or a list drawn from (the measured turn counts of a live run's passing and failing rollouts)."""

    passing: TurnCount = Field(description="Turns of a rollout that passes: an int, or a list drawn from.")
    failing: TurnCount = Field(description="Turns of a rollout that fails: an int, or a list drawn from.")


TURNS_REPLACE = ("duration", "fail_duration", "model_calls")
"""The keys of ``rollout`` that ``turns`` replaces: with turns set they have no effect (a warning says so)."""


class SimRolloutConfig(_SimModel):
    """How long a simulated rollout takes and how it ends."""

    duration: Duration = Field(
        default_factory=lambda: LognormalDuration(dist="lognormal", median_s=30.0, sigma=0.5),
        description="The duration of a rollout from its first model call to its end (times its task's length).",
    )
    fail_duration: Duration | None = Field(
        None, description="A different duration for failing rollouts; null: the same as duration."
    )
    timeout_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="The harness's own time limit: a rollout still running this many seconds after its "
        "first model call ends there, failing; null: none.",
    )
    error_rate: float = Field(
        0.0, ge=0, le=1, description="Share of rollouts that raise; the group cancels its other rollouts and fails."
    )
    invalid_rate: float = Field(
        0.0, ge=0, le=1, description="Share of rollouts that end without a valid reward (censored: neither pass nor "
        "fail)."
    )
    model_calls: int = Field(8, ge=1, le=MAX_TURNS, description="Model calls a rollout makes, spread over its duration "
                             "(recorded, not timed; with turns set, no effect).")
    turns: SimTurnsConfig | None = Field(
        None, description="null: a rollout's run is one drawn duration (duration, fail_duration). A mapping "
        "{passing, failing}: it makes that many turns instead, each a model call queued at the model service (sim."
        "service) and an environment step (env_step_s); duration, fail_duration and model_calls have no effect.",
    )
    env_step_s: Duration | None = Field(
        None, description="With turns: the environment step after each model call (times its task's length); "
        "null: none.",
    )
    first_call_s: Duration | None = Field(
        None, description="Start-up before a rollout's first model call (worker, sandbox, toolchain), as the work "
        "one start-up alone takes; null: none.",
    )
    startup_capacity: float | None = Field(
        None, ge=MIN_STARTUP_CAPACITY, le=1_048_576, description="Start-ups share this capacity: with n > capacity starting at once, each runs at "
        "capacity/n of its speed (a shared filesystem, a sandbox service); null: no contention.",
    )
    teardown_s: Duration | None = Field(
        None, description="Background teardown after a rollout ends; under permit_release: rollout its permit waits "
        "for it (at most 60 s); null: none.",
    )
    length_sigma: float = Field(
        0.0, ge=0, le=MAX_SIGMA, description="Each synthesized task's length multiplier is exp(length_sigma x Z), fixed per task "
        "(some tasks are always long); 0: every task 1. A task file's length column overrides it.",
    )


class SimTrainerConfig(_SimModel):
    """How long a simulated training step takes: step_s + per_datum_s x datums (its work), slowed while the model
    service runs a batch beside it (service_slowdown), then publish_s."""

    step_s: float = Field(10.0, ge=0, le=MAX_SECONDS, description="The fixed part of a step, in seconds.")
    per_datum_s: float = Field(0.05, ge=0, le=MAX_SECONDS, description="Seconds per trained datum (valid rollout).")
    publish_s: float = Field(2.0, ge=0, le=MAX_SECONDS, description="Seconds to publish new weights to the model service.")
    eval_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="Seconds an evaluation takes: the trainer evaluates "
                          "before each step the schedule evaluates (eval.every, eval.at_start) and after the last.")
    service_slowdown: float = Field(
        0.0, ge=0, le=MAX_SLOWDOWN, description="Turns mode: while the model service runs a batch, training "
        "progresses at 1/(1 + service_slowdown) of its speed (the two share the machine; the hand-off between "
        "batches, publishing and evaluating are not slowed); 0: the service does not slow it.",
    )


MAX_SERVICE_BATCH = 1_048_576
"""``sim.service.max_batch``: as many sequences as rollouts may run at once."""


class SimServiceConfig(_SimModel):
    """The model service of turns mode (``rollout.turns``), as ``train.inference.engine`` deploys it. ``builtin``: one
    batching service that, whenever idle with requests queued, takes up to ``max_batch`` of them, oldest first, and
    answers them all after ``base_s + per_sequence_s x n``. ``vllm``: the engine's servers (as many as
    ``train.inference`` lists or launches), each batching continuously: with n requests running each progresses at
    1/(base_s + per_sequence_s x n) of a request a second (at most ``max_batch`` run, the rest wait), and every
    server pauses for the last ``pause_s`` of each publish."""

    base_s: float = Field(2.0, ge=0, le=MAX_SECONDS, description="The fixed part of one batch (vllm: of one "
                          "request's time), in seconds.")
    per_sequence_s: float = Field(0.02, ge=0, le=MAX_SECONDS, description="Seconds each sequence of a batch adds "
                                  "(vllm: each request running beside it at its server).")
    max_batch: int = Field(256, ge=1, le=MAX_SERVICE_BATCH, description="The most sequences one batch takes "
                           "(vllm: that run at once at a server, vLLM's --max-num-seqs).")
    handoff_s: float = Field(
        0.0, ge=0, le=MAX_SECONDS, description="Seconds the service stays busy after each batch (answers handed "
        "back, the next batch taken in) before it starts the next; 0: at once (builtin only).",
    )
    pause_s: float = Field(
        0.0, ge=0, le=MAX_SECONDS, description="vllm: seconds every server is paused at each publish (the weights "
        "reloaded), the publish's last part, at most sim.trainer.publish_s; requests in flight then are re-sent "
        "or kept as train.inference.in_flight says; 0: no pause.",
    )


class SimPopulationConfig(_SimModel):
    """The synthesized tasks of an entry that lists none and names no task file: ids ``<entry>/<n>``, each with a
    difficulty drawn once from Normal(difficulty_mean, difficulty_sd) (a logit)."""

    tasks: int = Field(256, ge=1, le=MAX_TASKS, description="Training tasks of each entry that lists none.")
    heldout: int = Field(64, ge=0, le=MAX_TASKS, description="Held-out tasks of each entry, for eval/pass@1 (0: no eval).")
    difficulty_mean: float = Field(0.0, ge=-MAX_LOGIT, le=MAX_LOGIT, description="Mean task difficulty (logit): 0 starts near a 50% pass rate.")
    difficulty_sd: float = Field(1.5, ge=0, le=MAX_LOGIT / 5, description="Spread of task difficulties (logit).")


class SimLearningConfig(_SimModel):
    """How simulated training changes pass rates: ``p = sigmoid(ability + skill[task] - difficulty[task])``."""

    enabled: bool | None = Field(
        None, description="null: on, unless sim.tasks names a task file (whose pass rates then stay fixed); "
        "false: pass rates never change (a pure throughput study).",
    )
    gain: float = Field(
        0.05, ge=0, le=MAX_LOGIT, description="Logit increase of a task's pass rate per informative group a step trains on it."
    )
    transfer: float = Field(
        0.02, ge=0, le=1, description="Share of that increase the policy's ability gets: every task of the entry, "
        "held-out ones included.",
    )
    initial_ability: float = Field(0.0, ge=-MAX_LOGIT, le=MAX_LOGIT, description="The policy's ability (logit) at step 0.")
    similar_by: list[str] | None = Field(
        None, min_length=1, description="Task columns whose values together name a task's similarity group: training "
        "a task then moves every task of its group, held-out ones included, by label_gain. The entry's training and "
        "held-out tasks are then its environment's (its train and eval splits, with their columns); null: no groups.",
    )
    label_gain: float = Field(
        0.0, ge=-MAX_LOGIT, le=MAX_LOGIT, description="Logit change of every task of the trained task's similarity "
        "group (similar_by) per informative group trained; negative: training one task of a group lowers the others.",
    )
    label_difficulty: dict[str, float] | None = Field(
        None, description="Mean difficulty (logit) of each similarity group's tasks, by group name (the similar_by "
        "values joined by '/'); a group not listed has population.difficulty_mean. Tasks spread around it by "
        "population.difficulty_sd.",
    )
    forget_half_life: float | None = Field(
        None, gt=0, le=1e9, description="A task's own skill (what gain gave it) halves every this many policy versions "
        "after the task was last trained; null: never forgotten.",
    )

    @model_validator(mode="after")
    def _groups_need_similar_by(self) -> SimLearningConfig:
        if self.similar_by is None and (self.label_gain != 0.0 or self.label_difficulty is not None):
            raise ValueError("label_gain and label_difficulty act on similarity groups: name similar_by (task columns)")
        if self.label_difficulty is not None:
            bad = {k: v for k, v in self.label_difficulty.items() if not -MAX_LOGIT <= v <= MAX_LOGIT}
            if bad:
                raise ValueError(f"label_difficulty values are logits within +-{MAX_LOGIT:g}, got {bad}")
        return self


class SimConfig(_SimModel):
    """The simulator's workload model: rollouts, the trainer, the tasks' pass rates and how they learn."""

    preset: str | None = Field(
        None, description="A named workload the simulator ships (long-agentic, textcraft-synth, math): its sim "
        "block is the base, fields here override it.",
    )
    rollout: SimRolloutConfig = Field(default_factory=SimRolloutConfig, description="Rollout timing and outcomes.")
    trainer: SimTrainerConfig = Field(default_factory=SimTrainerConfig, description="Training step timing.")
    service: SimServiceConfig = Field(
        default_factory=SimServiceConfig, description="The model service's batch timing (turns mode only; set "
        "without rollout.turns anywhere, it has no effect and a warning says so).",
    )
    tasks: str | None = Field(
        None, min_length=1, description="A CSV (task_id,pass_rate[,length]) or JSON list of objects with those keys: the entry's "
        "tasks with fixed pass rates; null: the entry's tasks (or a synthesized population).",
    )
    population: SimPopulationConfig = Field(
        default_factory=SimPopulationConfig, description="Synthesized tasks of an entry that lists none."
    )
    learning: SimLearningConfig = Field(default_factory=SimLearningConfig, description="How pass rates move.")
    gpus: float = Field(
        8.0, gt=0, le=MAX_GPUS, description="GPUs of the deployment being simulated (model service and trainer): sim/gpu_hours is "
        "simulated hours times this.",
    )

    @model_validator(mode="after")
    def _pause_within_publish(self) -> SimConfig:
        if self.service.pause_s > self.trainer.publish_s:
            raise ValueError(f"sim.service.pause_s ({self.service.pause_s:g}) is part of the publish: at most "
                             f"sim.trainer.publish_s ({self.trainer.publish_s:g})")
        return self

    @model_validator(mode="after")
    def _file_fixes_rates(self) -> SimConfig:
        if self.tasks is not None and self.learning.enabled is True:
            raise ValueError(
                "a task file (sim.tasks) fixes each task's pass rate: set learning.enabled to false or null, "
                "or drop sim.tasks to learn on a synthesized population"
            )
        return self

    @property
    def learning_on(self) -> bool:
        """Whether pass rates learn: ``learning.enabled``, where null means on unless a task file is named."""
        enabled = self.learning.enabled
        return self.tasks is None if enabled is None else enabled



__all__ = [
    "Duration",
    "EmpiricalDuration",
    "ExponentialDuration",
    "FixedDuration",
    "LognormalDuration",
    "SimConfig",
    "SimLearningConfig",
    "SimPopulationConfig",
    "SimRolloutConfig",
    "SimServiceConfig",
    "SimTrainerConfig",
    "SimTurnsConfig",
    "TURNS_REPLACE",
    "TurnCount",
]
