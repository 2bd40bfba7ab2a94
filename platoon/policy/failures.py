"""Groups that fail in a row: the point at which a run stops instead of training on nothing.

A group whose workflow raises counts as failed (docs/dispatch.md, "Fates"); one such group is an environment's bad
moment, and the run goes on without it. Groups that all fail, one after another, are an environment that cannot
work (a game server that is down, a tool that always raises): steps would go on consuming failed groups and train
nothing, at the full price of the rollouts. ``FailureStreak`` counts them; once ``limit`` groups in a row failed, the
driver aborts the run with the words of the last failure (which name the group, its entry, its task, the exception
and where it was raised). A group that settles with an output ends the streak; a cancelled one leaves it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAILED_GROUPS_LIMIT = 8
"""The fewest failed groups in a row that stop a run (the driver's limit is the larger of this and two batches)."""


def failure_words(key: tuple[int, int], task: str, entry: str | None, error: BaseException) -> str:
    """A failed group in words: its key, entry and task, the exception, and the notes the harness added to it
    (which tool, or the episode's reset, raised it)."""
    where = f" of entry {entry!r}" if entry else ""
    notes = "".join(f" ({note})" for note in getattr(error, "__notes__", ()))
    return f"group {key}{where} (task {task}) failed: {type(error).__name__}: {error}{notes}"


class FailureStreak:
    """Failed groups in a row, and the words of the last; ``broken()`` once ``limit`` of them failed."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.last = ""

    def failed(self, words: str) -> None:
        self.count += 1
        self.last = words

    def succeeded(self) -> None:
        self.count = 0

    def broken(self) -> bool:
        return self.count >= self.limit

    def reason(self, step: int) -> str:
        """Why the run stops, and how to go on."""
        return (f"the run stopped at step {step}: its last {self.count} groups all failed, so no step could train "
                f"on anything; the last: {self.last}. Fix the environment, then go on from the last checkpoint "
                "with --resume")

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "last": self.last}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Restore ``state_dict``'s; None (a checkpoint older than the streak): none."""
        state = state or {}
        self.count, self.last = int(state.get("count", 0)), str(state.get("last", ""))
