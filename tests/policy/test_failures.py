"""Groups that fail in a row stop the run (platoon/policy/failures.py): the driver's Abort after its limit, the words
of the last failure in its reason, a success that ends the streak, and the streak's place in the driver's state."""

from __future__ import annotations

import dispatch_harness

from platoon.policy import Abort, Driver, Publish, Schedule, StartGroup, Train
from platoon.policy.failures import FAILED_GROUPS_LIMIT, FailureStreak, failure_words


class Down(RuntimeError):
    pass


def driver(steps: int = 40) -> Driver:
    return Driver(dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=steps, max_staleness=0),
                  schedule=Schedule())


def run(d: Driver, fails, *, limit: int = 400, pause: bool = False) -> tuple[Abort | None, int]:
    """Carry out ``d``'s decisions; group n (in start order) fails when ``fails(n)``, else returns two mixed
    members. The Abort that stopped it (None: the plan finished, or ``pause`` at ``limit`` groups) and the groups
    started."""
    now, started = 0.0, 0
    pending = d.start(now=now)
    while started < limit:
        pending = pending or d.poll(now=now)
        if not pending:
            return None, started
        decision = pending.pop(0)
        now += 0.1
        if isinstance(decision, Abort):
            return decision, started
        if isinstance(decision, StartGroup):
            if fails(started):
                pending += d.on_group_finished(decision.key, None, error=Down(f"server down ({started})"), now=now)
            else:
                pending += d.on_group_finished(
                    decision.key, dispatch_harness.output_of(decision.task_id, [True, False], decision.version),
                    now=now)
            started += 1
        elif isinstance(decision, Train):
            pending += d.on_trained(now=now)
        elif isinstance(decision, Publish):
            pending += d.on_published(now=now)
    assert pause, f"no end after {limit} groups"
    return None, started


def test_groups_that_all_fail_stop_the_run_with_the_last_failure_in_words():
    abort, started = run(driver(), lambda n: True)
    assert abort is not None and started >= FAILED_GROUPS_LIMIT
    assert "groups all failed" in abort.reason and "--resume" in abort.reason
    assert "of entry 'env'" in abort.reason and "Down: server down" in abort.reason


def test_a_group_that_succeeds_ends_the_streak_so_failures_between_successes_never_stop_the_run():
    abort, _ = run(driver(steps=20), lambda n: n % FAILED_GROUPS_LIMIT != 0)  # 7 of every 8 fail
    assert abort is None


def test_the_streak_breaks_at_its_limit_and_a_success_mends_it():
    streak = FailureStreak(limit=3)
    streak.failed("a")
    streak.failed("b")
    assert not streak.broken()
    streak.failed("c")
    assert streak.broken() and "the last: c" in streak.reason(4)
    streak.succeeded()
    assert not streak.broken()


def test_the_streak_is_in_the_driver_state_and_an_older_state_without_it_reads_as_none():
    d = driver()
    run(d, lambda n: n >= 2, limit=5, pause=True)  # mid-streak
    state = d.state_dict()
    assert state["failures"]["count"] >= 2
    again = driver()
    again.load_state_dict(state)
    assert again.state_dict()["failures"] == state["failures"]
    older = {k: v for k, v in state.items() if k != "failures"}
    again.load_state_dict(older)
    assert again.state_dict()["failures"] == {"count": 0, "last": ""}


def test_the_words_of_a_failure_carry_the_notes_of_where_it_was_raised():
    error = ValueError("no game")
    error.add_note("raised by tool 'say' of games:Game")
    words = failure_words((1, 3), "t2", "games", error)
    assert words == ("group (1, 3) of entry 'games' (task t2) failed: ValueError: no game "
                     "(raised by tool 'say' of games:Game)")
