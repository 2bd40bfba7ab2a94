"""The mixture: the labels' room, and the draws and entry tokens waiting for it, served by their tickets.

What this module owns (docs/dispatch.md, "Labels with room" and "Environments' own samplers"): with
``train.rollout_group_limits``, a label runs at most its limit of groups at once. A drawn row whose label is at its
limit waits in that label's backlog; a slot handed to an entry whose own sampler is adaptive waits as a *token* in
that entry's queue until one of the entry's labels has room. Every waiting draw or token holds a ticket (a counter
that only grows), and the one with the smallest ticket among those that may start goes first, so nothing overtakes
what waited longer. A backlog or token queue holds at most ``BACKLOG_BATCHES x batch_size``; past that the draw is
skipped (fate ``skipped``) or the slot dropped, by the dispatcher; each step logs the rows skipped and parked
(``row_metrics``).

It also says how many horizon places to hold for capped labels (docs/dispatch.md, "The horizon"): with
``max_staleness = k``, ``running`` counts the groups of capped labels that have draws or tokens waiting, and
``held = min(running, max(0, k x B - running))`` places stay free for their next groups (none at ``k = 0``). A
waiting draw or token of such a label may use the places held for its labels.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from platoon.policy.dispatch_records import BoundDraw
from platoon.policy.pool import TaskPool, label_prefix
from platoon.policy.samplers.runtime import Token

BACKLOG_BATCHES = 4


class Mixture:
    """See the module docstring."""

    def __init__(self, pool: TaskPool, label_limits: Mapping[str, int], *, batch_size: int) -> None:
        self.pool = pool
        self.label_limits = label_limits
        self.batch_size = batch_size
        self.capacity = BACKLOG_BATCHES * batch_size
        self.backlogs: dict[str | None, deque[tuple[int, BoundDraw]]] = {}
        self.tokens: dict[str, deque[tuple[int, Token]]] = {}
        self.active_labels: dict[str, int] = {}
        self.ticket = 0
        self._labels = list(dict.fromkeys(row.label for row in pool.rows))
        self._entry_labels: dict[str, list[str | None]] = {}

    # ----------------------------------------------------------------------------------------------- room
    def has_room(self, label: str | None) -> bool:
        limit = self.label_limits.get(label) if label is not None else None
        return limit is None or self.active_labels.get(label, 0) < limit

    def any_room(self) -> bool:
        return not self.label_limits or any(self.has_room(label) for label in self._labels)

    def entry_can_start(self, entry: str) -> bool:
        """True when one of ``entry``'s labels has room."""
        if not self.label_limits:
            return True
        return any(self.has_room(label) for label in self.entry_labels(entry))

    def held(self, max_staleness: int | None, *, release: tuple[str | None, ...] = ()) -> int:
        """Horizon places held for capped labels' next groups; ``release``: the labels of the waiting draw or token
        being considered, whose places are released for it."""
        if not max_staleness or not self.label_limits:
            return 0
        waiting = self._waiting_labels()
        running = sum(self.active_labels.get(label, 0) for label in waiting)
        held = min(running, max(0, max_staleness * self.batch_size - running))
        for label in dict.fromkeys(release):
            if label in waiting:
                held -= min(self.active_labels.get(label, 0), held)
        return held

    def _waiting_labels(self) -> list[str]:
        """The capped labels that have a draw waiting, or are labels of an entry with tokens waiting."""
        labels: dict[str, None] = {}
        for label, backlog in self.backlogs.items():
            if backlog and label in self.label_limits:
                labels[label] = None
        for entry, queue in self.tokens.items():
            if queue:
                labels.update(dict.fromkeys(lb for lb in self.entry_labels(entry) if lb in self.label_limits))
        return list(labels)

    def entry_labels(self, entry: str) -> list[str | None]:
        """The distinct labels of ``entry``'s rows, in listing order."""
        labels = self._entry_labels.get(entry)
        if labels is None:
            labels = self._entry_labels[entry] = list(dict.fromkeys(r.label for r in self.pool.by_entry(entry)))
        return labels

    def take_label(self, label: str | None) -> None:
        """A group of ``label`` starts."""
        if label is not None and label in self.label_limits:
            self.active_labels[label] = self.active_labels.get(label, 0) + 1

    def release_label(self, label: str | None) -> None:
        """A group of ``label`` settled."""
        if label is not None and label in self.label_limits:
            self.active_labels[label] -= 1

    # -------------------------------------------------------------------------------------------- waiting
    def next_ticket(self) -> int:
        self.ticket += 1
        return self.ticket

    def park_draw(self, draw: BoundDraw, *, bounded: bool = True) -> bool:
        """Wait for room in ``draw``'s label; False when its backlog is full (``bounded=False``: a resume's
        reissues, which wait whatever the backlog holds)."""
        backlog = self.backlogs.setdefault(draw.label, deque())
        if bounded and len(backlog) >= self.capacity:
            return False
        backlog.append((self.next_ticket(), draw))
        return True

    def park_token(self, token: Token, *, bounded: bool = True) -> bool:
        """Wait for room in one of ``token``'s entry's labels; False when its queue is full (``bounded``: as
        ``park_draw``)."""
        queue = self.tokens.setdefault(token.entry, deque())
        if bounded and len(queue) >= self.capacity:
            return False
        queue.append((self.next_ticket(), token))
        return True

    def requeue_token(self, token: Token) -> None:
        """A token whose adaptive decision found nothing goes back to the head of its entry's queue."""
        self.tokens.setdefault(token.entry, deque()).appendleft((self.next_ticket(), token))

    def tokens_waiting(self, entry: str) -> bool:
        return bool(self.tokens.get(entry))

    def pop_next(self, fits: Callable[[tuple[str | None, ...]], bool]) -> BoundDraw | Token | None:
        """The waiting draw or token with the smallest ticket that may start now (removed), or None.
        ``fits(labels)``: the horizon has room for a waiting draw or token of these labels."""
        best: tuple[int, deque] | None = None
        for label, backlog in self.backlogs.items():
            if backlog and self.has_room(label) and (best is None or backlog[0][0] < best[0]) and fits((label,)):
                best = (backlog[0][0], backlog)
        for entry, queue in self.tokens.items():
            if (queue and self.entry_can_start(entry) and (best is None or queue[0][0] < best[0])
                    and fits(tuple(self.entry_labels(entry)))):
                best = (queue[0][0], queue)
        return None if best is None else best[1].popleft()[1]

    # ------------------------------------------------------------------------------------------- metrics
    def parked(self) -> dict[str | None, int]:
        """Rows waiting for their label's room, by label: the waiting draws, and the tokens of entries whose tasks
        share one label."""
        out: dict[str | None, int] = {}
        for label, backlog in self.backlogs.items():
            out[label] = out.get(label, 0) + len(backlog)
        for entry, queue in self.tokens.items():
            labels = self.entry_labels(entry)
            if len(labels) == 1:
                out[labels[0]] = out.get(labels[0], 0) + len(queue)
        return out

    def row_metrics(self, skipped: Mapping[str | None, int]) -> dict[str, float]:
        """With label limits: ``train/batch/{skipped_rows,parked_rows}``, run-wide and for each capped label
        (``train/batch/<column>/<label>/``); ``skipped``: the drawn rows skipped in the step's window, by label."""
        if not self.label_limits:
            return {}
        parked = self.parked()
        out = {"train/batch/skipped_rows": float(sum(skipped.values())),
               "train/batch/parked_rows": float(sum(parked.values()))}
        for label in self.label_limits:
            prefix = f"train/batch/{label_prefix(self.pool.label_column, label)}/"
            out[f"{prefix}skipped_rows"] = float(skipped.get(label, 0))
            out[f"{prefix}parked_rows"] = float(parked.get(label, 0))
        return out

    # --------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-safe; a waiting draw is written by its key (its draw is among the dispatcher's outstanding ones)."""
        return {"ticket": self.ticket, "active_labels": dict(self.active_labels),
                "backlogs": {_label_key(lb): [[t, list(dr.key)] for t, dr in q] for lb, q in self.backlogs.items()},
                "token_queues": {e: [[t, tok.position, tok.entry, tok.fallback] for t, tok in q]
                                 for e, q in self.tokens.items()}}

    def load_state_dict(self, state: Mapping[str, Any], draws: Mapping[tuple[int, int], BoundDraw]) -> None:
        self.ticket = int(state["ticket"])
        self.active_labels = dict(state["active_labels"])
        self.backlogs = {_label(lb): deque((t, draws[tuple(k)]) for t, k in q) for lb, q in state["backlogs"].items()}
        self.tokens = {e: deque((t, Token(pos, ent, fb)) for t, pos, ent, fb in q)
                       for e, q in state["token_queues"].items()}


def _label_key(label: str | None) -> str:
    return "" if label is None else label


def _label(key: str) -> str | None:
    return None if key == "" else key


__all__ = ["BACKLOG_BATCHES", "Mixture"]
