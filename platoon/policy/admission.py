"""Group admission: whether a settled training group counts toward the batch (experimental).

What this module owns (semantics 3): the verdict type ``Admission``; the rule API (``AdmissionRule``,
``AdmissionSetup``, ``AdmissionCheckContext``); the built-in rules ``all`` (``AdmitAll``) and ``informative``
(``Informative``); resolving a rule by name (``resolve_group_admission``) and parsing its options; the load-time
problems of a run's rules (``admission_problems``); and ``AdmissionSet``, which the dispatcher asks at each settle and
which keeps the step's ``train/admission/*`` counts, the warnings and the ``lock.json`` records. (It runs past 600
lines because the rule API, the built-ins and ``AdmissionSet`` share one answer contract and one reason-key rule, and
docs/architecture.md names this one module for all of admission; half of it is docstrings.)

Rules it keeps:

- A rule is one synchronous, pure call ``admit(group, stats) -> Admission | bool`` that keeps no state between
  calls: a resume builds new instances, and a rule that remembered would decide differently after one.
- Rule mode is decided by *name*: any entry whose effective rule is not literally ``all`` (with no entries, the
  run's rule). A ``module:Class`` that resolves to ``AdmitAll`` still counts as a rule.
- A failed workflow (no output) is rejected as ``failed`` without asking the rule, even for an entry at ``all``.
- A rule fails open: an exception, an invalid answer, or an awaitable (closed unawaited) admits the group. The first
  failure of each rule goes to the warnings outbox; every failure is counted in ``train/admission/errors``.
- Reasons become metric keys only while they are short words (``[a-z][a-z0-9_]{0,31}``) and the rule has used fewer
  than 16; the rest are counted under ``other``, so a rule that puts numbers in its reasons cannot flood the metrics.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import inspect
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from platoon.config import registry
from platoon.config.components import CORE_GROUP_ADMISSIONS, InformativeOptions
from platoon.config.errors import ConfigError, ExtensionError
from platoon.config.resolve import AdmissionCheckContext  # the one a rule's check sees, at load and at run
from platoon.policy.records import VERDICTS

if TYPE_CHECKING:
    from platoon.policy.samplers.base import EntryInfo, TaskStatsView
    from platoon.policy.stats import GroupRecord

MAX_REASON_LENGTH = 64
"""An admission's reason is a non-empty string of at most this many characters."""
MAX_REASON_KEYS = 16
"""Distinct reasons per rule that get their own metric key; the rest count under ``other``."""
REJECTED_VERDICTS = tuple(v for v in VERDICTS if v not in ("trained", "uniform", "unknown"))
"""Verdicts ``informative`` rejects with the verdict as the reason (``uniform`` is judged by its kind)."""
KINDS = ("admitted", "rejected", "stale", "failed")
"""What ``AdmissionSet.note`` counts."""
PREFIX = "train/admission/"
_REASON_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
_UNIFORM_REASONS = {"all_pass": "uniform_pass", "all_fail": "uniform_fail"}


# ---------------------------------------------------------------------------------------------------- the API


@dataclass(frozen=True)
class Admission:
    """A rule's verdict on one settled group: counts toward the batch (``admit``) or not, and why.

    ``reason`` defaults to ``"admitted"`` or ``"rejected"``. It is validated where the answer is accepted (a
    non-empty string of at most 64 characters), not here, so that a bad one fails open instead of raising in the rule.
    """

    admit: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.reason is None:
            object.__setattr__(self, "reason", "admitted" if self.admit is True else "rejected")


ADMITTED = Admission(True)
FAILED = Admission(False, "failed")


@dataclass(frozen=True)
class AdmissionSetup:
    """What a rule is built with, once per start: ``Class(setup, options)``.

    ``name``: the qualified name (``informative``, ``pkg.mod:Cls``, or ``<name>@<entry>`` at entry level); ``level``:
    ``run`` or ``entry``; ``entries``: ``EntryInfo`` by label (empty when the trainer was given an order without
    sampling).
    """

    name: str
    level: str
    entry: str | None
    entries: Mapping[str, EntryInfo]
    batch_size: int
    label_column: str | None = None


