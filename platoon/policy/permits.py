"""Rollout permits: a first-come-first-served pool and the lease of each training draw.

Rules this module keeps (docs/dispatch.md: permits and leases):
- ``PermitPool`` grants leases in FIFO order; only the head can be partly granted and nothing overtakes it, so a
  large draw at the head is never starved by small ones. A *rolling* lease (its workflow runs its rollouts on the
  lease) is granted one permit at a time and can start on its first; a whole lease needs all its permits.
- A ``DrawLease`` hands its granted permits to its member blocks, FIFO in the order they entered. A block index
  outside ``0..size-1`` raises IndexError; entering an index twice raises RuntimeError — under either
  ``permit_release`` setting. An *inactive* lease (``permit_release: group``) holds its permits until the group is
  released; its blocks hold nothing.
- Every permit is granted once and returned once: ``capacity == free + sum(lease.holding)`` always.

Everything is plain data: ``state_dict()`` / ``from_state()`` round-trip exactly, so a dispatcher snapshot taken at
any instant restores into an equal twin.
"""

from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass

from platoon.policy import frozen

Key = tuple[int, int]


@dataclass(frozen=True)
class GrantPermit:
    """Decision: member ``index`` of group ``key`` may run now; it waited ``waited_s`` for its permit.

    ``held`` is False when the block runs on no permit (inactive lease under ``permit_release: group``, or a
    lease already released)."""

    key: Key
    index: int
    waited_s: float
    held: bool


def _grant(key: Key, index: int, waited_s: float, held: bool) -> GrantPermit:
    """``GrantPermit(key, index, waited_s, held)``, built without a setattr per field (one per rollout)."""
    return frozen.build(GrantPermit, {"key": key, "index": index, "waited_s": waited_s, "held": held})


class DrawLease:
    """The permits of one training draw (see the module docstring)."""

    def __init__(self, key: Key, size: int, *, rolling: bool, active: bool, task_id: str = "") -> None:
        if size < 1:
            raise ValueError(f"a lease needs at least one permit, got {size}")
        self.key, self.size, self.rolling, self.active, self.task_id = key, size, rolling, active, task_id
        self.granted = 0  # permits ever granted to this lease
        self.returned = 0  # permits given back to the pool
        self.in_blocks = 0  # permits held by member blocks right now
        self.used: set[int] = set()
        self.holding_blocks: set[int] = set()
        self.waiting: deque[tuple[int, float]] = deque()  # (index, entered at)
        self.closed = False

    @property
    def holding(self) -> int:
        """Permits this lease holds now (granted and not yet returned)."""
        return self.granted - self.returned

    @property
    def spare(self) -> int:
        """Granted permits no block holds yet."""
        return self.holding - self.in_blocks

    @property
    def startable(self) -> bool:
        return self.granted >= (1 if self.rolling else self.size)

    def check_index(self, index: int) -> int:
        i = operator.index(index)
        if not 0 <= i < self.size:
            raise IndexError(
                f"rollout {i} of task {self.task_id} is outside its draw's lease, of size {self.size}: "
                f"a draw runs each rollout index from 0 to its size less one"
            )
        if i in self.used:
            raise RuntimeError(
                f"rollout {i} of task {self.task_id} entered a second lease block: a draw runs each rollout "
                f"index once, and a rollout's retry stays inside its block"
            )
        return i

    def state_dict(self) -> dict:
        return {
            "key": list(self.key), "size": self.size, "rolling": self.rolling, "active": self.active,
            "task_id": self.task_id, "granted": self.granted, "returned": self.returned,
            "in_blocks": self.in_blocks, "used": sorted(self.used), "holding_blocks": sorted(self.holding_blocks),
            "waiting": [list(w) for w in self.waiting], "closed": self.closed,
        }

    @classmethod
    def from_state(cls, s: dict) -> DrawLease:
        lease = cls(tuple(s["key"]), s["size"], rolling=s["rolling"], active=s["active"], task_id=s["task_id"])
        lease.granted, lease.returned, lease.in_blocks = s["granted"], s["returned"], s["in_blocks"]
        lease.used, lease.holding_blocks = set(s["used"]), set(s["holding_blocks"])
        lease.waiting = deque((int(i), float(t)) for i, t in s["waiting"])
        lease.closed = s["closed"]
        return lease


