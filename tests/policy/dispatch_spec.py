"""A naive model of the rules the policy layer documents, for the spec-level state machine in
test_dispatcher_properties.py.

It is fed only what a runtime sees (the decisions and events the dispatcher and the start limit hand out, and the
events the test itself feeds them) and says what the docs require next; it never reads the objects' counters or
private fields.

- ``SlotModel``: start slots (docs/start-limit.md): granted first come, first served, at once (waited 0.0) only when
  a slot is free and nobody waits; each slot comes back once (first call, end, cancellation, or the timer).
- ``StepModel``: steps (docs/dispatch.md "The horizon", docs/group-admission.md "What a step does"): which settled
  groups a step dequeues, which it trains, drops as stale, or counts as markers; and how many groups hold a
  horizon place.
- ``FateLedger``: the draw and fate events of ``tasks/events.jsonl`` (docs/run-directory.md): one fate per draw,
  every fate for a draw, positions used once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from platoon.policy.outputs import GroupOutput
from platoon.policy.start_limit import SlotGranted

Key = tuple[int, int]


class SlotModel:
    """What the start limit must grant: a FIFO of waiters and the slots held, with the time each was taken."""

    def __init__(self, limit: int | None, timer_s: float) -> None:
        self.limit, self.timer_s = limit, timer_s
        self.holding: dict[Hashable, float] = {}  # key -> when it took its slot
        self.queue: deque[tuple[Hashable, float]] = deque()  # (key, asked at)

    def request(self, key: Hashable, now: float) -> bool:
        if self.limit is None:
            return True
        if len(self.holding) < self.limit and not self.queue:
            self.holding[key] = now
            return True
        self.queue.append((key, now))
        return False

    def give_back(self, key: Hashable, now: float) -> list[SlotGranted]:
        """``key``'s slot comes back (a no-op when it holds none); the grants that follow."""
        if self.holding.pop(key, None) is None:
            return []
        return self._grants(now)

    def cancel_wait(self, key: Hashable) -> None:
        self.queue = deque((k, t) for k, t in self.queue if k != key)

    def next_deadline(self) -> float | None:
        return min((t + self.timer_s for t in self.holding.values()), default=None)

    def on_deadline(self, now: float) -> tuple[list[Hashable], list[SlotGranted]]:
        """The slots whose timer ran out by ``now``, and the grants that follow."""
        expired = [k for k, t in self.holding.items() if t + self.timer_s <= now]
        for key in expired:
            del self.holding[key]
        return expired, self._grants(now) if expired else []

    def _grants(self, now: float) -> list[SlotGranted]:
        grants = []
        while self.queue and (self.limit is None or len(self.holding) < self.limit):
            key, asked = self.queue.popleft()
            self.holding[key] = now
            grants.append(SlotGranted(key, now - asked))
        return grants


@dataclass
class Settled:
    """A settled group as the model queues it: ``kind`` admitted, failed or marker (rule mode's rejections)."""

    key: Key
    entry: str
    kind: str
    oldest: int | None  # the oldest version its datums sampled
    datums: int
    held: bool = False  # a marker that keeps its horizon place until a step takes it
    window: int = 0  # the step during which it was rejected
    verdict: str = "trained"


@dataclass(frozen=True)
class ExpectedStep:
    step: int
    version: int
    groups: tuple[Key, ...]
    stale: tuple[Key, ...]
    failed: tuple[Key, ...]
    markers: tuple[Key, ...]


