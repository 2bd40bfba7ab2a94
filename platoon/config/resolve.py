"""What a config means for a run: each entry's effective settings, and stage 2, the resolution of every task
sampler and group admission rule before a run starts.

Two stages (docs/configuration.md):
- stage 1, ``platoon.config.loader.config_problems(cfg)``, runs when a config loads (and through ``check_config``
  for configs built in code): names nothing could resolve, core components' options, the rules between fields.
  It imports nothing;
- stage 2, ``resolve_components(cfg)`` here, runs before a run starts and in ``config validate``: it imports every
  entry's ``package``, resolves each non-core name through the registry or ``module:Class``, parses its options
  against its schema, runs its static ``check`` and returns the component records lock.json keeps.

Both gather every problem before they raise one ``ConfigError``. Core components' classes live in
``platoon.policy`` and ``platoon.live``, which this layer may not import: their records carry ``core`` (the core
component that runs) and the class path ``CORE_CLASS_PATHS`` names as ``resolved``. Every record says where its
component came from as platoon 0.4.0's lock.json does (``source``, ``distribution``, ``distribution_version``,
``entry_point``: ``registry.component_origin``). The effective-settings helpers and stage 2 share one module (past 400 lines) since
stage 2 is written in terms of them and the runtimes import both.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from platoon.config import registry
from platoon.config.base import no_effect_paths
from platoon.config.components import (
    CHAT_TEMPLATE_ALIASES,
    CORE_CLASS_PATHS,
    CORE_GROUP_ADMISSIONS,
    CORE_OPTIONS,
    CORE_TASK_SAMPLERS,
    core_environment,
    core_option_problems,
    core_options,
)
from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.losses import CLIP_KEYS, DEFAULT_LOSS_FN_CONFIG, loss_settings, zero_at_zero_advantages
from platoon.config.models import EnvironmentConfig, Problem, RunConfig, SimConfig, describe_errors
from platoon.config.sections import DatasetKwargs
from platoon.config.sim import TURNS_REPLACE

RUN_LEVEL = "run"
ENTRY_LEVEL = "entry"

# --- effective settings --------------------------------------------------------------------------------------


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


def select_tasks(listed: Sequence[str], kwargs: DatasetKwargs, exclude: Sequence[str]) -> list[str]:
    """The tasks an entry lists, in order: ``listed`` (its split's, or its own ``tasks``) without ``exclude``,
    shuffled by ``kwargs.shuffle_seed`` (when set), the first ``kwargs.limit`` (when set)."""
    gone = set(exclude)
    ids = [t for t in listed if t not in gone]
    if kwargs.shuffle_seed is not None:
        random.Random(kwargs.shuffle_seed).shuffle(ids)
    return ids if kwargs.limit is None else ids[: kwargs.limit]


def effective_group_size(cfg: RunConfig) -> int:
    """The run's group size G: the largest entry's (a permit budget must hold one such group)."""
    return max((group_size(cfg, i) for i in range(len(cfg.environments))), default=1)


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


def config_warnings(cfg: RunConfig) -> list[str]:
    """Warnings of a valid config (printed as ``warning: ...`` by ``config validate``, failed on by ``--strict``, and
    logged at each start of a run): the keys it sets that have no effect here (0.4.0's keys of components this backend
    does not have, and the rollout-worker keys); a 0.4.0 renderer name that the chat template renders here;
    in rule mode, a loss that is not zero at zero advantages; clip thresholds set for importance_sampling, which does
    not clip."""
    out: list[str] = []
    inert = no_effect_paths(cfg)
    if inert:
        out.append(f"{', '.join(inert)}: no effect here (platoon 0.4.0 keys of components this backend does not have; "
                   "docs/migrating-from-0.4.md)")
    out += preload_warnings(cfg)
    if cfg.train.renderer_name in CHAT_TEMPLATE_ALIASES:
        out.append(f"train.renderer_name: {cfg.train.renderer_name!r} is 0.4.0's renderer for a model family; here "
                   "the tokenizer's own chat template renders it (chat_template; docs/renderers.md)")
    loss = loss_settings(cfg.train.loss_fn, cfg.train.loss_fn_config)
    if is_rule_mode(cfg) and not zero_at_zero_advantages(cfg.train.loss_fn_config):
        out.append(
            f"train.loss_fn_config: kl_coef {loss.kl_coef:g} and entropy_coef {loss.entropy_coef:g} train terms "
            "that do not depend on the advantage, also on uniform groups' datums; a group admission rule that "
            "rejects those groups removes their share of those terms from the objective, not only from its scale"
        )
    # 0.4.0's default thresholds go with every loss, so only thresholds changed from them are worth a warning.
    changed = [f"{k} {v:g}" for k, v in cfg.train.loss_fn_config.items()
               if k in CLIP_KEYS and v != DEFAULT_LOSS_FN_CONFIG[k]]
    if loss.loss_fn == "importance_sampling" and changed:
        out.append(f"train.loss_fn_config: importance_sampling does not clip the ratio; {', '.join(changed)} "
                   "takes effect only under ppo or cispo")
    return out + sim_warnings(cfg)


def preload_warnings(cfg: RunConfig) -> list[str]:
    """``worker_preload`` set where nothing is imported ahead: in-process rollouts, ``exec`` workers, or
    ``worker_python_env_isolation``."""
    w = cfg.train.workflow_config
    if not w.worker_preload:
        return []
    why = ("rollouts run in the trainer's process (rollout_isolation: inprocess)" if w.rollout_isolation != "process"
           else "workers start fresh (worker_start_method: exec)" if w.worker_start_method == "exec"
           else "each worker has its own Python environment (worker_python_env_isolation)"
           if w.worker_python_env_isolation else None)
    if why is None:
        return []
    return [f"train.workflow_config.worker_preload: nothing is imported ahead where {why}, so "
            f"{', '.join(w.worker_preload)} is not preloaded"]


def sim_warnings(cfg: RunConfig) -> list[str]:
    """The simulator's keys that a config sets to no effect: under ``rollout.turns`` the keys it replaces
    (``TURNS_REPLACE``; ``length_sigma`` too when no ``env_step_s`` is there to stretch), and ``sim.service`` and
    ``sim.trainer.service_slowdown`` where no entry's rollouts have turns. A run-level key is named when it has no effect in every entry that reads it (a
    preset's ``duration`` under turns is such a key: warned about, not refused, so presets stay composable)."""
    inert: dict[str, bool] = {}
    any_turns = False
    run_set = cfg.sim.rollout.model_fields_set
    for i, e in enumerate(cfg.environments):
        try:
            rollout = entry_sim(cfg, i).rollout
        except ValidationError:
            continue  # the loader reported it
        own = e.sim.get("rollout") if isinstance(e.sim.get("rollout"), Mapping) else {}
        any_turns = any_turns or rollout.turns is not None
        for key in (*TURNS_REPLACE, "length_sigma"):
            path = f"environments.{i}.sim.rollout.{key}" if key in own else f"sim.rollout.{key}"
            if key not in own and key not in run_set:
                continue
            idle = rollout.turns is not None and (key != "length_sigma" or rollout.env_step_s is None)
            inert[path] = inert.get(path, True) and idle
    out = []
    named = [p for p, idle in inert.items() if idle]
    if named:
        out.append(f"{', '.join(named)}: no effect under sim.rollout.turns (a rollout's time is its turns' model "
                   "calls and environment steps; a task's length stretches env_step_s)")
    if "service" in cfg.sim.model_fields_set and not any_turns:
        out.append("sim.service: no effect without sim.rollout.turns (only turns queue model calls at the service)")
    if "service_slowdown" in cfg.sim.trainer.model_fields_set and not any_turns:
        out.append("sim.trainer.service_slowdown: no effect without sim.rollout.turns (no model service runs "
                   "batches beside the trainer)")
    return out


# --- stage 2 -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerCheckContext:
    """What a task sampler's static ``check(options, ctx)`` sees when the run resolves it (docs/task-samplers.md)."""

    level: str
    entry: str | None
    run_sampler: str
    """``train.task_sampler`` as written (``auto`` when unset)."""
    entries: Mapping[str, Mapping[str, Any]]
    """By label: ``{weight, seed, group_size, success_threshold, task_sampler, task_sampler_options}``."""
    batch_size: int
    label_column: str | None


@dataclass(frozen=True)
class AdmissionCheckContext:
    """What a group admission rule's static ``check(options, ctx)`` sees when the run resolves it (docs/group-admission.md)."""

    level: str
    entry: str | None
    entries: Mapping[str, Mapping[str, Any]]
    batch_size: int
    label_column: str | None
    max_groups_per_step: float
    workflow_gives_verdicts: bool


@dataclass(frozen=True)
class ComponentRecord:
    """One resolved component, as lock.json records it (docs/run-directory.md).

    A run-level record lists every entry it serves and keeps its options under ``"train"``; an entry-level record
    groups the entries that name the same component and keeps each one's options under its label. Options are
    parsed, defaults included, JSON-safe.
    """

    kind: str
    """``task_sampler``, ``group_admission`` or ``environment``."""
    ref: str
    """The name as the config wrote it (``auto``, ``pass_rate``, ``mine``, ``pkg.mod:Cls``)."""
    level: str
    environments: tuple[str, ...]
    options: Mapping[str, Any]
    resolved: str | None = None
    """``module:Qualname`` of the class that runs (core's too)."""
    core: str | None = None
    """The core component that runs (``auto`` decided: weighted or uniform); None for others."""
    source: str | None = None
    """Where the class is defined, ``module:Qualname``, as platoon 0.4.0 spells it (the same as ``resolved``)."""
    distribution: str | None = None
    """The installed distribution that provides it (``platoon`` for core's); None for code none holds."""
    distribution_version: str | None = None
    entry_point: str | None = None
    """``group:name`` of the entry point whose loading registered it; None for core's, ``module:Class`` references
    and what a ``package`` registered."""
    cls: type | None = field(default=None, compare=False, repr=False)
    parsed: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """``"train"`` or label -> the options as the schema parsed them (what the component is built with)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ref": self.ref,
            "resolved": self.resolved,
            "source": self.source,
            "distribution": self.distribution,
            "distribution_version": self.distribution_version,
            "entry_point": self.entry_point,
            "core": self.core,
            "level": self.level,
            "environments": list(self.environments),
            "options": {k: _jsonable(v) for k, v in self.options.items()},
        }


def resolve_components(
    cfg: RunConfig, *, source: str = "<config>", workflow_gives_verdicts: bool = True
) -> list[ComponentRecord]:
    """Stage 2: resolve every task sampler and (in rule mode) group admission rule of ``cfg``, which passed stage 1.

    Imports each entry's ``package`` and the installed extensions, resolves non-core names through the registry
    or ``module:Class``, parses options against each ``options_schema`` (a pydantic model, a dataclass, a function
    raising ValueError, or None: no options), runs each static ``check(options, ctx)`` and checks entry environments
    resolve. ``workflow_gives_verdicts`` says whether the training workflow gives verdicts (a rule that reads them,
    ``informative`` or a class with ``needs_verdicts = True``, is refused otherwise). Raises one ConfigError with
    every problem; returns the records: the run's sampler, each entry's (when the run's hands slots), each rule
    other than ``all`` in rule mode, and each environment (one record per component, listing the entries that name
    it, with each one's ``service_kwargs``).
    """
    r = _Resolver(cfg, workflow_gives_verdicts)
    records = r.run()
    if r.problems:
        raise ConfigError([str(p) for p in r.problems], source)
    return records


_FAILED = object()


class _Resolver:
    def __init__(self, cfg: RunConfig, gives_verdicts: bool) -> None:
        self.cfg = cfg
        self.gives_verdicts = gives_verdicts
        self.problems: list[Problem] = []
        self.entries = {
            e.label: {
                "weight": e.weight,
                "seed": e.seed,
                "group_size": group_size(cfg, i),
                "success_threshold": e.success_threshold,
                "task_sampler": e.task_sampler,
                "task_sampler_options": dict(e.task_sampler_options),
            }
            for i, e in enumerate(cfg.environments)
        }

    def run(self) -> list[ComponentRecord]:
        self._imports()
        return self._samplers() + self._admissions() + self._environments()

    def _imports(self) -> None:
        try:
            registry.load_extensions()
        except ExtensionError as exc:
            self.problems.append(Problem("", str(exc)))
        seen: set[str] = set()
        for i, e in enumerate(self.cfg.environments):
            if e.package and e.package not in seen:
                seen.add(e.package)
                try:
                    registry.import_package(e.package)
                except ExtensionError as exc:
                    self.problems.append(Problem(f"environments.{i}.package", str(exc)))

    def _resolve(self, kind: str, name: str, path: str) -> tuple[type | None, bool]:
        if name in (CORE_TASK_SAMPLERS if kind == "task_sampler" else CORE_GROUP_ADMISSIONS):
            return None, True
        try:
            obj = registry.import_ref(name) if ":" in name else registry.lookup(kind, name)
        except ExtensionError as exc:
            self.problems.append(Problem(path, str(exc)))
            return None, False
        if obj is None:
            self.problems.append(Problem(path, registry.unknown_name_message(kind, name)))
            return None, False
        why = _class_problem(kind, obj)
        if why:
            self.problems.append(Problem(path, f"{name}: {why}"))
            return None, False
        return obj, True

    def _parse(self, kind: str, name: str, cls: type | None, options: Mapping[str, Any], path: str) -> Any:
        schema = CORE_OPTIONS[(kind, name)] if cls is None else getattr(cls, "options_schema", None)
        parsed, problems = parse_options(schema, name, options, path)
        self.problems += problems
        return _FAILED if problems else parsed

    def _check(self, cls: type | None, name: str, parsed: Any, ctx: Any, path: str) -> None:
        check = getattr(cls, "check", None) if cls is not None else None
        if parsed is _FAILED or not callable(check):
            return
        try:
            check(parsed, ctx)
        except ValueError as exc:
            msg = str(exc) or type(exc).__name__
            self.problems.append(Problem(path, msg if msg.startswith(name) else f"{name}: {msg}"))
        except Exception as exc:  # noqa: BLE001 - a broken check is reported, never a traceback
            self.problems.append(Problem(path, f"{name}: check raised {type(exc).__name__}: {exc}"))

    def _sampler_ctx(self, level: str, entry: str | None) -> SamplerCheckContext:
        t = self.cfg.train
        return SamplerCheckContext(level, entry, t.task_sampler, self.entries, t.batch_size, t.label_by)

    def _admission_ctx(self, level: str, entry: str | None) -> AdmissionCheckContext:
        t = self.cfg.train
        return AdmissionCheckContext(
            level,
            entry,
            self.entries,
            t.batch_size,
            t.label_by,
            t.refill.max_groups_per_step,
            self.gives_verdicts,
        )

    def _samplers(self) -> list[ComponentRecord]:
        cfg, kind = self.cfg, "task_sampler"
        name = cfg.train.task_sampler
        cls, ok = self._resolve(kind, name, "train.task_sampler")
        if not ok:
            return []
        parsed = self._parse(kind, name, cls, cfg.train.task_sampler_options, "train.task_sampler_options")
        self._check(cls, name, parsed, self._sampler_ctx(RUN_LEVEL, None), "train.task_sampler")
        labels = tuple(e.label for e in cfg.environments)
        core = run_sampler(cfg) if cls is None else None
        records = [_record(kind, name, RUN_LEVEL, cls, {"train": parsed}, core, labels)]
        hands = core_hands_slots(cfg)
        if hands is None:
            hands = bool(getattr(cls, "entry_slots", False))
        groups: dict[tuple[str, str | None], tuple[type | None, dict[str, Any]]] = {}
        for i, e in enumerate(cfg.environments):
            path = f"environments.{i}.task_sampler"
            if not hands:
                if cls is not None and (e.task_sampler is not None or e.task_sampler_options):
                    self.problems.append(
                        Problem(
                            path,
                            f"{name} hands no slots to entries (its class sets no entry_slots), so an "
                            "entry's own sampler never runs; leave task_sampler and its options out",
                        )
                    )
                continue
            own = e.task_sampler or "uniform"
            ecls, ok = self._resolve(kind, own, path)
            if not ok:
                continue
            if ecls is not None and getattr(ecls, "entry_slots", False):
                self.problems.append(
                    Problem(path, f"{own}: hands slots itself, so it can only be the run's sampler")
                )
                continue
            parsed = self._parse(
                kind, own, ecls, e.task_sampler_options, f"environments.{i}.task_sampler_options"
            )
            self._check(ecls, own, parsed, self._sampler_ctx(ENTRY_LEVEL, e.label), path)
            groups.setdefault((own, _ref(ecls)), (ecls, {}))[1][e.label] = parsed
        for (own, _), (ecls, by_label) in groups.items():
            records.append(_record(kind, own, ENTRY_LEVEL, ecls, by_label, own if ecls is None else None))
        return records

    def _admissions(self) -> list[ComponentRecord]:
        cfg, kind = self.cfg, "group_admission"
        if not is_rule_mode(cfg):
            return []
        records: list[ComponentRecord] = []
        name = cfg.train.group_admission
        if name != "all":
            cls, ok = self._resolve(kind, name, "train.group_admission")
            if ok:
                parsed = self._parse(
                    kind, name, cls, cfg.train.group_admission_options, "train.group_admission_options"
                )
                self._check(cls, name, parsed, self._admission_ctx(RUN_LEVEL, None), "train.group_admission")
                self._verdicts(cls, name, "train.group_admission")
                inherit = tuple(e.label for e in cfg.environments if e.group_admission is None)
                core = name if cls is None else None
                records.append(_record(kind, name, RUN_LEVEL, cls, {"train": parsed}, core, inherit))
        groups: dict[tuple[str, str | None], tuple[type | None, dict[str, Any]]] = {}
        for i, e in enumerate(cfg.environments):
            own = e.group_admission
            if own is None or own == "all":
                continue
            path = f"environments.{i}.group_admission"
            ecls, ok = self._resolve(kind, own, path)
            if not ok:
                continue
            parsed = self._parse(
                kind, own, ecls, e.group_admission_options, f"environments.{i}.group_admission_options"
            )
            self._check(ecls, own, parsed, self._admission_ctx(ENTRY_LEVEL, e.label), path)
            self._verdicts(ecls, own, path)
            groups.setdefault((own, _ref(ecls)), (ecls, {}))[1][e.label] = parsed
        for (own, _), (ecls, by_label) in groups.items():
            records.append(_record(kind, own, ENTRY_LEVEL, ecls, by_label, own if ecls is None else None))
        return records

    def _verdicts(self, cls: type | None, name: str, path: str) -> None:
        reads = name == "informative" if cls is None else bool(getattr(cls, "needs_verdicts", False))
        if reads and not self.gives_verdicts:
            self.problems.append(
                Problem(
                    path,
                    f"{name} rejects groups by their workflow's verdict, and the training workflow gives "
                    "none: use GroupRolloutWorkflow, or declare gives_verdicts = True on a workflow that does",
                )
            )

    def _dataset_kwargs_problems(self, i: int, e: EnvironmentConfig) -> None:
        """Keys of an entry's ``dataset_kwargs``/``eval_dataset_kwargs`` that no environment here reads: every
        environment lists its tasks through the same three keys (``platoon.config.sections.DatasetKwargs``)."""
        for section in ("dataset_kwargs", "eval_dataset_kwargs"):
            known = list(DatasetKwargs.model_fields)
            for key in getattr(e, section).model_extra or {}:
                self.problems.append(Problem(f"environments.{i}.{section}.{key}",
                                             f"unknown key{_did_you_mean(key, known)} (the keys an environment's "
                                             f"tasks are listed by: {', '.join(known)})"))

    def _environments(self) -> list[ComponentRecord]:
        groups: dict[tuple[str, str | None], tuple[type | None, dict[str, Any]]] = {}
        for i, e in enumerate(self.cfg.environments):
            self._dataset_kwargs_problems(i, e)
            path = f"environments.{i}.env"
            core = core_environment(e.env)
            if core is not None:
                try:
                    options = core_options("environment", core, e.service_kwargs)
                except ValueError:  # a config built in code, unchecked: stage 1's words
                    self.problems += core_option_problems("environment", core, e.service_kwargs,
                                                          f"environments.{i}.service_kwargs")
                    continue
                groups.setdefault((core, None), (None, {}))[1][e.label] = options
                continue
            try:
                obj = registry.import_ref(e.env) if ":" in e.env else registry.lookup("environment", e.env)
            except ExtensionError as exc:
                self.problems.append(Problem(path, str(exc)))
                continue
            if obj is None:
                self.problems.append(Problem(path, registry.unknown_name_message("environment", e.env)))
                continue
            why = _environment_problem(obj, e.service_kwargs)
            if why:
                self.problems.append(Problem(path if why[0] == "env" else f"environments.{i}.service_kwargs",
                                             f"{e.env}: {why[1]}"))
                continue
            groups.setdefault((e.env, _ref(obj)), (obj, {}))[1][e.label] = dict(e.service_kwargs)
        return [_record("environment", env, ENTRY_LEVEL, cls, by_label, env if cls is None else None)
                for (env, _), (cls, by_label) in groups.items()]


def _record(
    kind: str,
    name: str,
    level: str,
    cls: type | None,
    parsed: dict[str, Any],
    core: str | None,
    environments: tuple[str, ...] | None = None,
) -> ComponentRecord:
    good = {k: v for k, v in parsed.items() if v is not _FAILED}
    if cls is None:  # core's: the class is named, not imported; the origin is core's
        resolved = CORE_CLASS_PATHS[(kind, core or name)]
        origin = registry.module_origin(resolved.partition(":")[0])
    else:
        resolved = _ref(cls)
        origin = registry.component_origin(kind, name, cls.__module__)
    return ComponentRecord(
        kind=kind,
        ref=name,
        level=level,
        environments=tuple(good) if environments is None else environments,
        options={k: _jsonable(v) for k, v in good.items()},
        resolved=resolved,
        core=core,
        source=resolved,
        distribution=origin.distribution,
        distribution_version=origin.version,
        entry_point=origin.entry_point,
        cls=cls,
        parsed=good,
    )


def parse_options(schema: Any, name: str, options: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    """Parse component ``name``'s ``options`` (at dotted ``path``) with its ``options_schema``.

    The schema is a pydantic model, a dataclass (unknown keys refused), a function that returns the parsed
    options or raises ValueError, or None (takes no options: any option is refused). Returns ``(parsed,
    problems)``; parsed is None when there are problems, ``{}`` for a schema of None.
    """
    leaf = path.rsplit(".", 1)[-1]
    data = dict(options)
    if schema is None:
        return (
            ({}, []) if not data else (None, [Problem(path, f"'{name}' takes no options; leave {leaf} out")])
        )
    try:
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return schema.model_validate(data), []
        if isinstance(schema, type) and dataclasses.is_dataclass(schema):
            known = [f.name for f in dataclasses.fields(schema) if f.init]
            unknown = [
                Problem(f"{path}.{k}", "unknown key" + _did_you_mean(str(k), known))
                for k in data
                if k not in known
            ]
            return (None, unknown) if unknown else (TypeAdapter(schema).validate_python(data), [])
        if callable(schema):
            return schema(data), []
    except ValidationError as exc:
        return None, describe_errors(exc, root=schema, data=data, prefix=path)
    except (ValueError, TypeError) as exc:
        return None, [Problem(path, f"{name}: {exc}")]
    return None, [
        Problem(path, f"{name}: options_schema must be a pydantic model, a dataclass, a function or None")
    ]


def _did_you_mean(name: str, pool: list[str]) -> str:
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _class_problem(kind: str, obj: Any) -> str | None:
    if not isinstance(obj, type):
        return f"is a {type(obj).__name__}, not a class"
    methods = ("next", "state_dict", "load_state_dict") if kind == "task_sampler" else ("admit",)
    for method in methods:
        if not callable(getattr(obj, method, None)):
            return f"{obj.__qualname__} has no method {method}()"
    coroutine = methods[0]
    if inspect.iscoroutinefunction(getattr(obj, coroutine)):
        return f"{obj.__qualname__}.{coroutine} is a coroutine function; it must be one synchronous call"
    if kind == "task_sampler":
        # A sampler that does not subclass the API's base class has no `adaptive`: it reads as static.
        adaptive = getattr(obj, "adaptive", False)
        if not isinstance(adaptive, bool):
            return f"{obj.__qualname__}.adaptive must be true or false, got {adaptive!r}"
        if adaptive and getattr(obj, "entry_slots", False):
            return f"{obj.__qualname__} is adaptive and hands slots (entry_slots); a sampler may be one or the other"
    return None


def _environment_problem(obj: Any, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """Why ``obj`` cannot be an environment built with ``options`` (keyword arguments), as ``(key, message)``: it
    must be a class with the protocol's methods (docs/live-backend.md) whose constructor takes those options. The
    options' values are the environment's to check, when a live run builds it."""
    if not isinstance(obj, type):
        return "env", f"is a {type(obj).__name__}, not a class"
    for method in ("task_ids", "task", "episode"):
        if not callable(getattr(obj, method, None)):
            return "env", f"{obj.__qualname__} is not an environment: it has no method {method}()"
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None  # a constructor Python cannot describe: the run finds out
    try:
        signature.bind(**dict(options))
    except TypeError as exc:
        return "service_kwargs", f"{obj.__qualname__}({', '.join(map(str, options))}): {exc}"
    return None


def _ref(cls: type | None) -> str | None:
    return None if cls is None else f"{cls.__module__}:{cls.__qualname__}"


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((_jsonable(v) for v in obj), key=repr)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return repr(obj)