class PermitPool:
    """``capacity`` permits granted FIFO to leases; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a permit pool needs at least one permit, got {capacity}")
        self.capacity = capacity
        self.free = capacity
        self.queue: deque[DrawLease] = deque()

    @property
    def held(self) -> int:
        return self.capacity - self.free

    def reserve(self, lease: DrawLease, *, now: float) -> list[GrantPermit]:
        """Queue ``lease`` for its permits and run a grant pass."""
        self.queue.append(lease)
        return self.grant(now=now)

    def grant(self, *, now: float) -> list[GrantPermit]:
        """Grant free permits to the head of the queue (and on, while heads complete); hand them to blocks."""
        grants: list[GrantPermit] = []
        while self.queue:
            head = self.queue[0]
            need = head.size - head.granted
            give = min(need, self.free)
            if give > 0 and (head.rolling or give == need):
                head.granted += give
                self.free -= give
                grants.extend(self._hand_to_blocks(head, now=now))
            if head.granted < head.size:
                break
            self.queue.popleft()
        return grants

    def _hand_to_blocks(self, lease: DrawLease, *, now: float) -> list[GrantPermit]:
        grants = []
        while lease.waiting and lease.spare > 0:
            index, since = lease.waiting.popleft()
            lease.in_blocks += 1
            lease.holding_blocks.add(index)
            grants.append(_grant(lease.key, index, now - since, True))
        return grants

    def enter_block(self, lease: DrawLease, index: int, *, now: float) -> GrantPermit | None:
        """A member entered its block: a grant now, or None (it waits FIFO behind the draw's earlier blocks)."""
        i = lease.check_index(index)
        lease.used.add(i)
        if lease.closed or not lease.active:
            return _grant(lease.key, i, 0.0, False)
        if lease.spare > 0 and not lease.waiting:
            lease.in_blocks += 1
            lease.holding_blocks.add(i)
            return _grant(lease.key, i, 0.0, True)
        lease.waiting.append((i, now))
        return None

    def enter_blocks(self, lease: DrawLease, size: int, *, now: float) -> list[GrantPermit]:
        """Members ``0..size-1`` entered their blocks at once, in index order: the grants ``enter_block`` gives
        each in turn (a member without one waits)."""
        grants = []
        for i in range(size):
            grant = self.enter_block(lease, i, now=now)
            if grant is not None:
                grants.append(grant)
        return grants

    def cancel_block(self, lease: DrawLease, index: int) -> None:
        """A waiting block was cancelled: its index never ran and is free again."""
        for pos, (i, _) in enumerate(lease.waiting):
            if i == index:
                del lease.waiting[pos]
                lease.used.discard(index)
                return
        raise RuntimeError(f"block {index} of group {lease.key} is not waiting (cancel_block)")

    def exit_block(self, lease: DrawLease, index: int, *, now: float) -> list[GrantPermit]:
        """A block exited: its permit (if it held one and the lease still does) goes back to the pool."""
        if index not in lease.used:
            raise RuntimeError(f"block {index} of group {lease.key} exited without entering (exit_block)")
        if index not in lease.holding_blocks:
            return []
        lease.holding_blocks.discard(index)
        lease.in_blocks -= 1
        if lease.closed:
            return []
        lease.returned += 1
        self.free += 1
        return self.grant(now=now)

    def release(self, lease: DrawLease, *, now: float) -> list[GrantPermit]:
        """The group's workflow ended: withdraw the lease and return every permit it still holds (once)."""
        if lease.closed:
            return []
        if lease in self.queue:
            self.queue.remove(lease)
        lease.closed = True
        lease.waiting.clear()
        back = lease.holding
        lease.returned += back
        self.free += back
        return self.grant(now=now)

    def resize(self, lease: DrawLease, size: int, *, now: float) -> list[GrantPermit]:
        """Change a lease's size (adaptive decisions reserve for the largest group before knowing the task)."""
        if size < 1:
            raise ValueError(f"a lease needs at least one permit, got {size}")
        surplus = lease.spare - max(0, size - lease.in_blocks)
        if lease.holding > size and surplus > 0:
            give_back = min(surplus, lease.holding - size)
            lease.granted -= give_back
            self.free += give_back
        lease.size = size
        if lease.granted < size and lease not in self.queue and not lease.closed:
            self.queue.appendleft(lease)
        elif lease.granted >= size and lease in self.queue:
            self.queue.remove(lease)
        return self.grant(now=now)

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "free": self.free, "queue": [list(le.key) for le in self.queue]}

    def load_queue(self, state: dict, leases: dict[Key, DrawLease]) -> None:
        """Restore free count and queue order; ``leases`` maps keys to already-restored leases."""
        if state["capacity"] != self.capacity:
            raise ValueError(f"permit pool of {state['capacity']} permits restored into one of {self.capacity}")
        self.free = state["free"]
        self.queue = deque(leases[tuple(k)] for k in state["queue"])
