"""The launch gate's rules (``platoon.policy.launch_gate``), sans-I/O: readings are figures, waits are seconds.

The live adapter (``platoon.live.workers.gate``) is tested with real waits in tests/live/workers/test_gate.py; here each
rule is held against literal figures."""

from __future__ import annotations

from platoon.policy import NO_MEMORY, LaunchRules, MemoryReadings, reserve_for

GB, MB = 1024**3, 1024**2


def readings(*, alive: int = 1, available: int | None = 100 * GB, held: int = 0) -> MemoryReadings:
    return MemoryReadings(alive=lambda: alive, available=lambda: available, held=lambda: held)


def test_the_group_rule_admits_a_launching_groups_others_and_holds_a_new_group():
    rules = LaunchRules(concurrent_groups=1, reserve_bytes=0)
    assert rules.verdict("a", waited_s=0.0, readings=NO_MEMORY).admit
    rules.admitted("a")
    assert rules.verdict("a", waited_s=0.0, readings=NO_MEMORY).admit  # a group's launches stay together
    held = rules.verdict("b", waited_s=0.0, readings=NO_MEMORY)
    assert not held.admit
    assert held.reason == "1 group(s) are launching workers, worker_launch_concurrent_groups 1"
    assert held.warning == "rollout worker launches wait: " + held.reason
    assert rules.verdict("b", waited_s=1.0, readings=NO_MEMORY).warning is None  # the first wait is said once
    rules.ended("a")
    assert rules.verdict("b", waited_s=2.0, readings=NO_MEMORY).admit


def test_a_launch_waits_under_the_floor_counting_launches_in_flight_at_the_estimate():
    rules = LaunchRules(floor_bytes=2 * GB, method="exec")  # 310 MB a worker until one is measured
    assert rules.verdict("a", waited_s=0.0, readings=readings(available=int(2.5 * GB))).admit
    rules.admitted("a")
    v = rules.verdict("a", waited_s=0.0, readings=readings(available=int(2.2 * GB)))
    assert not v.admit
    assert v.reason == ("2.2 GB available (- 1 launch(es) in flight at ~310 MB each), under "
                        "worker_mem_available_floor_bytes 2.0 GB")


def test_a_floor_of_zero_keeps_the_reserve_and_the_reserve_is_five_percent_of_a_small_node():
    assert reserve_for(64 * GB) == GB
    assert reserve_for(8 * GB) == int(0.4 * GB)
    assert reserve_for(None) == GB
    rules = LaunchRules(reserve_bytes=GB)
    v = rules.verdict("a", waited_s=0.0, readings=readings(available=GB // 2))
    assert v.reason == "0.5 GB available, under the 1.0 GB kept free when worker_mem_available_floor_bytes is 0"


def test_the_soft_limit_counts_the_workers_resident_memory_and_the_launches_in_flight():
    rules = LaunchRules(rss_limit_bytes=GB, reserve_bytes=0)
    assert not rules.verdict("a", waited_s=0.0, readings=readings(alive=2, held=1200 * MB)).admit
    assert rules.verdict("a", waited_s=0.0, readings=readings(alive=1, held=600 * MB)).admit


def test_nothing_waits_for_memory_while_no_worker_of_the_run_is_alive_or_launching():
    rules = LaunchRules(floor_bytes=2 * GB)
    assert rules.verdict("a", waited_s=0.0, readings=readings(alive=0, available=GB)).admit


def test_unknown_memory_holds_no_launch():
    rules = LaunchRules(floor_bytes=2 * GB, rss_limit_bytes=0)
    assert rules.verdict("a", waited_s=0.0, readings=readings(available=None)).admit


def test_a_wait_is_bounded_by_the_start_up_budget_and_goes_ahead_with_a_warning():
    rules = LaunchRules(floor_bytes=2 * GB, wait_limit_s=30.0)
    low = readings(available=GB)
    assert not rules.verdict("a", waited_s=29.9, readings=low).admit
    v = rules.verdict("a", waited_s=30.0, readings=low)
    assert v.admit and v.warning.startswith("a rollout worker launch waited 30s, its limit "
                                            "(worker_startup_budget_seconds), and goes ahead: 1.0 GB available")


def test_the_estimate_is_the_mean_of_the_measured_workers_and_the_first_measure_rechecks_the_budget():
    rules = LaunchRules(method="forkserver", permits=100)
    assert rules.estimate() == 8 * MB
    rules.admitted("a"), rules.admitted("a")
    assert rules.ended("a", size_bytes=100 * MB) is True
    assert rules.ended("a", size_bytes=300 * MB) is False
    assert rules.estimate() == 200 * MB and rules.state() == {"groups": 0, "in_flight": 0}


def test_the_budget_warning_says_its_arithmetic_once():
    rules = LaunchRules(method="exec", permits=64)
    assert rules.budget_warning(available=100 * GB, held=0) is None
    warning = rules.budget_warning(available=10 * GB, held=2 * GB)
    assert warning.startswith("rollout workers (exec) at the run's permits do not fit this node: 64 permits x "
                              "310 MB per worker (estimated, none measured yet) = 19.4 GB, more than the 12.0 GB")
    assert rules.budget_warning(available=10 * GB, held=2 * GB) is None
