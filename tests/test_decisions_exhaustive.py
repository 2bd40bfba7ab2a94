"""The closed sets of events and decisions (``platoon.policy.events``, ``platoon.policy.decisions``): every runtime
carries out every decision, and the driver routes every event.

Two kinds of proof:

- mypy, on the modules that handle them (the driver's ``handle``, each runtime's ``match`` on decisions, all ending in
  ``assert_never``), succeeds; with a decision planted in the union that no runtime handles, and an event planted
  that the driver does not route (``--shadow-file``: the modules on disk are untouched), it fails, naming the driver
  and both runtimes. Third-party packages are left out (``--no-site-packages``): the proof is about our unions alone,
  and it keeps the check at about a second.
- at run time, one instance of every member of each union goes through each runtime's handler (collaborators
  replaced by mocks) and through ``Driver.handle``: each reaches the part that carries it out, none falls through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections import deque
from pathlib import Path
from unittest import mock

import pytest

from platoon.live.runtime import LiveRuntime, RuntimeStalled
from platoon.policy import (
    CYCLE_DECISIONS,
    DECISIONS,
    EVENTS,
    Abort,
    Driver,
    SlotGranted,
    SlotRequested,
    StartGroup,
)
from platoon.sim.runtime import SimRuntime, SimulationStalled

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["platoon/policy/decisions.py", "platoon/policy/events.py", "platoon/policy/driver.py",
           "platoon/sim/runtime.py", "platoon/live/runtime.py"]
RUNTIMES = ["platoon/sim/runtime.py", "platoon/live/runtime.py"]


def mypy(cache: Path, *extra: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    return subprocess.run([sys.executable, "-m", "mypy", "--no-site-packages", "--follow-imports=silent",
                           "--ignore-missing-imports", "--no-error-summary", "--show-error-codes",
                           f"--cache-dir={cache}", *extra, *CHECKED],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def test_mypy_proves_every_decision_carried_out_and_every_event_routed(cache):
    done = mypy(cache)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_planted_decision_or_event_fails_the_proof(cache, tmp_path):
    decisions = (ROOT / "platoon/policy/decisions.py").read_text()
    union = "Decision: TypeAlias = RolloutDecision | CycleDecision"
    assert decisions.count(union) == 1
    planted = tmp_path / "decisions.py"
    planted.write_text(decisions.replace(union, '@dataclass(frozen=True)\nclass Planted:\n    """No runtime handles '
                                                'it."""\n\n\n' + union + " | Planted"))
    events = (ROOT / "platoon/policy/events.py").read_text()
    union = "Event: TypeAlias = ("
    assert events.count(union) == 1
    planted_events = tmp_path / "events.py"
    planted_events.write_text(events.replace(union, '@dataclass(frozen=True)\nclass Planted:\n    """The driver does '
                                                    'not route it."""\n\n\n' + union + "Planted | "))
    done = mypy(cache, "--shadow-file", "platoon/policy/decisions.py", str(planted),
                "--shadow-file", "platoon/policy/events.py", str(planted_events))
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if "assert_never" in line and '"Planted"' in line]
    assert sorted(line.split(":")[0] for line in errors) == sorted([*RUNTIMES, "platoon/policy/driver.py"]), \
        done.stdout


# --------------------------------------------------------------------------------------------------- run time
def one_of(cls: type) -> object:
    """An instance of a decision or event type, its fields filled with stand-ins (a slot's key unpacks as one)."""
    values = {f.name: mock.MagicMock(name=f.name) for f in dataclasses.fields(cls)}
    if "key" in values:
        values["key"] = (1, 2, 3) if cls is SlotGranted else (1, 2)
    if "index" in values:
        values["index"] = 0
    return cls(**values)


@pytest.mark.parametrize("cls", DECISIONS, ids=lambda c: c.__name__)
def test_the_simulator_carries_out_every_decision(cls):
    rt = object.__new__(SimRuntime)
    rt.work, rt.trainer, rt.session, rt.driver, rt._stop = (mock.MagicMock(name=n) for n in
                                                             ("work", "trainer", "session", "driver", "stop"))
    rt.clock = mock.MagicMock(now=1.0)
    rt.state_dict = mock.MagicMock(return_value={})
    rt.work.granted.return_value = ()
    rt.work.start_group.return_value = ()
    rt.driver.poll.return_value = []
    if cls is Abort:
        with pytest.raises(SimulationStalled):
            rt._carry([one_of(cls)])
        return
    rt._carry([one_of(cls)])
    assert rt.work.mock_calls or rt.trainer.mock_calls or rt.session.mock_calls


@pytest.mark.parametrize("cls", DECISIONS, ids=lambda c: c.__name__)
def test_the_live_runtime_carries_out_every_decision(cls):
    rt = object.__new__(LiveRuntime)
    rt.host, rt.session, rt.driver = (mock.MagicMock(name=n) for n in ("host", "session", "driver"))
    rt._start_group, rt._feed = mock.MagicMock(), mock.MagicMock()
    rt._train, rt._checkpoint, rt._publish = mock.AsyncMock(), mock.AsyncMock(), mock.AsyncMock()
    rt._cycle, rt._wake, rt.evaluate = deque(), None, None
    dec = one_of(cls)
    rt._carry([dec])
    if cls not in CYCLE_DECISIONS:
        assert not rt._cycle and (rt.host.mock_calls or rt._start_group.called)
        return
    assert list(rt._cycle) == [dec]  # the trainer task's, in order
    if cls is Abort:
        with pytest.raises(RuntimeStalled):
            asyncio.run(rt._carry_cycle(dec))
        return
    asyncio.run(rt._carry_cycle(dec))
    assert (rt._train.await_count + rt._checkpoint.await_count + rt._publish.await_count + rt._feed.call_count
            + len(rt.session.mock_calls)) == 1


HANDLERS = ("start", "on_deadline", "on_group_entered", "on_group_finished", "on_block_entered", "on_block_cancelled",
            "on_block_exited", "on_teardowns_done", "request_slot", "on_slot_cancelled", "release_slot",
            "on_launch_admitted", "on_member_started", "on_member_ended", "on_member_exited", "on_member_cancelled", "on_evaluated",
            "on_trained", "on_published")


@pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.__name__)
def test_the_driver_routes_every_event_to_one_handler(cls):
    driver = object.__new__(Driver)
    handlers = {name: mock.MagicMock(name=name, return_value=[]) for name in HANDLERS}
    for name, handler in handlers.items():
        setattr(driver, name, handler)
    handlers["request_slot"].return_value = True
    answer = driver.handle(one_of(cls), now=2.0)
    called = [name for name, handler in handlers.items() if handler.called]
    assert len(called) == 1 and handlers[called[0]].call_args.kwargs["now"] == 2.0
    assert answer == ((SlotGranted((1, 2, 0), 0.0),) if cls is SlotRequested else ())


def test_the_unions_are_closed_and_distinct():
    """Each union lists each type once, every one a frozen dataclass (decisions imperative, events past tense by the
    house style: not checkable here)."""
    for union in (DECISIONS, EVENTS):
        assert len(set(union)) == len(union)
        assert all(dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen for c in union)
    assert StartGroup in DECISIONS and not set(DECISIONS) & set(EVENTS)
