"""The launch gate (``platoon.live.workers.gate``): launches wait under the memory floor and over the resident soft
limit, at most ``concurrent_groups`` groups launch at once, the waits are bounded and warned of once, and a budget
that cannot fit is said with its arithmetic. The memory readers are injected; one test runs real workers under a floor
above what the node has."""

from __future__ import annotations

import asyncio
import time

import pytest
from live_harness import FakeService
from workers_harness import SleepyWorkflow

from platoon.live.rollouts.workflow import GroupRow
from platoon.live.workers import EnvSpec, WorkerPool, preload_plan
from platoon.live.workers.gate import LaunchGate, cgroup_room, mem_available, reserve_bytes, resident_bytes

GB, MB = 1024**3, 1024**2


class Node:
    """Injected figures: the node's available memory and each worker's resident memory, changed by the test."""

    def __init__(self, available: int, each: int = 100 * MB) -> None:
        self.available, self.each = available, each
        self.pids: list[int] = []

    def alive(self) -> list[int]:
        return list(self.pids)

    def resident(self, pid: int) -> int:
        return self.each if pid in self.pids else 0


def gate(node: Node, messages: list, **kwargs) -> LaunchGate:
    kwargs.setdefault("poll_s", 0.01)
    return LaunchGate(alive=node.alive, available=lambda: node.available, resident=node.resident,
                      log=lambda level, message: messages.append((level, message)), **kwargs)


def test_a_launch_waits_under_the_floor_until_memory_comes_back():
    async def run():
        node, said = Node(available=1 * GB), []
        g = gate(node, said, floor_bytes=2 * GB)
        node.pids = [11]  # one worker of the run's alive: waiting can free memory
        admitted = asyncio.ensure_future(g.admit("a"))
        await asyncio.sleep(0.1)
        assert not admitted.done()
        node.available = 3 * GB
        launch = await asyncio.wait_for(admitted, 5)
        assert launch.waited_s >= 0.1
        return said

    said = asyncio.run(run())
    assert [level for level, _ in said] == ["warning"]
    assert "1.0 GB available, under worker_mem_available_floor_bytes 2.0 GB" in said[0][1]


def test_a_launch_waits_while_the_workers_hold_more_than_the_soft_limit():
    async def run():
        node, said = Node(available=100 * GB, each=600 * MB), []
        g = gate(node, said, rss_limit_bytes=1 * GB)
        node.pids = [11, 12]  # 1.2 GB resident
        admitted = asyncio.ensure_future(g.admit("a"))
        await asyncio.sleep(0.1)
        assert not admitted.done()
        node.pids = [11]  # one ended: 0.6 GB, and the launch's estimate (8 MB forked) fits
        g.changed()
        await asyncio.wait_for(admitted, 5)
        return said

    said = asyncio.run(run())
    assert len(said) == 1 and "2 worker(s) hold 1.2 GB resident, over worker_rss_soft_limit_bytes 1.0 GB" in said[0][1]


def test_launches_in_flight_count_at_the_estimate():
    async def run():
        node, said = Node(available=3 * GB), []
        g = gate(node, said, floor_bytes=int(2.2 * GB), method="exec")  # exec: 310 MB a worker until measured
        first = await g.admit("a")
        second = await g.admit("a")  # 3072 MB - 310 MB over the 2253 MB floor
        third = await g.admit("a")  # 3072 MB - 620 MB over it
        fourth = asyncio.ensure_future(g.admit("a"))  # 3072 MB - 930 MB under it: waits for a launch to be ready
        await asyncio.sleep(0.1)
        assert not fourth.done()
        first.done()
        await asyncio.wait_for(fourth, 5)
        return said, (second, third)

    said, _ = asyncio.run(run())
    assert "3 launch(es) in flight at ~310 MB each" in said[0][1]


