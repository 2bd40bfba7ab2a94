"""The simulator's launch gate (``rollout_isolation: process``): ``platoon.policy.launch_gate``'s group rule and wait
limit on simulated time, read off the trace's spans and the run's log."""

from __future__ import annotations

import json
from collections import defaultdict

from simkit import config, run

from platoon.policy.members import MemberState
from platoon.sim.records import Phase

GATED = {  # one group launching at a time; a start-up of 3 s each, long beside a rollout: launches queue; permits
    # come back a group at a time, so that a group's members begin together
    "train": {"max_training_steps": 4, "max_concurrent_rollouts": 12, "permit_release": "group", "max_staleness": 2,
              "workflow_config": {"rollout_isolation": "process", "worker_launch_concurrent_groups": 1}},
    "trace": {"group_every": 1},
    "sim": {"rollout": {"first_call_s": {"dist": "fixed", "value_s": 3.0}}},
}


def gated(**workflow):
    wf = {**GATED["train"]["workflow_config"], **workflow}
    return config(**{**GATED, "train": {**GATED["train"], "workflow_config": wf}})


def members(path):
    """Each traced member's spans by name, ``(start, end)`` in seconds, with its group: spans of a lane up to its
    ``rollout`` span are that member's (a lane is reused after)."""
    events = [e for e in json.loads((path / "trace.json").read_text() + "]") if e.get("ph") == "X"]
    open_spans, out = defaultdict(dict), []
    for e in events:
        span = (e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
        if e["name"] == "rollout":
            out.append((tuple(e["args"]["group"]), open_spans.pop(e["tid"], {})))
        else:
            open_spans[e["tid"]][e["name"]] = span
    return out


def launches(path):
    """Each group's launch interval: from its first member's start-up to its last one's first model call."""
    by_group = defaultdict(list)
    for group, spans in members(path):
        if "startup" in spans:
            by_group[group].append(spans["startup"])
    return {g: (min(s for s, _ in v), max(e for _, e in v), sorted({s for s, _ in v})) for g, v in by_group.items()}


def test_one_group_launches_at_a_time_its_members_together(tmp_path):
    r = run(gated(), tmp_path / "r")
    spans = launches(r.path)
    assert len(spans) >= 8
    ordered = sorted(spans.values())
    for (_, end, _), (start, _, _) in zip(ordered, ordered[1:], strict=False):
        assert start >= end - 1e-6, "two groups' start-ups overlap in simulated time"
    # every group's members that began together start up at one instant (a group launching admits its others)
    assert all(len(starts) == 1 for _, _, starts in spans.values())
    waits = [s["launch_wait"] for _, s in members(r.path) if "launch_wait" in s]
    assert waits, "no launch waited: the test exercises nothing"


def test_ungated_runs_overlap_start_ups(tmp_path):
    """The same run in process (no gate): groups' start-ups overlap, and no launch waits (what the gate changes)."""
    cfg = config(**{**GATED, "train": {**GATED["train"], "workflow_config": {}}})
    r = run(cfg, tmp_path / "r")
    ordered = sorted(launches(r.path).values())
    assert any(start < end for (_, end, _), (start, _, _) in zip(ordered, ordered[1:], strict=False))
    assert not any("launch_wait" in s for _, s in members(r.path))


def test_a_wait_limit_lets_a_held_launch_go_ahead_with_a_warning(tmp_path):
    logged = []
    r = run(gated(worker_startup_budget_seconds=1.0), tmp_path / "r", log=lambda level, m: logged.append((level, m)))
    waits = [s["launch_wait"] for _, s in members(r.path) if "launch_wait" in s]
    assert waits and max(e - s for s, e in waits) <= 1.0 + 1e-6
    assert any(abs(e - s - 1.0) < 1e-6 for s, e in waits)  # some went ahead at the limit ...
    ordered = sorted(launches(r.path).values())  # ... while another group launched
    assert any(start < end - 1e-6 for (_, end, _), (start, _, _) in zip(ordered, ordered[1:], strict=False))
    warnings = [m for level, m in logged if level == "warning"]
    assert sum(m.startswith("rollout worker launches wait: 1 group(s) are launching") for m in warnings) == 1
    assert any("waited 1s, its limit (worker_startup_budget_seconds), and goes ahead" in m for m in warnings)


def test_a_held_member_waits_for_its_launch_in_the_driver_and_its_group_state_is_kept(tmp_path):
    """Stopped mid-way: every member held at the gate is waiting_launch in the driver's lifecycle table (with a
    start limit its slot was reported), and the simulator's state holds the gate and its queue."""
    cfg = config(**{**GATED, "train": {**GATED["train"], "max_starting_rollouts": 12}})
    r = run(cfg, tmp_path / "r", until=5.0)  # the first step's groups: one starting up, one held
    work, watch = r.rt.work, r.rt.driver.members
    held = [(key, i) for key, g in work.groups.items() for i, m in enumerate(g.members) if m.phase is Phase.LAUNCH]
    assert held and [(s, q, i) for (s, q), i in held] == work.held
    assert all(watch.state(key, i) is MemberState.WAITING_LAUNCH for key, i in held)
    starting = [(key, i) for key, g in work.groups.items() for i, m in enumerate(g.members) if m.phase is Phase.STARTUP]
    assert starting and all(watch.state(key, i) is MemberState.STARTING for key, i in starting)
    state = r.rt.state_dict()
    assert state["format"] == 4 and state["gate"]["held"] == [list(k) for k in work.held]
    assert len(state["gate"]["groups"]) == 1 and state["gate"]["warned_wait"] is True