@runtime_checkable
class GroupAdmission(Protocol):
    """What the dispatcher needs of a rule: one synchronous ``admit(group, stats) -> Admission | bool``.

    ``True`` is admitted (reason ``admitted``), ``False`` rejected (reason ``rejected``). Subclassing
    ``AdmissionRule`` is the usual way to provide it; any class with such a method and ``Class(setup, options)``
    resolves.
    """

    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission | bool: ...


class AdmissionRule(abc.ABC):
    """Base class of a group admission rule.

    Contract: ``admit(group, stats)`` is one synchronous call that returns an ``Admission`` or a bool, reads only
    its arguments and ``self.options``, and keeps no state between calls. ``options_schema`` (a pydantic model, a
    dataclass, a parsing function that raises ValueError, or None for "takes no options") parses the config's
    options before ``__init__`` sees them. ``check(options, ctx)`` refuses a config by raising ValueError.
    """

    options_schema: Any = None

    def __init__(self, setup: AdmissionSetup, options: Any) -> None:
        self.setup = setup
        self.options = options

    @abc.abstractmethod
    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission | bool:
        """The verdict on ``group``, settled; ``stats`` is the per-task statistics as of their last flush."""

    @staticmethod
    def check(options: Any, ctx: AdmissionCheckContext) -> None:
        """Refuse a config by raising ValueError; the default accepts everything."""
        return None


class AdmitAll(AdmissionRule):
    """``all``: admits every group (reason ``admitted``), as platoon did before rules existed."""

    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission:
        return ADMITTED


class Informative(AdmissionRule):
    """``informative``: admit the groups whose workflow says they train something.

    In order: verdict ``uniform`` -> rejected as ``uniform_pass``, ``uniform_fail`` or ``uniform_mixed`` by
    ``group.kind(stats.threshold(group.entry))`` (a None kind reads as mixed); a verdict of ``REJECTED_VERDICTS`` ->
    rejected with the verdict as the reason; with ``band: [lo, hi]`` and some valid member, ``rate = passes / valid``
    below ``lo`` -> ``below_band``, above ``hi`` -> ``above_band`` (the bounds are admitted); verdict ``trained`` ->
    admitted; any other verdict -> admitted as ``unknown`` (the set warns once per rule).
    """

    options_schema = InformativeOptions
    needs_verdicts = True  # the config layer refuses it beside a workflow that gives no verdicts

    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission:
        verdict = group.verdict
        if verdict == "uniform":
            kind = group.kind(stats.threshold(group.entry))
            return Admission(False, _UNIFORM_REASONS.get(kind, "uniform_mixed"))
        if verdict in REJECTED_VERDICTS:
            return Admission(False, verdict)
        band = getattr(self.options, "band", None)
        if band is not None and group.valid > 0:
            lo, hi = band
            rate = group.passes(stats.threshold(group.entry)) / group.valid
            if rate < lo:
                return Admission(False, "below_band")
            if rate > hi:
                return Admission(False, "above_band")
        if verdict == "trained":
            return ADMITTED
        return Admission(True, "unknown")


CORE_RULES: dict[str, type[AdmissionRule]] = {"all": AdmitAll, "informative": Informative}
assert tuple(CORE_RULES) == CORE_GROUP_ADMISSIONS


# ------------------------------------------------------------------------------------- resolution and options


