"""The launch gate's rules: when a rollout worker's launch may start, so that the run's workers do not exhaust a node.

What this module owns (docs/rollout-workers.md, "The launch gate"): the rules of the rollout lifecycle's
``waiting_launch`` state (``platoon.policy.lifecycle``), decided here once for both runtimes. A runtime asks
``verdict(group, waited_s=, readings=)`` before it launches each worker, tells ``admitted(group)`` when it launches
and ``ended(group, size_bytes=)`` once the worker is ready (its size measured) or gone. The memory *readings* are
the runtime's: the live adapter (``platoon.live.workers.gate``) reads ``/proc`` and the memory cgroup; the
simulator has no node memory and gives none, so there only the group rule holds a launch (docs/architecture.md,
"Where the runtimes differ"). Rules it keeps:

- **groups** (``worker_launch_concurrent_groups``, 0: no limit): at most that many groups launch workers at once; a
  group already launching admits its other members at once (a group's launches stay together);
- **memory**: a launch waits while the node's available memory, less the launches in flight at one worker's
  estimate each, is under the floor (``worker_mem_available_floor_bytes``, or ``reserve_bytes`` when that is 0), or
  the workers' resident memory in all, plus the launches in flight, is over ``worker_rss_soft_limit_bytes`` (0: no
  limit). One worker's estimate is the mean of the ready workers measured so far, else ``ESTIMATE_BYTES`` for the
  start method. It never waits for memory while none of the run's workers is alive or launching (nothing of the
  run's would free memory: waiting could only stall it);
- **bounded**: a launch that has waited ``wait_limit_s`` (the worker's start-up budget) goes ahead, with a warning;
  the first wait of a gate is warned about once, with its figures;
- **the budget**: when the run's permits of workers do not fit in what is available (plus what the workers hold),
  a warning says so with the arithmetic, once a gate: at opening with the estimate, else once the first worker is
  measured.

Nothing here reads a clock or a file: waits arrive as ``waited_s``, memory as ``MemoryReadings``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

ESTIMATE_BYTES = {"exec": 310 * 1024**2, "forkserver": 8 * 1024**2}
"""A worker's resident memory before any is measured, by start method (docs/rollout-workers.md's benchmark: an
``exec`` worker of the built-in stack held 310 MB of its own; a forked one 6.4 MB, its share of the server's aside)."""

RESERVE_BYTES = 1024**3
"""What a floor of 0 still keeps available (or 5% of the node's memory, where that is less): see ``reserve_for``."""