def test_at_most_concurrent_groups_launch_at_once_and_a_launching_group_admits_its_members():
    async def run():
        node, said = Node(available=100 * GB), []
        g = gate(node, said, concurrent_groups=2)
        a, b = await g.admit("a"), await g.admit("b")
        a2 = await asyncio.wait_for(g.admit("a"), 1)  # its group is launching already
        c = asyncio.ensure_future(g.admit("c"))
        await asyncio.sleep(0.1)
        assert not c.done() and g.state() == {"groups": 2, "in_flight": 3}
        a.done()
        await asyncio.sleep(0.05)
        assert not c.done()  # a's other member is still launching
        a2.done(pid=None)
        await asyncio.wait_for(c, 5)
        b.done()
        return said

    said = asyncio.run(run())
    assert len(said) == 1 and "2 group(s) are launching workers, worker_launch_concurrent_groups 2" in said[0][1]


def test_a_wait_is_bounded_and_never_starts_with_nothing_alive():
    async def run():
        node, said = Node(available=1 * GB), []
        g = gate(node, said, floor_bytes=2 * GB, wait_limit_s=0.2)
        first = await asyncio.wait_for(g.admit("a"), 1)  # nothing of the run's alive: it goes ahead
        node.pids = [11]
        began = time.monotonic()
        await asyncio.wait_for(g.admit("a"), 5)  # under the floor with a worker alive: waits its limit
        took = time.monotonic() - began
        first.done()
        return said, first.waited_s, took

    said, first_wait, took = asyncio.run(run())
    assert first_wait < 0.05 and 0.2 <= took < 2
    assert [m.split(":")[0] for _, m in said] == ["rollout worker launches wait",
                                                  "a rollout worker launch waited 0s, its limit "
                                                  "(worker_startup_budget_seconds), and goes ahead"]


def test_a_budget_that_cannot_fit_is_said_with_its_arithmetic_once():
    async def run():
        node, said = Node(available=20 * GB, each=310 * MB), []
        g = gate(node, said, permits=256, method="exec")
        launches = [await g.admit("a") for _ in range(2)]
        node.pids = [11, 12]
        for i, launch in enumerate(launches):
            launch.done(pid=11 + i)
        return said

    said = asyncio.run(run())
    assert len(said) == 1
    assert ("256 permits x 310 MB per worker (measured) = 77.5 GB, more than the 20.6 GB available (available "
            "20.0 GB plus the workers' 0.6 GB)") in said[0][1]


def test_a_budget_that_cannot_fit_is_said_at_the_start_with_the_estimate_and_not_again():
    node, said = Node(available=20 * GB, each=310 * MB), []
    g = gate(node, said, permits=256, method="exec")
    g.check_budget()
    assert len(said) == 1 and ("256 permits x 310 MB per worker (estimated, none measured yet) = 77.5 GB, more "
                               "than the 20.0 GB available") in said[0][1]

    async def measure():
        launch = await g.admit("a")
        node.pids = [11]
        launch.done(pid=11)

    asyncio.run(measure())
    assert len(said) == 1


def test_a_pool_under_exec_says_at_its_opening_that_its_permits_cannot_fit(tmp_path):
    workers = WorkerPool(method="exec", scratch=tmp_path / "scratch",
                         gate={"permits": 10**6, "available": lambda: 20 * GB})
    workers.open()
    workers.open()
    budget = [m for _, m in workers.messages if "do not fit this node" in m]
    assert len(budget) == 1 and "1000000 permits x 310 MB per worker (estimated" in budget[0]


def test_a_budget_that_fits_says_nothing():
    async def run():
        node, said = Node(available=20 * GB, each=8 * MB), []
        g = gate(node, said, permits=256)
        launch = await g.admit("a")
        node.pids = [11]
        launch.done(pid=11)
        return said

    assert asyncio.run(run()) == []


