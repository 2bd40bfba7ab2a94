"""The run's admission rules for one start (``AdmissionSet``): deciding at each settle, counting, recording.

What this module owns (docs/group-admission.md): ``AdmissionSet``, which the dispatcher asks at each settle and which keeps the
step's ``train/admission/*`` counts, the warnings outbox and the ``lock.json`` records of the rules; and the two
step rules the dispatcher shares with it, ``step_cap`` and ``carries_datums``.

Rules it keeps:

- Rule mode is decided by *name*: any entry whose effective rule is not literally ``all`` (with no entries, the
  run's rule). A ``module:Class`` that resolves to ``AdmitAll`` still counts as a rule.
- A failed workflow (no output) is rejected as ``failed`` without asking the rule, even for an entry at ``all``.
- A rule fails open: an exception, an invalid answer, or an awaitable (closed unawaited) admits the group. The first
  failure of each rule goes to the warnings outbox; every failure is counted in ``train/admission/errors``.
- Reasons become metric keys only while they are short words (``[a-z][a-z0-9_]{0,31}``) and the rule has used fewer
  than 16; the rest are counted under ``other``, so a rule that puts numbers in its reasons cannot flood the metrics.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from platoon import __version__
from platoon.policy.admission.rules import (
    ADMITTED,
    FAILED,
    Admission,
    AdmissionSetup,
    Informative,
    ResolvedRule,
    accept_answer,
)

if TYPE_CHECKING:
    from platoon.policy.samplers.base import TaskStatsView
    from platoon.policy.stats import GroupRecord

MAX_REASON_KEYS = 16
"""Distinct reasons per rule that get their own metric key; the rest count under ``other``."""
KINDS = ("admitted", "rejected", "stale", "failed")
"""What ``AdmissionSet.note`` counts."""
PREFIX = "train/admission/"
_REASON_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")


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


class AdmissionSet:
    """The run's admission rules for one start: the dispatcher asks it at each settle and reads its metrics.

    ``run`` is the run's rule and ``own`` each entry's own by label, resolved (``platoon.components.resolve_rules``);
    an entry without one inherits the run's rule, its options and its instance. ``entries`` is ``EntryInfo`` by
    label, handed to the rules' setup; ``labels`` the config's entry labels (an entry without training tasks is
    still logged).
    """

    def __init__(
        self,
        *,
        run: ResolvedRule,
        own: Mapping[str, ResolvedRule],
        entries: Mapping[str, Any],
        batch_size: int,
        label_column: str | None = None,
        labels: Sequence[str] = (),
    ) -> None:
        self.batch_size = batch_size
        self.label_column = label_column
        self._entries = dict(entries)
        self._run = run
        self._own = dict(own)
        self.labels: tuple[str, ...] = tuple(dict.fromkeys([*entries, *labels, *own]))
        """Every entry label the set knows, config order first: each is logged every step, even at 0."""
        refs = [(own.get(label) or run).ref for label in self.labels] or [run.ref]
        self.rule_mode: bool = any(ref != "all" for ref in refs)
        """Any entry's effective rule is not literally ``all`` (with no entries, the run's)."""
        self._instances: dict[str, Any] = {}
        """Each rule's instance by qualified name, built once per start (a rule keeps no state between calls)."""
        for rule in [run, *own.values()]:
            setup = AdmissionSetup(rule.name, rule.level, rule.entry, self._entries, batch_size, label_column)
            self._instances[rule.name] = rule.cls(setup, rule.options)
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
        instance = self._instances[rule.name]
        try:
            answer = instance.admit(record, stats)
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
        if verdict.reason == "unknown" and verdict.admit and isinstance(instance, Informative):
            if rule.name not in self._unknown_rules:
                self._unknown_rules.add(rule.name)
                self._warnings.append(
                    f"group admission {rule.name!r} admitted a group of task {record.task_id!r} whose verdict "
                    f"{record.verdict!r} it does not know (reason 'unknown'): it cannot tell whether such groups "
                    "train anything. Give the workflow's output a verdict, such as trained or uniform"
                )
        return verdict, rule.name

    def _fail_open(self, rule: ResolvedRule, record: Any, what: str) -> Admission:
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
        """The step's ``train/admission/*``, then reset (docs/metrics.md).

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
        """``lock.json`` component records (docs/run-directory.md): none outside rule mode; one per (rule, class, level),
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
        grouped: dict[tuple[str, type], list[ResolvedRule]] = {}
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
    def _record(rule: ResolvedRule, level: str, labels: list[Any], options: dict[str, Any]) -> dict[str, Any]:
        resolved = f"{rule.cls.__module__}:{rule.cls.__qualname__}"
        core = rule.cls.__module__.split(".", 1)[0] == "platoon"
        return {
            "kind": "group_admission",
            "ref": rule.ref,
            "resolved": resolved,
            "source": resolved,
            "distribution": "platoon" if core else None,
            "distribution_version": __version__ if core else None,
            "entry_point": None,
            "level": level,
            "environments": labels,
            "options": options,
        }


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