def reserve_for(total_bytes: int | None) -> int:
    """The floor a floor of 0 keeps on a node of ``total_bytes``: ``RESERVE_BYTES``, or 5% of the node if less."""
    return min(RESERVE_BYTES, total_bytes // 20) if total_bytes else RESERVE_BYTES


@dataclass(frozen=True)
class MemoryReadings:
    """How a runtime reads memory, asked only when a rule needs it: ``alive()`` the number of the run's workers
    alive now, ``available()`` the bytes available to them (None: unknown, which holds no launch), ``held()`` the
    workers' resident bytes in all."""

    alive: Callable[[], int]
    available: Callable[[], int | None]
    held: Callable[[], int]


NO_MEMORY = MemoryReadings(alive=lambda: 0, available=lambda: None, held=lambda: 0)
"""Readings of a runtime that models no node memory (the simulator): only the group rule holds a launch."""


@dataclass(frozen=True)
class LaunchVerdict:
    """The gate's answer for one launch: ``admit`` now, or wait for ``reason``; ``warning`` to log, if any."""

    admit: bool
    reason: str | None = None
    warning: str | None = None


def _gb(n: float) -> str:
    return f"{n / 1024**3:.1f} GB"


def _mb(n: float) -> str:
    return f"{n / 1024**2:.0f} MB"


class LaunchRules:
    """The launch gate's state and rules (see the module docstring). ``permits``: the run's rollout permits (None: no
    budget warning); ``method``: the start method (its estimate); ``reserve_bytes``: what a ``floor_bytes`` of 0
    keeps available (0: nothing)."""

    def __init__(self, *, method: str = "forkserver", floor_bytes: int = 0, rss_limit_bytes: int = 0,
                 concurrent_groups: int = 0, wait_limit_s: float = 300.0, permits: int | None = None,
                 reserve_bytes: int = RESERVE_BYTES) -> None:
        self.method = method
        self.floor_bytes, self.rss_limit_bytes = int(floor_bytes), int(rss_limit_bytes)
        self.reserve_bytes = int(reserve_bytes)
        self.concurrent_groups, self.wait_limit_s = int(concurrent_groups), float(wait_limit_s)
        self.permits = permits
        self.groups: dict[Hashable, int] = {}  # the groups launching: their launches in flight
        self.measured: list[int] = []  # the ready workers' resident memory, each as measured once ready
        self._warned_wait = self._warned_budget = False

    @property
    def in_flight(self) -> int:
        """Launches admitted whose workers are not yet ready (still importing)."""
        return sum(self.groups.values())

    def estimate(self) -> int:
        """One worker's resident memory: the mean of those measured, else the start method's estimate."""
        if self.measured:
            return sum(self.measured) // len(self.measured)
        return ESTIMATE_BYTES.get(self.method, ESTIMATE_BYTES["exec"])

    # ------------------------------------------------------------------------------------------- deciding
    def verdict(self, group: Hashable, *, waited_s: float, readings: MemoryReadings) -> LaunchVerdict:
        """May a launch of ``group`` that has waited ``waited_s`` start now? (It is not counted until ``admitted``.)"""
        why = self.why_wait(group, readings)
        if why is None:
            return LaunchVerdict(True)
        if waited_s >= self.wait_limit_s:
            return LaunchVerdict(True, why, f"a rollout worker launch waited {waited_s:.0f}s, its limit "
                                 f"(worker_startup_budget_seconds), and goes ahead: {why}")
        warning = None
        if not self._warned_wait:
            self._warned_wait = True
            warning = f"rollout worker launches wait: {why}"
        return LaunchVerdict(False, why, warning)

    def why_wait(self, group: Hashable, readings: MemoryReadings) -> str | None:
        """Why a launch of ``group`` must wait now (None: it need not)."""
        groups = self.groups
        if self.concurrent_groups and group not in groups and len(groups) >= self.concurrent_groups:
            return (f"{len(groups)} group(s) are launching workers, worker_launch_concurrent_groups "
                    f"{self.concurrent_groups}")
        floor = self.floor_bytes or self.reserve_bytes
        if not floor and not self.rss_limit_bytes:
            return None
        in_flight = self.in_flight
        alive = readings.alive()
        if not alive and not in_flight:
            return None  # nothing of the run's would free memory: waiting could only stall it
        each = self.estimate()
        pending = in_flight * each
        reasons = []
        if floor:
            available = readings.available()
            if available is not None and available - pending < floor:
                under = (f"worker_mem_available_floor_bytes {_gb(floor)}" if self.floor_bytes else
                         f"the {_gb(floor)} kept free when worker_mem_available_floor_bytes is 0")
                reasons.append(f"{_gb(available)} available{_with(in_flight, each)}, under {under}")
        if self.rss_limit_bytes:
            held = readings.held()
            if held + pending > self.rss_limit_bytes:
                reasons.append(f"{alive} worker(s) hold {_gb(held)} resident{_with(in_flight, each, '+')}, "
                               f"over worker_rss_soft_limit_bytes {_gb(self.rss_limit_bytes)}")
        return "; ".join(reasons) or None

    # ------------------------------------------------------------------------------------------- events
    def admitted(self, group: Hashable) -> None:
        """A launch of ``group`` started."""
        self.groups[group] = self.groups.get(group, 0) + 1

    def ended(self, group: Hashable, *, size_bytes: int | None = None) -> bool:
        """A launch of ``group`` is done: its worker is ready and holds ``size_bytes`` (measured), or is gone
        (None). True when this was the first worker measured (the budget is checked again with its size)."""
        left = self.groups.get(group, 0) - 1
        if left > 0:
            self.groups[group] = left
        else:
            self.groups.pop(group, None)
        if size_bytes is not None and size_bytes > 0:
            self.measured.append(int(size_bytes))
            return len(self.measured) == 1
        return False

    def budget_warning(self, *, available: int | None, held: int, each: int | None = None,
                       measured: bool = False) -> str | None:
        """The warning, once a gate, when the run's permits of workers ``each`` bytes in size (default: the estimate)
        do not fit in ``available`` plus what the workers already hold (``held``); None otherwise."""
        if self._warned_budget or not self.permits or available is None:
            return None
        each = self.estimate() if each is None else each
        room = available + held
        need = self.permits * each
        if need <= room:
            return None
        self._warned_budget = True
        size = "measured" if measured else "estimated, none measured yet"
        return (f"rollout workers ({self.method}) at the run's permits do not fit this node: "
                f"{self.permits} permits x {_mb(each)} per worker ({size}) = {_gb(need)}, more than the "
                f"{_gb(room)} available (available {_gb(available)} plus the workers' {_gb(held)}); launches "
                f"will wait for memory (worker_mem_available_floor_bytes, worker_rss_soft_limit_bytes), so "
                f"rollouts start slower than the permits allow: set fewer permits "
                f"(train.max_concurrent_rollouts) or use worker_start_method: forkserver")

    def state(self) -> dict[str, int]:
        """The groups launching and the launches in flight (for tests and diagnostics)."""
        return {"groups": len(self.groups), "in_flight": self.in_flight}

    def state_dict(self) -> dict:
        """The gate's state, for a runtime's checkpoint (an exact resume): the groups launching and their launches
        in flight (a group's key as a list, where it is a tuple), the sizes measured, the warnings given."""
        return {"groups": [[list(g) if isinstance(g, tuple) else g, n] for g, n in self.groups.items()],
                "measured": list(self.measured), "warned_wait": self._warned_wait,
                "warned_budget": self._warned_budget}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` saved (a group's key read back as a tuple where it was a list)."""
        self.groups = {tuple(g) if isinstance(g, list) else g: int(n) for g, n in state["groups"]}
        self.measured = [int(n) for n in state["measured"]]
        self._warned_wait, self._warned_budget = bool(state["warned_wait"]), bool(state["warned_budget"])


def _with(in_flight: int, each: int, sign: str = "-") -> str:
    return f" ({sign} {in_flight} launch(es) in flight at ~{_mb(each)} each)" if in_flight else ""


__all__ = ["ESTIMATE_BYTES", "NO_MEMORY", "RESERVE_BYTES", "LaunchRules", "LaunchVerdict", "MemoryReadings",
           "reserve_for"]
