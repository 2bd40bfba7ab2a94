"""The launch gate: when a rollout worker may start, so that the workers at the run's permits do not exhaust the node.

``WorkerPool`` asks ``LaunchGate.admit(group)`` before it starts each worker and gives the ``Launch`` back once the
worker is ready (its episode set up: an ``exec`` worker's imports done), or ended. Rules it keeps:

- **groups** (``worker_launch_concurrent_groups``): at most that many groups launch workers at once; a group already
  launching admits its other members at once (a group's launches stay together); evaluation's episodes are one group;
- **memory**: a launch waits while the node's available memory is under ``worker_mem_available_floor_bytes``, or the
  workers' resident memory in all is over ``worker_rss_soft_limit_bytes`` (0: no limit). Available memory is
  ``MemAvailable`` (``/proc/meminfo``), or less where the process's memory cgroup (v2 ``memory.max``, v1
  ``memory.limit_in_bytes``: a container's limit, which ``/proc/meminfo`` does not show) leaves less room: its limit
  less its usage, reclaimable page cache (``inactive_file``) aside. A floor of 0 keeps ``reserve_bytes`` (1 GiB, or
  5% of the node's memory where that is less): below it the next thing to start is the kernel's OOM killer, which
  would end the run without a word. A worker's resident memory is its proportional set size (PSS, ``/proc/<pid>/smaps_rollup``: its own
  pages and its share of those it shares, so that workers forked from one fork server do not each count the server's
  pages), else its RSS (``/proc/<pid>/statm``). The launches in flight (started, not yet ready: still importing)
  count at one worker's estimate each, against both: the mean of the ready workers measured so far, else
  ``ESTIMATE_BYTES`` for the start method;
- **bounded**: a launch waits at most ``wait_limit_s`` (the worker's start-up budget), then goes ahead; and it never
  waits while none of the pool's workers is alive or launching (nothing of the run's would free memory). The first
  wait is logged as a warning with its figures, once per pool;
- **the budget**: when the run's permits of workers do not fit in what is available (plus what the workers hold), a
  warning says so with the arithmetic: at the pool's opening with the start method's estimate
  (``check_budget``), else once the first worker is measured, with its measured size; once per pool.

The memory readers are parameters (``available``, ``resident``), so tests inject figures rather than pressure.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from platoon.policy import ESTIMATE_BYTES, LaunchRules, MemoryReadings, reserve_for

__all__ = ["ESTIMATE_BYTES", "Launch", "LaunchGate", "cgroup_room", "mem_available", "reserve_bytes", "resident_bytes"]

Logger = Callable[[str, str], None]

POLL_S = 0.25
"""How often a waiting launch looks again (sooner when a worker ends or becomes ready)."""

REREAD_S = 2.0
"""How long a worker's resident memory, once read, stands for it (``LaunchGate._held``)."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _meminfo(field: str, path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text) if text.isdigit() else None