def test_a_floor_of_zero_still_keeps_the_reserve_free():
    async def run():
        node, said = Node(available=int(0.5 * GB)), []
        g = gate(node, said, reserve=1 * GB)  # floor_bytes 0
        node.pids = [11]
        admitted = asyncio.ensure_future(g.admit("a"))
        await asyncio.sleep(0.1)
        assert not admitted.done()
        node.available = 2 * GB
        await asyncio.wait_for(admitted, 5)
        return said

    said = asyncio.run(run())
    assert len(said) == 1
    assert "0.5 GB available, under the 1.0 GB kept free when worker_mem_available_floor_bytes is 0" in said[0][1]


def test_the_reserve_is_a_gigabyte_or_five_percent_of_a_small_node():
    assert reserve_bytes(total=64 * GB) == 1 * GB
    assert reserve_bytes(total=8 * GB) == int(8 * GB) // 20


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_containers_memory_limit_bounds_what_is_available(tmp_path, version):
    """A container's cgroup limit is what its OOM killer enforces; /proc/meminfo shows the host's memory."""
    if version == "v2":
        (tmp_path / "proc").write_text("0::/job/7\n")
        d = tmp_path / "sys" / "job" / "7"
        d.mkdir(parents=True)
        (d / "memory.max").write_text(f"{4 * GB}\n")
        (d / "memory.current").write_text(f"{3 * GB}\n")
        (d / "memory.stat").write_text(f"anon 1\ninactive_file {GB // 2}\n")
    else:
        (tmp_path / "proc").write_text("9:pids:/\n4:memory:/job/7\n0::/\n")
        d = tmp_path / "sys" / "memory"  # a container sees its own cgroup at the mount's root
        d.mkdir(parents=True)
        (d / "memory.limit_in_bytes").write_text(f"{4 * GB}\n")
        (d / "memory.usage_in_bytes").write_text(f"{3 * GB}\n")
        (d / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {GB // 2}\n")
    assert cgroup_room(str(tmp_path / "proc"), str(tmp_path / "sys")) == int(1.5 * GB)


def test_no_cgroup_limit_leaves_the_nodes_figure(tmp_path):
    (tmp_path / "proc").write_text("4:memory:/\n")
    d = tmp_path / "sys" / "memory"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (d / "memory.usage_in_bytes").write_text(f"{3 * GB}\n")
    assert cgroup_room(str(tmp_path / "proc"), str(tmp_path / "sys")) is None
    assert cgroup_room(str(tmp_path / "missing"), str(tmp_path / "sys")) is None


def test_the_readers_read_this_node():
    import os

    available = mem_available()
    assert available is None or available > 0
    assert resident_bytes(os.getpid()) > 1 * MB
    assert resident_bytes(2**22 + 12345) == 0  # no such process


# ------------------------------------------------------------------------------------------ real workers
@pytest.mark.live
def test_a_floor_above_what_the_node_has_makes_real_launches_wait_and_says_so(tmp_path):
    from platoon.live.envs import NumberSearch

    specs = {"e": EnvSpec("platoon-number-search", {"ranges": [4, 8]}, None, ("train", "val"))}
    workers = WorkerPool(env_specs=specs, scratch=tmp_path / "scratch",
                         plan=preload_plan(specs, {"e": NumberSearch(ranges=[4, 8])}),
                         gate={"floor_bytes": 2**60, "wait_limit_s": 60.0})
    # member 0 starts at once (nothing alive to wait for) and runs 1 s; member 1 waits for it to end
    workflow = SleepyWorkflow([1.0, 0.0], envs={}, service=FakeService())
    workflow.rollout_workers = workers

    async def run():
        try:
            return await workflow.arun_episode(GroupRow((1, 0), "n4-g3-t1", "e", 2))
        finally:
            await workers.aclose()

    output = asyncio.run(run())
    assert [m.disposition for m in output.members] == ["completed", "completed"]
    waits = sorted(workers.gate.waits)
    assert waits[0] < 0.5 and 0.5 <= waits[1] < 30, waits
    said = [m for level, m in workers.messages if level == "warning" and "launches wait" in m]
    assert len(said) == 1 and "under worker_mem_available_floor_bytes" in said[0], workers.messages
