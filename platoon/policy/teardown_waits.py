"""Teardown waits: a rollout that ended with its teardowns still running keeps its permit a while.

The ``Dispatcher`` owns the waits (``teardowns``: group key -> member index -> deadline, written as is by its state
format) and the permits they keep; these functions keep the rules of the waits themselves (docs/dispatch.md):

- A wait is taken only by a member that holds its permit on an active lease (``permit_release: rollout``); it ends
  when its teardowns are done or ``teardown_wait_s`` has passed, whichever comes first, and then the permit goes back.
- A wait that reaches its deadline gives its permit back with a warning naming the rollout and its task
  (``overdue``, in the order the waits began).
- A group's waits end with it (``on_group_finished`` drops them: its lease goes back whole). No group is kept with
  no wait left, so the state an exact restore compares holds no empty entry.
"""

from __future__ import annotations

from platoon.policy.outputs import Key

Waits = dict[Key, dict[int, float]]


def end(waits: Waits, key: Key, index: int) -> bool:
    """Member ``index`` of ``key``'s teardowns are done: True if it was waiting (its permit goes back now)."""
    held = waits.get(key, {})
    if held.pop(index, None) is None:
        return False
    if not held:
        waits.pop(key, None)
    return True


def next_deadline(waits: Waits) -> float | None:
    """The earliest deadline of ``waits``, or None."""
    if not waits:
        return None
    return min((t for held in waits.values() for t in held.values()), default=None)


def overdue(waits: Waits, now: float) -> list[tuple[Key, int]]:
    """Remove and return the waits whose deadline is ``now`` or past, in the order they began."""
    due: list[tuple[Key, int]] = []
    for key in list(waits):
        held = waits[key]
        for index, t in list(held.items()):
            if t <= now:
                del held[index]
                due.append((key, index))
        if not held:
            del waits[key]
    return due


def overdue_warning(index: int, task_id: str, wait_s: float) -> str:
    return (f"Rollout {index} of task {task_id} returns its permit with its teardowns still running after "
            f"{wait_s:g}s")