def _inactive_file(stat: Path) -> int:
    try:
        for line in stat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name in ("inactive_file", "total_inactive_file") and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def cgroup_room(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """What this process's memory cgroup leaves: its limit less its usage, reclaimable page cache aside; None where it
    sets no limit (or none can be read). cgroup v2 (``memory.max``, ``memory.current``) and v1 (the ``memory``
    controller's ``memory.limit_in_bytes``, ``memory.usage_in_bytes``); the cgroup's own directory, else the mount's
    root (a container sees its cgroup there)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    base = Path(root)
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.lstrip("/")
        if controllers == "" and path:  # v2's unified hierarchy
            tries = [(base / rel, "memory.max", "memory.current"), (base, "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):
            tries = [(base / "memory" / rel, "memory.limit_in_bytes", "memory.usage_in_bytes"),
                     (base / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")]
        else:
            continue
        for directory, limit_file, usage_file in tries:
            limit, usage = _read_int(directory / limit_file), _read_int(directory / usage_file)
            if limit is not None and usage is not None and limit < 2**60:  # v1 writes "no limit" as ~2**63
                return max(0, limit - max(0, usage - _inactive_file(directory / "memory.stat")))
    return None


def mem_available() -> int | None:
    """The memory available to this process in bytes: the node's ``MemAvailable``, or its cgroup's room where that
    is less; None where neither can be read."""
    figures = [f for f in (_meminfo("MemAvailable"), cgroup_room()) if f is not None]
    return min(figures) if figures else None


def reserve_bytes(total: int | None = None) -> int:
    """The floor a floor of 0 keeps: ``RESERVE_BYTES``, or 5% of ``total`` (the node's ``MemTotal``) if less."""
    return reserve_for(_meminfo("MemTotal") if total is None else total)


def resident_bytes(pid: int) -> int:
    """Process ``pid``'s resident memory in bytes: its PSS, else its RSS; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class Launch:
    """One admitted launch: give it back (``done``) once its worker is ready or ended; ``measure`` it when ready."""

    def __init__(self, gate: LaunchGate, group: Hashable, waited_s: float) -> None:
        self._gate, self.group, self.waited_s = gate, group, waited_s
        self._open = True

    def done(self, pid: int | None = None) -> None:
        """The worker is ready (``pid``: measure it) or gone (None); idempotent."""
        if self._open:
            self._open = False
            self._gate._ended(self.group, pid)


class LaunchGate:
    """Admits worker launches by ``platoon.policy.launch_gate``'s rules (see the module docstring), with this
    node's memory readings. ``alive()``: the pids of the pool's workers now; ``permits``: the run's rollout permits
    (None: no budget warning); ``method``: the start method (its estimate); ``reserve``: what a ``floor_bytes`` of 0
    keeps available (default ``reserve_bytes()``; 0: nothing)."""

    def __init__(self, *, alive: Callable[[], Iterable[int]], method: str = "forkserver", floor_bytes: int = 0,
                 rss_limit_bytes: int = 0, concurrent_groups: int = 0, wait_limit_s: float = 300.0,
                 permits: int | None = None, log: Logger | None = None,
                 available: Callable[[], int | None] = mem_available,
                 resident: Callable[[int], int] = resident_bytes, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic, reserve: int | None = None) -> None:
        self.rules = LaunchRules(method=method, floor_bytes=floor_bytes, rss_limit_bytes=rss_limit_bytes,
                                 concurrent_groups=concurrent_groups, wait_limit_s=wait_limit_s, permits=permits,
                                 reserve_bytes=reserve_bytes() if reserve is None else int(reserve))
        self._alive = alive
        self._log = log or (lambda level, message: None)
        self._available, self._resident, self.poll_s, self._clock = available, resident, poll_s, clock
        self._readings: dict[int, tuple[float, int]] = {}  # pid -> (when read, resident bytes)
        self._changed: asyncio.Event | None = None
        self.waits: list[float] = []  # each launch's seconds in the gate

    @property
    def method(self) -> str:
        return self.rules.method

    def estimate(self) -> int:
        """One worker's resident memory: the mean of those measured, else the start method's estimate."""
        return self.rules.estimate()

    # ----------------------------------------------------------------------------------------------- admitting
    async def admit(self, group: Hashable) -> Launch:
        """Wait until a launch of ``group`` may start (bounded: ``wait_limit_s``); the admitted ``Launch``."""
        began = self._clock()
        while True:
            verdict = self.rules.verdict(group, waited_s=self._clock() - began, readings=self._memory())
            if verdict.warning is not None:
                self._log("warning", verdict.warning)
            if verdict.admit:
                break
            await self._changes(self.poll_s)
        self.rules.admitted(group)
        waited = self._clock() - began
        self.waits.append(waited)
        return Launch(self, group, waited)

    def _memory(self) -> MemoryReadings:
        """This node's readings for one look of the rules: the pool's pids read once, and only if a rule asks."""
        pids: list[int] | None = None

        def alive() -> list[int]:
            nonlocal pids
            if pids is None:
                pids = list(self._alive())
            return pids

        return MemoryReadings(alive=lambda: len(alive()), available=self._available, held=lambda: self._held(alive()))

    def _held(self, alive: list[int]) -> int:
        """The workers' resident memory in all, each worker read again at most every ``REREAD_S`` (a launch asks
        before every worker starts: reading every worker's memory each time would cost the event loop N x N reads)."""
        now, cache = self._clock(), self._readings
        for pid in alive:
            reading = cache.get(pid)
            if reading is None or now - reading[0] >= REREAD_S:
                cache[pid] = (now, self._resident(pid))
        if len(cache) > 2 * len(alive):  # forget the workers that ended
            alive_set = set(alive)
            self._readings = cache = {pid: r for pid, r in cache.items() if pid in alive_set}
        return sum(cache[pid][1] for pid in alive)

    async def _changes(self, timeout_s: float) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            pass

    def changed(self) -> None:
        """Something the gate weighs changed (a worker ended): waiting launches look again now."""
        if self._changed is not None:
            self._changed.set()

    # ------------------------------------------------------------------------------------------------ ending
    def _ended(self, group: Hashable, pid: int | None) -> None:
        size = self._resident(pid) if pid is not None else None
        if self.rules.ended(group, size_bytes=size):
            self.check_budget(size, measured=True)
        self.changed()

    def check_budget(self, each: int | None = None, *, measured: bool = False) -> None:
        """Warn, once, when the run's permits of workers ``each`` bytes in size (default: the estimate) do not fit in
        what is available to them: the available memory plus what the workers already hold."""
        rules = self.rules
        if rules.permits:
            available = self._available()
            held = sum(self._resident(pid) for pid in self._alive()) if available is not None else 0
            warning = rules.budget_warning(available=available, held=held, each=each, measured=measured)
            if warning is not None:
                self._log("warning", warning)

    def state(self) -> dict[str, Any]:
        """The groups launching and the launches in flight (for tests and diagnostics)."""
        return self.rules.state()
