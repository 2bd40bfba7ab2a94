"""The admission rule API: the verdict a rule gives, what it is built with, and the built-in rules.

What this module owns (docs/group-admission.md): the verdict type ``Admission`` and the check of a rule's answer
(``accept_answer``); the rule API (``AdmissionRule``, the ``GroupAdmission`` protocol, ``AdmissionSetup``, and
``AdmissionCheckContext`` from the config layer, the one a rule's check sees at load and at run); ``ResolvedRule``, a
rule as the policy layer receives it (resolved above it, in ``platoon.components``); the built-in rules ``all``
(``AdmitAll``) and ``informative`` (``Informative``) and their registration by name (``CORE_RULES``).

Rules it keeps:

- A rule is one synchronous, pure call ``admit(group, stats) -> Admission | bool`` that keeps no state between
  calls: a resume builds new instances, and a rule that remembered would decide differently after one.
- An answer is valid when it is a bool, or an ``Admission`` with a bool ``admit`` and a reason that is a non-empty
  string of at most ``MAX_REASON_LENGTH`` characters. ``Admission`` itself does not validate, so that a bad answer
  reaches ``accept_answer`` and fails open instead of raising inside the rule.
- The built-ins' names are the config layer's ``CORE_GROUP_ADMISSIONS``, in the same order (asserted at import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from platoon.config.components import (  # AdmissionCheckContext: the one a rule's check sees, at load and at run
    CORE_GROUP_ADMISSIONS,
    AdmissionCheckContext,
    InformativeOptions,
)
from platoon.policy.records import VERDICTS

if TYPE_CHECKING:
    from platoon.policy.samplers.base import EntryInfo, TaskStatsView
    from platoon.policy.stats import GroupRecord

MAX_REASON_LENGTH = 64
"""An admission's reason is a non-empty string of at most this many characters."""
REJECTED_VERDICTS = tuple(v for v in VERDICTS if v not in ("trained", "uniform", "unknown"))
"""Verdicts ``informative`` rejects with the verdict as the reason (``uniform`` is judged by its kind)."""
_UNIFORM_REASONS = {"all_pass": "uniform_pass", "all_fail": "uniform_fail"}


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


@dataclass(frozen=True)
class ResolvedRule:
    """One rule of the run as the policy layer receives it, resolved: the run's, or an entry's own.

    ``name`` is qualified (the run's as written, or ``<name>@<entry>``), ``ref`` as written, ``level`` ``run`` or
    ``entry``; ``cls`` is the class ``ref`` names and ``options`` the config's options as its ``options_schema``
    parsed them (None for a rule that takes none).
    """

    name: str
    ref: str
    level: str
    entry: str | None
    cls: type
    options: Any


@runtime_checkable
class GroupAdmission(Protocol):
    """What the dispatcher needs of a rule: one synchronous ``admit(group, stats) -> Admission | bool``.

    ``True`` is admitted (reason ``admitted``), ``False`` rejected (reason ``rejected``). Subclassing
    ``AdmissionRule`` is the usual way to provide it; any class with such a method and ``Class(setup, options)``
    resolves.
    """

    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission | bool: ...


class AdmissionRule:
    """Optional base class of a group admission rule (any class of the `GroupAdmission` protocol resolves too).

    Contract: ``admit(group, stats)`` is one synchronous call that returns an ``Admission`` or a bool, reads only
    its arguments and ``self.options``, and keeps no state between calls. ``options_schema`` (a pydantic model, a
    dataclass, a parsing function that raises ValueError, or None for "takes no options") parses the config's
    options before ``__init__`` sees them. ``check(options, ctx)`` refuses a config by raising ValueError.
    A subclass that does not implement ``admit`` builds, and raises NotImplementedError when asked (as in 0.4.0),
    which the runtime treats as any failing rule: the group is admitted and the failure logged once.
    """

    options_schema: Any = None

    def __init__(self, setup: AdmissionSetup, options: Any = None) -> None:
        self.setup = setup
        self.options = options

    def admit(self, group: GroupRecord, stats: TaskStatsView) -> Admission | bool:
        """The verdict on ``group``, settled; ``stats`` is the per-task statistics as of their last flush."""
        raise NotImplementedError(f"{type(self).__name__} does not implement admit(group, stats)")

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
