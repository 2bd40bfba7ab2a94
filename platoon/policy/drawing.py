"""Drawing: which task a group that may start is given, at which position of the run's order, and what a drawn row
or token does while its label or environment has no room.

The ``Dispatcher`` owns the state (``next_position``, ``next_seq``, ``outstanding``, the pending start) and decides
*when* a group may start; these functions decide *what* it draws (docs/dispatch.md). Rules kept:

- **Static.** A static run sampler decides position ``n`` as soon as a group may start (``draw_static``), before its
  permits are held. A drawn row whose label is at its limit waits in the label's backlog; with the backlog full it
  is skipped (fate ``skipped``, counted in ``train/batch/skipped_rows``, warned once a label). A token (an adaptive
  entry's slot) starts at once only when no earlier token of its entry waits; with its queue full its slot is
  skipped (``train/sampler/skipped_slots``, an event, warned once an environment).
- **Adaptive.** An adaptive sampler (and an adaptive entry's token) is asked only once the permits are held
  (``adaptive_draw``), among the tasks whose label has room and whose group fits the permits held.
- **Binding** (``bind``). Every decision becomes draw ``(start, next_seq)``: outstanding until its fate, and
  recorded with its position, version, sampler, reason and score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from platoon.policy.dispatch_records import BoundDraw, PendingStart
from platoon.policy.pool import TaskRow
from platoon.policy.samplers.runtime import Bound, Token

if TYPE_CHECKING:  # the dispatcher calls these with itself; only the type goes the other way
    from platoon.policy.dispatcher import Dispatcher


def draw_static(d: Dispatcher) -> Token | BoundDraw | None:
    """Ask the static run sampler for the next position: the token or draw that may start now, or None when it was
    parked (its label or entry has no room yet) or skipped (its backlog is full)."""
    position = d.next_position
    d.next_position += 1
    answer = d.samplers.static_decision(position)
    if isinstance(answer, Token):
        if not d.mixture.tokens_waiting(answer.entry) and d.mixture.entry_can_start(answer.entry):
            return answer
        if not d.mixture.park_token(answer):
            skip_slot(d, position, answer.entry, "backlog")
        return None
    draw = d.bind(answer, position)
    if d.mixture.has_room(draw.label):
        return draw
    if not d.mixture.park_draw(draw):
        d.outstanding.pop(draw.key)
        d.recorder.fate(*draw.key, "skipped", task_id=draw.task_id)
        d.skipped_rows[draw.label] = d.skipped_rows.get(draw.label, 0) + 1
        d.warn_once(f"skip:{draw.label}", f"label {draw.label}'s backlog is full: skipping drawn rows "
                                          "(counted in train/batch/skipped_rows)")
    return None


def adaptive_draw(d: Dispatcher, pending: PendingStart) -> BoundDraw | None:
    """Ask the adaptive sampler (of the run, or of the pending token's entry) now that ``pending`` holds its permits:
    the bound draw, its label taken and the lease named for it, or None when no task may start. The caller resizes
    the lease when the draw's group is smaller than the permits held."""
    entry = pending.token.entry if pending.token is not None else None
    size = pending.lease.size
    room = {}

    def eligible(task_id: str) -> bool:
        row = d.pool.rows[d.pool.first_index(task_id)]
        if row.label not in room:
            room[row.label] = d.mixture.has_room(row.label)
        return room[row.label] and row.group_size <= size

    d.recorder.flush()
    bound = d.samplers.adaptive_decision(entry, eligible=eligible, view=d.recorder.view(d.version),
                                         step=d.step, version=d.version, max_group_size=size,
                                         fallback_slot=pending.token is not None and pending.token.fallback)
    if bound is None:
        return None
    if pending.token is not None:
        position = pending.token.position
    else:
        position = d.next_position
        d.next_position += 1
    draw = d.bind(bound, position)
    pending.lease.key, pending.lease.task_id = draw.key, draw.task_id
    d.mixture.take_label(draw.label)
    return draw


def bind(d: Dispatcher, bound: Bound, position: int) -> BoundDraw:
    """A decision's row becomes draw ``(start, next_seq)`` at ``position``: outstanding, and recorded."""
    row: TaskRow = bound.row
    key = (d.start_number, d.next_seq)
    d.next_seq += 1
    draw = BoundDraw(key, row.index, row.task_id, row.entry, row.label, position, row.group_size, d.version,
                     bound.sampler, bound.reason, bound.score)
    d.outstanding[key] = draw
    d.recorder.draw(*key, row.task_id, position, version=d.version, sampler=bound.sampler,
                    reason=bound.reason, score=bound.score)
    return draw


def skip_slot(d: Dispatcher, position: int, entry: str, why: str) -> None:
    """Position ``position``'s token of ``entry`` is skipped (``why``): counted, an event, a warning once."""
    d.skipped_slots += 1
    d.emit({"event": "slot_skipped", "start": d.start_number, "position": position, "entry": entry, "why": why})
    d.warn_once(f"slot:{entry}", f"environment {entry}'s token queue is full: skipping its slots")
