"""The live runtime's ``trace.json`` (docs/run-directory.md, "trace.json"): the trainer's, the model service's and
the traced rollouts' spans on the run's clock, sampled by draw position, cut back with the logs on a resume.

The scripted runs play on a virtual clock, so their spans' times are exact; the small real runs use the tiny model
behind the batching service."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from live_harness import (
    AsyncTrainer,
    FakeTrainer,
    Outcome,
    ScriptedWorkflow,
    SleepyService,
    die_after_row,
    dispatch_harness,
    live_runtime,
    run_virtual,
)
from test_resume import SMALL, fake_service

from platoon.live.launch import command
from platoon.live.training.checkpoint import LiveRunDir
from platoon.policy.assemble import begin_clock
from platoon.policy.driver import Schedule
from platoon.runs import read_checkpoint_rows, read_jsonl
from platoon.runs.trace import TraceWriter, track_names

ROLLOUT_ARGS = {"task_id", "group", "member", "version", "turns", "reward", "passed", "status"}


def load(path: Path) -> list[dict]:
    """The trace as a JSON document: what Perfetto reads (the writer never writes the closing bracket)."""
    return json.loads(path.read_text() + "]")


def spans(events: list[dict], name: str | None = None) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and (name is None or e["name"] == name)]


def tracks(events: list[dict]) -> set[str]:
    """The kinds of track the spans are on: trainer, model service, rollout lane."""
    names = track_names(events)
    return {names[e["tid"]].rsplit(" ", 1)[0] if names[e["tid"]].startswith("rollout lane") else names[e["tid"]]
            for e in spans(events)}


def by_lane(events: list[dict]) -> dict[int, list[dict]]:
    lanes: dict[int, list[dict]] = defaultdict(list)
    for e in spans(events):
        if e["tid"] >= 100:
            lanes[e["tid"]].append(e)
    return lanes


def inside(e: dict, outer: dict) -> bool:
    return outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"]


def draw_positions(events: list[dict]) -> dict[tuple[int, int], int]:
    return {(e["start"], e["seq"]): e["position"] for e in events if e["event"] == "draw"}


# -- scripted runs on a virtual clock ---------------------------------------------------------------------------------
def test_rollout_lanes_show_permit_waits_startup_teardowns_and_outcomes(tmp_path):
    # two permits, groups of two: group (1,0)'s member 0 makes its first model call 0.25 s in, ends at 1 s and leaves a
    # 3 s teardown that holds its permit; member 1 ends at 2 s. Group (1,1)'s members wait for those permits.
    script = {0: Outcome(1.0, reward=1.0, first_call_s=0.25, teardown_s=3.0), 1: Outcome(2.0, reward=0.0)}
    d = dispatch_harness.build(tasks=4, group_size=2, batch_size=2, steps=1, permits=2)
    wf = ScriptedWorkflow(lambda row: script[row.member] if row.key == (1, 0) else Outcome(1.0, float(row.member)))
    trace = TraceWriter(tmp_path / "trace.json")
    run_virtual(live_runtime(d, wf, FakeTrainer(), SleepyService(), trace=trace).run())
    events = load(tmp_path / "trace.json")
    rollouts = {(tuple(e["args"]["group"]), e["args"]["member"]): e for e in spans(events, "rollout")}
    assert {(1, 0), (1, 1)} <= {g for g, _ in rollouts}
    for e in rollouts.values():
        assert set(e["args"]) == ROLLOUT_ARGS and e["args"]["task_id"].startswith("t")
    first = rollouts[((1, 0), 0)]
    assert first["args"] | {"task_id": None} == {"task_id": None, "group": [1, 0], "member": 0, "version": 0,
                                                  "turns": 1, "reward": 1.0, "passed": True, "status": "ok"}
    assert first["ts"] == 0 and first["dur"] == 4_000_000  # its block waits for its teardown: 1 s + 3 s
    lane = by_lane(events)[first["tid"]]
    (startup,) = [e for e in lane if e["name"] == "startup" and inside(e, first)]
    (teardown,) = [e for e in lane if e["name"] == "teardown" and inside(e, first)]
    assert (startup["ts"], startup["dur"]) == (0, 250_000)
    assert (teardown["ts"], teardown["dur"]) == (1_000_000, 3_000_000)
    assert rollouts[((1, 0), 1)]["args"]["passed"] is False
    # group (1,1) starts when a permit is free, at 2 s: its member 0 takes it at once, on the lane (1,0)'s member 1
    # gave back; its member 1 waits for member 0's permit (3 s), which comes before the teardown's (4 s)
    second = [rollouts[((1, 1), m)] for m in (0, 1)]
    assert [e["ts"] for e in second] == [2_000_000, 2_000_000]
    assert second[0]["tid"] == rollouts[((1, 0), 1)]["tid"]
    waits = [[w["dur"] for w in spans(events, "permit_wait") if w["tid"] == e["tid"] and inside(w, e)] for e in second]
    assert waits == [[0], [1_000_000]]
    # a lane holds one rollout at a time, and each span lies inside its rollout's
    for lane_spans in by_lane(events).values():
        whole = sorted((e for e in lane_spans if e["name"] == "rollout"), key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(whole, whole[1:], strict=False))
        assert all(any(inside(e, r) for r in whole) for e in lane_spans)


def test_a_failed_member_and_the_members_it_cancels_say_so(tmp_path):
    def script(row):
        if row.key == (1, 0):
            return Outcome(0.5, error=RuntimeError("sandbox died")) if row.member == 1 else Outcome(5.0, 1.0)
        return Outcome(1.0, float(row.member))

    d = dispatch_harness.build(tasks=4, group_size=3, batch_size=2, steps=1)
    trace = TraceWriter(tmp_path / "trace.json")
    run_virtual(live_runtime(d, ScriptedWorkflow(script), FakeTrainer(), SleepyService(), trace=trace,
                             log=lambda lv, m: None).run())
    events = load(tmp_path / "trace.json")
    statuses = {e["args"]["member"]: e["args"] for e in spans(events, "rollout") if e["args"]["group"] == [1, 0]}
    assert statuses[1]["status"] == "failed" and statuses[1]["reward"] is None and statuses[1]["passed"] is False
    assert {statuses[0]["status"], statuses[2]["status"]} == {"cancelled"}  # the failing group's others are cut


def test_trainer_spans_are_on_the_runs_clock(tmp_path):
    # a start begun at 500 s on the run's clock: rollouts 1 s, each step trains 2 s plus 0.5 s a datum, publish 1 s;
    # no staleness, so step 1's rollouts start once version 1 is published (506 s) and its training at 507 s
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=2, max_staleness=0)
    begin_clock(d, now=500.0)
    trace = TraceWriter(tmp_path / "trace.json", group_every=1)
    runtime = live_runtime(d, ScriptedWorkflow(lambda row: Outcome(1.0, reward=float(row.member))),
                           AsyncTrainer(duration=lambda n: 2.0 + 0.5 * n), SleepyService(publish_s=1.0),
                           evaluate=lambda: {"eval/pass@1": 0.5}, schedule=Schedule(eval_every=2),
                           clock_start_s=500.0, trace=trace)
    run_virtual(runtime.run())
    events = load(tmp_path / "trace.json")
    train = spans(events, "train")
    assert [e["args"]["step"] for e in train] == [0, 1]
    assert [e["args"]["datums"] for e in train] == [len(s.datums) for s in runtime.trained] == [4, 4]
    assert all(e["args"]["tokens"] == 4 * 3 for e in train)  # each scripted rollout is one datum of 3 tokens
    assert [(e["ts"], e["dur"]) for e in train] == [(501_000_000, 4_000_000), (507_000_000, 4_000_000)]
    assert [(e["args"]["version"], e["ts"], e["dur"]) for e in spans(events, "publish")] == \
        [(1, 505_000_000, 1_000_000), (2, 511_000_000, 1_000_000)]
    assert [e["args"]["step"] for e in spans(events, "eval")] == [2]  # the final policy's
    assert min(e["ts"] for e in spans(events)) >= 500_000_000
    assert tracks(events) == {"trainer", "rollout lane"}  # a service that cannot be observed has no track


@pytest.mark.parametrize("every", [1, 3])
def test_only_the_groups_of_every_nth_draw_position_are_traced(tmp_path, every):
    d = dispatch_harness.build(tasks=12, group_size=2, batch_size=2, steps=4)
    trace = TraceWriter(tmp_path / "trace.json", group_every=every)
    runtime = live_runtime(d, ScriptedWorkflow(lambda row: Outcome(1.0 + row.member, float(row.member))),
                           FakeTrainer(), SleepyService(), trace=trace)
    run_virtual(runtime.run())
    positions = draw_positions(runtime.events)
    settled = {(e["start"], e["seq"]) for e in runtime.events if e["event"] == "settle"}
    traced = Counter(tuple(e["args"]["group"]) for e in spans(load(tmp_path / "trace.json"), "rollout"))
    assert set(traced) == {k for k in settled if positions[k] % every == 0} | (set(traced) - settled)
    assert all(positions[k] % every == 0 for k in traced)
    assert all(traced[k] == 2 for k in settled if k in traced)  # every member of a traced group
    assert len(traced) >= 2


def test_each_checkpoint_records_a_trace_that_ends_on_a_whole_line(tmp_path):
    d = dispatch_harness.build(tasks=8, group_size=2, batch_size=2, steps=4)
    run_dir = LiveRunDir.create(tmp_path / "run", config={}, components=[], pool=[])
    runtime = live_runtime(d, ScriptedWorkflow(lambda row: Outcome(1.0, float(row.member))), FakeTrainer(),
                           SleepyService(), run_dir=run_dir, schedule=Schedule(checkpoint_every=1),
                           trace=run_dir.rd.trace_writer(group_every=1))
    run_virtual(runtime.run())
    text = (tmp_path / "run" / "trace.json").read_bytes()
    rows = read_checkpoint_rows(tmp_path / "run")
    for row in rows[1:]:
        length = row["logs"]["trace.json"]
        head = json.loads(text[:length].decode() + "]")
        # at step n's checkpoint the trace holds steps 0..n-1's train spans: written before it was taken
        assert [e["args"]["step"] for e in spans(head, "train")] == list(range(row["step"]))
    assert len(spans(json.loads(text.decode() + "]"), "train")) == 4


# -- small real runs ----------------------------------------------------------------------------------------------------
TRACED = [*SMALL, "trace.group_every=1"]


def test_a_small_live_run_traces_the_trainer_the_model_service_and_every_rollout(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*TRACED, "train.max_training_steps=4"], out=run, progress=False, eval_episodes=32)
    events = load(run / "trace.json")
    assert tracks(events) == {"trainer", "model service", "rollout lane"}
    train = spans(events, "train")
    assert sorted(e["args"]["step"] for e in train) == [0, 1, 2, 3]
    assert all(e["args"]["datums"] >= 0 and e["args"]["tokens"] >= e["args"]["datums"] for e in train)
    assert sum(e["args"]["tokens"] for e in train) > 0
    assert sorted(e["args"]["version"] for e in spans(events, "publish")) == [1, 2, 3, 4]
    assert sorted(e["args"]["step"] for e in spans(events, "eval")) == [0, 3, 4]  # eval.every=3 and the end
    batches = spans(events, "batch")
    assert batches and all(e["args"]["size"] >= 1 and e["args"]["prompt_tokens"] >= e["args"]["size"]
                           and e["args"]["new_tokens"] >= e["args"]["size"] for e in batches)
    # every member of every group that settled has one finished rollout span, its model calls and env steps inside
    draws = draw_positions(read_jsonl(run / "tasks" / "events.jsonl"))
    settled = {(e["start"], e["seq"]) for e in read_jsonl(run / "tasks" / "events.jsonl") if e["event"] == "settle"}
    lanes = by_lane(events)
    done = [e for e in spans(events, "rollout") if e["args"]["status"] == "ok"]
    assert Counter((tuple(e["args"]["group"]), e["args"]["member"]) for e in done) == \
        Counter((k, m) for k in settled for m in range(4))
    sizes = {e["args"]["size"] for e in batches}
    for e in done:
        args = e["args"]
        assert set(args) == ROLLOUT_ARGS and tuple(args["group"]) in draws
        assert isinstance(args["reward"], float) and isinstance(args["passed"], bool) and args["turns"] >= 1
        lane = [s for s in lanes[e["tid"]] if inside(s, e)]
        calls = [s for s in lane if s["name"] == "model_call"]
        assert len(calls) == args["turns"] and all(s["args"]["batch"] in sizes for s in calls)
        # a tool call is an env_step span; a turn without a call makes none
        assert len([s for s in lane if s["name"] == "env_step"]) <= args["turns"]
        assert [s["name"] for s in lane if s["name"] in ("permit_wait", "startup")] == ["permit_wait", "startup"]
    # the run's clock: a step's train span ends before its metrics row is written
    times = {r["step"]: r["time"] for r in read_jsonl(run / "metrics.jsonl")}
    assert all(e["ts"] + e["dur"] <= times[e["args"]["step"]] * 1e6 + 1 for e in train)


def test_a_run_with_the_trace_off_writes_none(tmp_path):
    run = tmp_path / "run"
    command.train(None, [*SMALL, "train.max_training_steps=2", "trace.enabled=false"], out=run, progress=False,
                  service_factory=fake_service, eval_episodes=32)
    assert not (run / "trace.json").exists()
    assert all(r["logs"]["trace.json"] == 0 for r in read_checkpoint_rows(run))


def test_a_resumed_run_cuts_its_trace_back_to_the_checkpoint_and_trains_each_step_once(tmp_path, monkeypatch):
    run = tmp_path / "run"
    die_after_row(monkeypatch, 4)  # right after step 4's metrics (its checkpoint: 000004)
    with pytest.raises(KeyboardInterrupt):
        command.train(None, [*TRACED, "train.max_training_steps=7"], out=run, progress=False, eval_episodes=32)
    assert sorted(e["args"]["step"] for e in spans(load(run / "trace.json"), "train")) == [0, 1, 2, 3, 4]
    command.train(resume=run, progress=False, eval_episodes=32)
    events = load(run / "trace.json")
    train = sorted(spans(events, "train"), key=lambda e: e["args"]["step"])
    assert [e["args"]["step"] for e in train] == list(range(7))  # step 4's span, written after 000004, was cut
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(train, train[1:], strict=False))  # one clock across the starts
    assert tracks(events) == {"trainer", "model service", "rollout lane"}