def resolve_group_admission(ref: str | type) -> type:
    """The rule class ``ref`` names: a core name, then a registered name, then ``module:Class``; or a class as is.

    Raises ``ExtensionError`` for an unknown name (with a did-you-mean), an import failure, or a class without a
    callable, synchronous ``admit``.
    """
    if isinstance(ref, type):
        cls, shown = ref, f"{ref.__module__}:{ref.__qualname__}"
    elif not isinstance(ref, str) or not ref:
        raise ExtensionError(f"a group admission rule is a name or module:Class, not {ref!r}")
    elif ref in CORE_RULES:
        return CORE_RULES[ref]
    elif ":" in ref:
        cls, shown = registry.import_ref(ref), ref
    else:
        found = registry.lookup("group_admission", ref)
        if found is None:
            raise ExtensionError(registry.unknown_name_message("group_admission", ref))
        cls, shown = found, ref
    if not isinstance(cls, type):
        raise ExtensionError(f"group admission {shown!r} is not a class but {type(cls).__name__}")
    admit = getattr(cls, "admit", None)
    if not callable(admit):
        raise ExtensionError(f"group admission {shown!r} has no callable admit(group, stats)")
    if inspect.iscoroutinefunction(admit) or inspect.isasyncgenfunction(admit):
        raise ExtensionError(
            f"group admission {shown!r}: admit must be a plain function, not async: an admission is one "
            "synchronous call at settle"
        )
    return cls