class StepModel:
    """Steps and horizon places as docs/dispatch.md and docs/group-admission.md state them.

    ``open`` counts the groups holding a horizon place: started and not yet given back, where a place comes back
    when the step that dequeued the group publishes, except under a rule: a rejected group with datums gives its
    place back at settle, a held marker, a stale or a failed group when a step dequeues it."""

    def __init__(self, *, batch_size: int, steps: int, cap: int, rule_mode: bool,
                 bound: Callable[[str], int | None], uniform_updates: bool = False) -> None:
        self.B, self.steps, self.cap, self.rule_mode, self.bound = batch_size, steps, cap, rule_mode, bound
        self.uniform_updates = uniform_updates
        self.step = self.version = 0
        self.phase = "assembling"
        self.queue: deque[Settled] = deque()
        self.items: list[tuple[Settled, str]] = []  # (item, kind) dequeued toward the current step
        self.counted = self.admitted = 0
        self.open = 0

    def started(self) -> None:
        self.open += 1

    def settle(self, item: Settled) -> None:
        if item.kind == "marker" and not item.held:
            self.open -= 1
        self.queue.append(item)

    def stale(self, item: Settled) -> bool:
        bound = self.bound(item.entry)
        return bound is not None and item.datums > 0 and item.oldest is not None and self.version - item.oldest > bound

    def cap_load(self) -> int:
        """Under a rule: the groups the step counted, those in the pipeline (running, or settled and waiting), and the
        rejections of its window not yet dequeued; at k = 0 no group starts once they reach the cap."""
        window = sum(i.kind == "marker" and not i.held and i.window == self.step for i in self.queue)
        return self.counted + (self.open - self.admitted) + window

    def complete(self) -> bool:
        if self.rule_mode:
            return self.admitted >= self.B or self.counted >= self.cap
        return self.counted >= self.B

    def take(self) -> ExpectedStep | None:
        """Dequeue in settle order until the step is complete; the step once it is."""
        assert self.phase == "assembling"
        while self.queue and not self.complete():
            item = self.queue.popleft()
            kind = "stale" if item.kind == "admitted" and self.stale(item) else item.kind
            if kind == "marker":
                self.open -= item.held
                self.counted += item.window == self.step
            else:
                if self.rule_mode and kind != "admitted":
                    self.open -= 1
                self.counted += 1
                self.admitted += kind == "admitted"
            self.items.append((item, kind))
        if not self.complete():
            return None
        self.phase = "training"

        def keys(kind: str) -> tuple[Key, ...]:
            return tuple(sorted(i.key for i, k in self.items if k == kind))

        return ExpectedStep(self.step, self.version, keys("admitted"), keys("stale"), keys("failed"), keys("marker"))

    def commit(self) -> list[tuple[Key, str]]:
        """The fates the commit gives: consumed, stale, failed (markers had theirs at settle)."""
        assert self.phase == "training"
        self.phase = "committed"
        fate = {"admitted": "consumed", "stale": "stale", "failed": "failed"}
        return sorted((i.key, fate[k]) for i, k in self.items if k != "marker")

    def publish(self) -> None:
        """The next step begins; the version moves on only when the step's objective is not zero (docs/dispatch.md: a
        step that trains no group, or only uniform groups under a loss without a KL or entropy term, takes no
        update)."""
        assert self.phase == "committed"
        trained = sum(k == "admitted" for _, k in self.items)
        updates = any(k == "admitted" and (i.verdict == "trained" or (self.uniform_updates and i.verdict == "uniform"))
                      for i, k in self.items)
        if self.rule_mode:
            self.open -= trained
        else:
            self.open -= len(self.items)
        self.items, self.counted, self.admitted = [], 0, 0
        self.step += 1
        self.version += updates
        self.phase = "finished" if self.step >= self.steps else "assembling"


def datums_of(output: GroupOutput | None) -> int:
    return 0 if output is None else len(output.datums)


class FateLedger:
    """Draw, fate and slot events as they come out: one fate per draw, every fate for a drawn key."""

    def __init__(self) -> None:
        self.drawn: dict[Key, dict] = {}
        self.fates: dict[Key, dict] = {}
        self.positions: set[int] = set()

    def take(self, events: list[dict]) -> list[dict]:
        for e in events:
            if e["event"] == "draw":
                key = (e["start"], e["seq"])
                assert key not in self.drawn, f"draw {key} drawn twice"
                self._position(e["position"])
                self.drawn[key] = e
            elif e["event"] == "fate":
                key = (e["start"], e["seq"])
                assert key in self.drawn, f"fate {e['fate']} for {key}, which was never drawn"
                assert key not in self.fates, f"draw {key} got a second fate: {self.fates[key]['fate']}, {e['fate']}"
                self.fates[key] = e
            elif e["event"] == "slot_skipped":
                self._position(e["position"])
        return events

    def _position(self, position: int) -> None:
        assert position not in self.positions, f"position {position} used twice"
        self.positions.add(position)

    def unfated(self) -> set[Key]:
        return set(self.drawn) - set(self.fates)
