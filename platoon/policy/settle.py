"""Settling a group: its record, its verdict under the admission rules, its fate, and its place in the queue.

The ``Dispatcher`` owns the state (``outstanding``, ``queue``) and the group's lease, which it releases whole when
the workflow returns (its permits, teardown waits and label); these functions settle the group itself
(docs/dispatch.md). Rules kept:

- **One record a group** (``group_record``), settled into the statistics at once (a group that raised is
  ``failed``, with no members).
- **Admission** (rule mode only). An admitted group queues as ``admitted`` with the rule's reason; a rejected or
  failed one gets its fate now (its outstanding draw removed in the same call) and queues as a ``marker`` for the
  step it counts toward, emptied of datums. What it does to the horizon is the horizon's (``held``: it carried no
  datums, so its place is given back when a step takes it).
- Without rules, every group queues as it settled: ``admitted``, or ``failed`` when it raised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from platoon.policy.admission import carries_datums
from platoon.policy.dispatch_records import BoundDraw
from platoon.policy.outputs import GroupOutput, SettledGroup, SettledKind
from platoon.policy.samplers.base import TaskStatsView
from platoon.policy.stats import GroupRecord

if TYPE_CHECKING:  # the dispatcher calls these with itself; only the type goes the other way
    from platoon.policy.dispatcher import Dispatcher


def queue_settled(d: Dispatcher, draw: BoundDraw, output: GroupOutput | None, record: GroupRecord) -> None:
    """``draw``'s group settled with ``output`` (None: it raised) as ``record``, its lease already released: admit it
    (rule mode) and queue it for a step."""
    item = SettledGroup(draw.key, draw.task_id, draw.entry, draw.position, output, record,
                        kind=SettledKind.FAILED if output is None else SettledKind.ADMITTED)
    d.queue.append(item if d.admission is None else _admit(d, item, draw))


def group_record(draw: BoundDraw, output: GroupOutput | None, label_column: str) -> GroupRecord:
    """The statistics' record of ``draw`` settled with ``output`` (its label under the pool's ``label_column``)."""
    return GroupRecord(
        start=draw.key[0], seq=draw.key[1], task_id=draw.task_id, entry=draw.entry,
        labels={} if draw.label is None else {label_column: draw.label},
        harness=None, group_size=draw.group_size, sampler=draw.sampler, reason=draw.reason,
        score=draw.score, position=draw.position, drawn_at={"main": draw.version},
        members=tuple(output.members) if output is not None else (),
        verdict="failed" if output is None else (output.verdict if isinstance(output.verdict, str)
                                                 else "unknown"))


def _admit(d: Dispatcher, item: SettledGroup, draw: BoundDraw) -> SettledGroup:
    assert d.admission is not None
    view = TaskStatsView(d.recorder.peek_store(), d.version, live=not d.recorder.stopped)
    verdict, rule = d.admission.decide(item.record if item.output is not None else None, view, entry=draw.entry)
    if verdict.admit:
        return SettledGroup(item.key, item.task_id, item.entry, item.position, item.output, item.record,
                            SettledKind.ADMITTED, verdict.reason)
    held = not carries_datums(item.output)
    fate = "failed" if item.output is None else "rejected"
    d.recorder.fate(*draw.key, fate, task_id=draw.task_id, rule=rule, admission=verdict.reason)
    d.outstanding.pop(draw.key, None)
    if item.output is not None:
        d.admission.note("rejected", label=draw.entry, reason=verdict.reason,
                         informative=item.record.verdict == "trained")
    else:
        d.admission.note("failed", label=draw.entry, reason=verdict.reason, informative=None)
    emptied = None if item.output is None else GroupOutput(item.output.verdict, item.output.members, ())
    d.horizon.rejected(held=held)
    return SettledGroup(item.key, item.task_id, item.entry, item.position, emptied, item.record, SettledKind.MARKER,
                        verdict.reason, d.step, held)