def parse_rule_options(cls: type, options: Mapping[str, Any] | None, *, key: str, name: str) -> Any:
    """``options`` parsed by ``cls.options_schema``; ValueError with one line per problem, each prefixed ``key``.

    A schema that is None takes no options; a pydantic model or a dataclass refuses unknown keys (with a
    did-you-mean); any other callable parses the mapping itself and raises ValueError to refuse it.
    """
    options = dict(options or {})
    schema = getattr(cls, "options_schema", None)
    if schema is None:
        if options:
            raise ValueError(f"{key}: {name!r} takes no options; leave {key.rsplit('.', 1)[-1]} out")
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            return schema.model_validate(options)
        except ValidationError as exc:
            known = list(schema.model_fields)
            lines = [_pydantic_line(key, err, known) for err in exc.errors()]
            raise ValueError("\n".join(lines)) from None
    if dataclasses.is_dataclass(schema) and isinstance(schema, type):
        known = [f.name for f in dataclasses.fields(schema) if f.init]
        unknown = [k for k in options if k not in known]
        if unknown:
            raise ValueError("\n".join(_unknown_line(key, k, known) for k in unknown))
        try:
            return schema(**options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{key}: {exc}") from None
    if callable(schema):
        try:
            return schema(options)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    raise ValueError(
        f"{key}: {name}'s options_schema {schema!r} is not a model, dataclass or parsing function"
    )


def options_json(options: Any) -> Any:
    """Parsed options as JSON-safe data with their defaults (for ``lock.json``); None -> ``{}``."""
    if options is None:
        return {}
    if isinstance(options, BaseModel):
        return options.model_dump(mode="json")
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return _json_safe(dataclasses.asdict(options))
    return _json_safe(options)


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _unknown_line(key: str, name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else (f"; known: {', '.join(known)}" if known else "")
    return f"{key}.{name}: unknown option{hint}"


def _pydantic_line(key: str, err: Mapping[str, Any], known: list[str]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        return _unknown_line(key, loc, known)
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    return f"{key}.{loc}: {msg}" if loc else f"{key}: {msg}"


def step_cap(batch_size: int, max_groups_per_step: float) -> int:
    """Groups a step counts at most under a rule: ``max(B, ceil(round(m * B, 9)))``.

    The rounding to 9 decimals makes ``1.1 * 10`` give 11, not the 12 its binary float would.
    """
    return max(batch_size, math.ceil(round(max_groups_per_step * batch_size, 9)))


def carries_datums(output: Any) -> bool:
    """Whether a workflow output carries datums to train: None or a length of 0 carries none; an output whose
    length is unknown counts as carrying some (it may, and it must then not keep its place as an empty one)."""
    if output is None:
        return False
    try:
        return len(output) != 0
    except TypeError:
        return True


# ------------------------------------------------------------------------------------------ the run's rules


@dataclass
class _Rule:
    """One resolved rule of the run: the run's, or an entry's own."""

    name: str  # qualified: the run's as written, or <name>@<entry>
    ref: str  # as written
    level: str
    entry: str | None
    cls: type
    options: Any
    instance: Any = None


@dataclass
class _Counts:
    admitted: int = 0
    rejected: int = 0
    stale: int = 0
    failed: int = 0
    judged: int = 0
    informative: int = 0
    admitted_reasons: Counter = field(default_factory=Counter)
    rejected_reasons: Counter = field(default_factory=Counter)


def _entry_key(label: str) -> str:
    return f"environments[{label!r}]"


def _resolve_all(
    run_rule: str,
    run_options: Mapping[str, Any] | None,
    entry_rules: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
) -> tuple[_Rule | None, dict[str, _Rule], list[str]]:
    """Resolve and parse the run's rule and each entry's own; the problems, each with its key path."""
    problems: list[str] = []

    def one(ref: Any, options: Any, *, key: str, level: str, entry: str | None) -> _Rule | None:
        try:
            cls = resolve_group_admission(ref)
        except ExtensionError as exc:
            problems.append(f"{key}.group_admission: {exc}")
            return None
        name = ref if entry is None else f"{ref}@{entry}"
        try:
            parsed = parse_rule_options(cls, options, key=f"{key}.group_admission_options", name=ref)
        except ValueError as exc:
            problems.extend(str(exc).splitlines())
            return None
        return _Rule(name, ref, level, entry, cls, parsed)

    run = one(run_rule, run_options, key="train", level="run", entry=None)
    own: dict[str, _Rule] = {}
    for label, (ref, options) in entry_rules.items():
        key = _entry_key(label)
        if ref is None:
            if options:
                problems.append(
                    f"{key}.group_admission_options: set without {key}.group_admission; the options go with the "
                    "rule they configure"
                )
            continue
        rule = one(ref, options, key=key, level="entry", entry=label)
        if rule is not None:
            own[label] = rule
    return run, own, problems


def admission_problems(
    *,
    run_rule: str,
    run_options: Mapping[str, Any] | None,
    entry_rules: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
    entries: Mapping[str, Mapping[str, Any]],
    batch_size: int,
    label_column: str | None,
    max_groups_per_step: float,
    workflow_gives_verdicts: bool,
) -> list[str]:
    """Every load-time problem of a run's rules (stage 2, before the run starts), one line each with its key path.

    Resolves each rule, parses its options, runs its ``check`` at its level (a message that does not start with
    the rule's name gets it prefixed), and refuses ``informative`` (or a subclass) beside a training workflow that
    gives no verdicts.
    """
    run, own, problems = _resolve_all(run_rule, run_options, entry_rules)
    rules = ([run] if run is not None else []) + list(own.values())
    for rule in rules:
        key = "train" if rule.entry is None else _entry_key(rule.entry)
        ctx = AdmissionCheckContext(
            rule.level,
            rule.entry,
            entries,
            batch_size,
            label_column,
            max_groups_per_step,
            workflow_gives_verdicts,
        )
        check = getattr(rule.cls, "check", None)
        if check is not None:
            try:
                check(rule.options, ctx)
            except ValueError as exc:
                msg = str(exc)
                problems.append(
                    f"{key}.group_admission: {msg if msg.startswith(rule.ref) else f'{rule.ref}: {msg}'}"
                )
            except Exception as exc:  # noqa: BLE001 - a check that crashes is the plug-in's bug, shown as one
                problems.append(
                    f"{key}.group_admission: {rule.ref}'s check raised {type(exc).__name__}: {exc}"
                )
        if issubclass(rule.cls, Informative) and not workflow_gives_verdicts:
            problems.append(
                f"{key}.group_admission: {rule.ref} judges groups by their verdicts, and the training workflow "
                "gives none: use a GroupRolloutWorkflow, or declare gives_verdicts = True on a workflow class that "
                "gives each group a verdict"
            )
    return problems


class AdmissionSet:
    """The run's admission rules for one start: the dispatcher asks it at each settle and reads its metrics.

    ``entry_rules`` maps an entry label to ``(rule name or None, options)``; None inherits the run's rule, its
    options and its instance. ``entries`` is ``EntryInfo`` by label, handed to the rules' setup. A problem with a
    rule or its options raises ``ConfigError`` listing every one.
    """

    def __init__(
        self,
        *,
        run_rule: str,
        run_options: Mapping[str, Any] | None,
        entry_rules: Mapping[str, tuple[str | None, Mapping[str, Any] | None]],
        entries: Mapping[str, Any],
        batch_size: int,
        label_column: str | None = None,
    ) -> None:
        run, own, problems = _resolve_all(run_rule, run_options, entry_rules)
        if problems:
            raise ConfigError(problems)
        assert run is not None
        self.batch_size = batch_size
        self.label_column = label_column
        self._entries = dict(entries)
        self._run = run
        self._own = own
        self.labels: tuple[str, ...] = tuple(dict.fromkeys([*entries, *entry_rules]))
        """Every entry label the set knows, config order first: each is logged every step, even at 0."""
        refs = [(own.get(label) or run).ref for label in self.labels] or [run.ref]
        self.rule_mode: bool = any(ref != "all" for ref in refs)
        """Any entry's effective rule is not literally ``all`` (with no entries, the run's)."""
        for rule in [run, *own.values()]:
            setup = AdmissionSetup(rule.name, rule.level, rule.entry, self._entries, batch_size, label_column)
            rule.instance = rule.cls(setup, rule.options)
        self._counts = _Counts()
        self._label_counts = {label: _Counts() for label in self.labels}
        self._reason_keys: dict[str, set[str]] = {}
        self._errors = 0
        self._failed_rules: set[str] = set()
        self._unknown_rules: set[str] = set()
        self._warnings: list[str] = []

    # -- deciding ----------------------------------------------------------------------------------------------

    def rule_name(self, entry: str | None) -> str:
        """The qualified name of the rule that decides for ``entry`` (its own, else the run's)."""
        rule = self._own.get(entry) if entry is not None else None
        return (rule or self._run).name

    def decide(
        self, record: GroupRecord | None, stats: TaskStatsView, *, entry: str | None
    ) -> tuple[Admission, str]:
        """The verdict on a settled group, and the qualified name of the rule that gave it.

        ``record`` None means the workflow failed: ``Admission(False, "failed")`` without asking the rule. Otherwise
        the entry's own rule (else the run's) is asked once; a failure of the rule admits the group (fails open).
        """
        rule = (self._own.get(entry) if entry is not None else None) or self._run
        if record is None:
            return FAILED, rule.name
        try:
            answer = rule.instance.admit(record, stats)
        except Exception as exc:  # noqa: BLE001 - a rule fails open, whatever it raises
            return self._fail_open(rule, record, f"raised {type(exc).__name__}: {exc}"), rule.name
        if inspect.isawaitable(answer):
            close = getattr(answer, "close", None)
            if callable(close):
                close()
            return self._fail_open(
                rule, record, "returned an awaitable; admit is one synchronous call"
            ), rule.name
        verdict, problem = accept_answer(answer)
        if verdict is None:
            return self._fail_open(rule, record, problem), rule.name
        if verdict.reason == "unknown" and verdict.admit and isinstance(rule.instance, Informative):
            if rule.name not in self._unknown_rules:
                self._unknown_rules.add(rule.name)
                self._warnings.append(
                    f"group admission {rule.name!r} admitted a group of task {record.task_id!r} whose verdict "
                    f"{record.verdict!r} it does not know (reason 'unknown'): it cannot tell whether such groups "
                    "train anything. Give the workflow's output a verdict, such as trained or uniform"
                )
        return verdict, rule.name

    def _fail_open(self, rule: _Rule, record: Any, what: str) -> Admission:
        self._errors += 1
        if rule.name not in self._failed_rules:
            self._failed_rules.add(rule.name)
            self._warnings.append(
                f"group admission {rule.name!r} failed on a group of task {getattr(record, 'task_id', '?')!r}: "
                f"it {what}. The group is admitted (a rule fails open); further failures of this rule are only "
                f"counted in {PREFIX}errors"
            )
        return ADMITTED

    # -- counting ----------------------------------------------------------------------------------------------

    def note(self, kind: str, *, label: str | None, reason: str | None, informative: bool | None) -> None:
        """Count one group for the step's metrics: ``kind`` is admitted, rejected, stale or failed.

        ``label`` is the group's entry label (None: run-wide only); ``reason`` the rule's (admitted and rejected);
        ``informative`` whether its verdict is ``trained``, None when it has no output (then it is not judged).
        """
        if kind not in KINDS:
            raise ValueError(f"note: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        key = self._reason_key(label, reason) if kind in ("admitted", "rejected") else None
        targets = [self._counts]
        if label is not None:
            counts = self._label_counts.get(label)
            if counts is None:
                counts = self._label_counts[label] = _Counts()
            targets.append(counts)
        for c in targets:
            setattr(c, kind, getattr(c, kind) + 1)
            if kind == "admitted" and key is not None and key != "admitted":
                c.admitted_reasons[key] += 1
            elif kind == "rejected" and key is not None:
                c.rejected_reasons[key] += 1
            if informative is not None:
                c.judged += 1
                c.informative += bool(informative)

    def _reason_key(self, label: str | None, reason: str | None) -> str | None:
        if reason is None:
            return None
        keys = self._reason_keys.setdefault(self.rule_name(label), set())
        if reason in keys or reason == "admitted":
            return reason
        if _REASON_KEY.fullmatch(reason) and len(keys) < MAX_REASON_KEYS:
            keys.add(reason)
            return reason
        return "other"

    def metrics(self, *, draws: float | None) -> dict[str, float]:
        """The step's ``train/admission/*``, then reset (semantics 3.7).

        Per label, under ``train/admission/environment/<label>/`` (``/`` in a label becomes ``--``), every known
        label even at 0: ``admitted``, ``admitted/<reason>`` (reasons other than admitted), ``rejected``,
        ``rejected/<reason>``, ``stale``, ``failed``, and ``informative_rate`` (informative / judged, when some group
        was judged). Run-wide under ``train/admission/``: the same with ``groups_admitted`` for ``admitted``, plus
        ``errors`` and ``draws_per_admitted`` (``draws`` / admitted, when both are known and admitted > 0). The
        dispatcher adds ``counted`` and ``short``, which only it can count.
        """
        out = self._emit(PREFIX, self._counts, admitted_key="groups_admitted")
        out[PREFIX + "errors"] = float(self._errors)
        if draws is not None and self._counts.admitted > 0:
            out[PREFIX + "draws_per_admitted"] = float(draws) / self._counts.admitted
        for label, counts in self._label_counts.items():
            out.update(
                self._emit(
                    f"{PREFIX}environment/{label.replace('/', '--')}/", counts, admitted_key="admitted"
                )
            )
        self._counts = _Counts()
        self._label_counts = {label: _Counts() for label in self.labels}
        self._errors = 0
        return out

    @staticmethod
    def _emit(prefix: str, c: _Counts, *, admitted_key: str) -> dict[str, float]:
        out = {prefix + admitted_key: float(c.admitted)}
        for reason, n in sorted(c.admitted_reasons.items()):
            out[f"{prefix}admitted/{reason}"] = float(n)
        out[prefix + "rejected"] = float(c.rejected)
        for reason, n in sorted(c.rejected_reasons.items()):
            out[f"{prefix}rejected/{reason}"] = float(n)
        out[prefix + "stale"] = float(c.stale)
        out[prefix + "failed"] = float(c.failed)
        if c.judged:
            out[prefix + "informative_rate"] = c.informative / c.judged
        return out

    # -- outboxes and records ----------------------------------------------------------------------------------

    def take_warnings(self) -> list[str]:
        """Warnings since the last call: a rule's first failure, ``informative``'s first unknown verdict."""
        out, self._warnings = self._warnings, []
        return out

    def plan_line(self, *, max_groups_per_step: float) -> str:
        """The sampling plan's line in rule mode (``config validate`` and the start of training print it)."""
        by_rule: dict[str, list[str]] = {}
        for label in self.labels:
            by_rule.setdefault((self._own.get(label) or self._run).ref, []).append(label)
        rules = (
            "; ".join(f"{ref} for {', '.join(labels)}" for ref, labels in by_rule.items()) or self._run.ref
        )
        cap = step_cap(self.batch_size, max_groups_per_step)
        return (
            f"group admission (experimental): {rules}; a step trains the first {self.batch_size} admitted groups of "
            f"at most {cap} (refill.max_groups_per_step {max_groups_per_step:g})"
        )

    def records(self) -> list[dict[str, Any]]:
        """``lock.json`` component records (semantics 6.6): none outside rule mode; one per (rule, class, level),
        rules named ``all`` skipped. The run's lists the entries that inherit it, with ``options: {"train": ...}``;
        an entry rule's lists the entries that set it, with ``options: {label: ...}``.

        ``distribution`` and ``distribution_version`` are filled for core's classes only: finding an extension's
        distribution reads installed metadata, which the run directory's writer does.
        """
        if not self.rule_mode:
            return []
        out: list[dict[str, Any]] = []
        if self._run.ref != "all":
            inherit = [label for label in self.labels if label not in self._own]
            out.append(self._record(self._run, "run", inherit, {"train": options_json(self._run.options)}))
        grouped: dict[tuple[str, type], list[_Rule]] = {}
        for rule in self._own.values():
            if rule.ref != "all":
                grouped.setdefault((rule.ref, rule.cls), []).append(rule)
        for rules in grouped.values():
            labels = [r.entry for r in rules]
            out.append(
                self._record(rules[0], "entry", labels, {r.entry: options_json(r.options) for r in rules})
            )
        return out

    @staticmethod
    def _record(rule: _Rule, level: str, labels: list[Any], options: dict[str, Any]) -> dict[str, Any]:
        resolved = f"{rule.cls.__module__}:{rule.cls.__qualname__}"
        core = rule.cls.__module__.split(".", 1)[0] == "platoon"
        return {
            "kind": "group_admission",
            "ref": rule.ref,
            "resolved": resolved,
            "source": resolved,
            "distribution": "platoon" if core else None,
            "distribution_version": registry.running_version() if core else None,
            "entry_point": None,
            "level": level,
            "environments": labels,
            "options": options,
        }


def accept_answer(answer: Any) -> tuple[Admission | None, str]:
    """``(Admission, "")`` for a valid answer -- a bool, or an ``Admission`` with a bool ``admit`` and a reason that
    is a non-empty string of at most 64 characters -- else ``(None, what is wrong with it)``."""
    if isinstance(answer, bool):
        return Admission(answer), ""
    if not isinstance(answer, Admission):
        return None, f"returned {type(answer).__name__} {_short(answer)}, not an Admission or a bool"
    if not isinstance(answer.admit, bool):
        return None, f"returned Admission(admit={_short(answer.admit)}), whose admit is not a bool"
    reason = answer.reason
    if not isinstance(reason, str) or not reason:
        return None, f"returned Admission with reason {_short(reason)}, not a non-empty string"
    if len(reason) > MAX_REASON_LENGTH:
        return None, f"returned a reason of {len(reason)} characters, more than {MAX_REASON_LENGTH}"
    return answer, ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "ADMITTED",
    "CORE_RULES",
    "FAILED",
    "MAX_REASON_LENGTH",
    "Admission",
    "AdmissionCheckContext",
    "AdmissionRule",
    "AdmissionSet",
    "AdmissionSetup",
    "AdmitAll",
    "GroupAdmission",
    "Informative",
    "accept_answer",
    "admission_problems",
    "carries_datums",
    "options_json",
    "parse_rule_options",
    "resolve_group_admission",
    "step_cap",
]
