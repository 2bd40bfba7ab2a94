"""Stage 2: the resolution of every task sampler, group admission rule and environment of a config before a run
starts.

Two stages (docs/configuration.md):
- stage 1, ``platoon.config.loader.config_problems(cfg)``, runs when a config loads (and through ``check_config``
  for configs built in code): names nothing could resolve, core components' options, the rules between fields.
  It imports nothing;
- stage 2, ``resolve_components(cfg)`` here, runs before a run starts and in ``config validate``: it imports every
  entry's ``package``, resolves each non-core name through the registry or ``module:Class``, parses its options
  against its schema, runs its static ``check`` and returns the component records lock.json keeps
  (``platoon.config.lock_records``).

Both gather every problem before they raise one ``ConfigError``. Core components' classes live in
``platoon.policy`` and ``platoon.live``, which this layer may not import: a core name resolves to no class here,
and its options parse against ``CORE_OPTIONS``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from platoon.config import component_resolution as resolution
from platoon.config import registry
from platoon.config.component_resolution import did_you_mean, find_class, options_schema
from platoon.config.components import (
    CORE_GROUP_ADMISSIONS,
    CORE_OPTIONS,
    CORE_TASK_SAMPLERS,
    ENTRY_TASK_SAMPLERS,
    AdmissionCheckContext,  # defined beside core's names, which the policy layer reads; named here as before
    SamplerCheckContext,
    core_environment,
    core_option_problems,
    core_options,
)
from platoon.config.effective import (
    ENTRY_LEVEL,
    RUN_LEVEL,
    core_hands_slots,
    group_size,
    is_rule_mode,
    run_sampler,
)
from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.lock_records import ComponentRecord, class_ref, component_record
from platoon.config.models import EnvironmentConfig, RunConfig
from platoon.config.problems import Problem, describe_errors
from platoon.config.sections import DatasetKwargs


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


def resolution_problems(cfg: RunConfig) -> list[Problem]:
    """Stage 2's problems of ``cfg``, raising nothing: the loader runs it on a config that failed stage 1 (its bad
    values replaced by their defaults), so that what cannot resolve joins stage 1's report."""
    r = _Resolver(cfg, True)
    r.run()
    return r.problems


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
            obj = find_class(kind, name)
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
        schema = CORE_OPTIONS[(kind, name)] if cls is None else options_schema(cls)
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
        records = [component_record(kind, name, RUN_LEVEL, cls, _parsed({"train": parsed}), core, labels)]
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
            if own in CORE_TASK_SAMPLERS and own not in ENTRY_TASK_SAMPLERS:
                continue  # auto and weighted are the run's alone: the entry rule (rules.py) reports it
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
            groups.setdefault((own, class_ref(ecls)), (ecls, {}))[1][e.label] = parsed
        for (own, _), (ecls, by_label) in groups.items():
            entry_core = own if ecls is None else None
            records.append(component_record(kind, own, ENTRY_LEVEL, ecls, _parsed(by_label), entry_core))
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
                good = _parsed({"train": parsed})
                records.append(component_record(kind, name, RUN_LEVEL, cls, good, core, inherit))
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
            groups.setdefault((own, class_ref(ecls)), (ecls, {}))[1][e.label] = parsed
        for (own, _), (ecls, by_label) in groups.items():
            entry_core = own if ecls is None else None
            records.append(component_record(kind, own, ENTRY_LEVEL, ecls, _parsed(by_label), entry_core))
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
                                             f"unknown key{did_you_mean(key, known)} (the keys an environment's "
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
                obj = find_class("environment", e.env)
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
            groups.setdefault((e.env, class_ref(obj)), (obj, {}))[1][e.label] = dict(e.service_kwargs)
        return [component_record("environment", env, ENTRY_LEVEL, cls, _parsed(by_label),
                                 env if cls is None else None)
                for (env, _), (cls, by_label) in groups.items()]



def _parsed(options: dict[str, Any]) -> dict[str, Any]:
    """``"train"`` or label -> options, without those that failed to parse (their problems are reported)."""
    return {k: v for k, v in options.items() if v is not _FAILED}


def parse_options(schema: Any, name: str, options: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    """Parse component ``name``'s ``options`` (at dotted ``path``) with its ``options_schema``
    (``component_resolution.parse_options``; a dataclass's fields are type-checked).

    Returns ``(parsed, problems)``; parsed is None when there are problems, ``{}`` for a schema of None.
    """
    data = dict(options)
    try:
        return resolution.parse_options(schema, data, validate_dataclass=True), []
    except resolution.OptionsRefused as refused:
        return None, _option_problems(refused, schema, name, data, path)


def _option_problems(
    refused: resolution.OptionsRefused, schema: Any, name: str, data: dict[str, Any], path: str
) -> list[Problem]:
    if refused.reason == resolution.NO_OPTIONS:
        return [Problem(path, f"'{name}' takes no options; leave {path.rsplit('.', 1)[-1]} out")]
    if refused.reason == resolution.UNKNOWN_KEYS:
        return [Problem(f"{path}.{k}", "unknown key" + did_you_mean(str(k), refused.known)) for k in refused.unknown]
    if refused.reason == resolution.INVALID:
        return describe_errors(refused.error, root=schema, data=data, prefix=path)
    if refused.reason == resolution.RAISED:
        return [Problem(path, f"{name}: {refused.error}")]
    return [Problem(path, f"{name}: options_schema must be a pydantic model, a dataclass, a function or None")]


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
