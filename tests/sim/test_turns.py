"""Turns mode (``sim.rollout.turns``): rollouts made of model calls at a batching service and environment steps, the
trainer's evaluation time, and the simulator's trace.json."""

from __future__ import annotations

import json
import statistics

import pytest
from simkit import config, run

from platoon.runs import read_jsonl
from platoon.runs.trace import track_names
from platoon.sim.records import Phase

FLAT = {"learning": {"enabled": False}}


def trace(path) -> list[dict]:
    """trace.json as its readers take it: the JSON array once a ``]`` is appended."""
    return json.loads((path / "trace.json").read_text() + "]")


def spans(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e["name"] == name]


def run_seconds(events: list[dict]) -> list[float]:
    """Each completed rollout's seconds from its permit to its end (its ``rollout`` span less its ``permit_wait``,
    absent for a wait of no time: the configs here have no start-up or teardown)."""
    waits = {(e["tid"], e["ts"]): e["dur"] for e in spans(events, "permit_wait")}
    return [(e["dur"] - waits.get((e["tid"], e["ts"]), 0)) / 1e6 for e in spans(events, "rollout")
            if e["args"]["status"] == "ok"]


def test_a_batch_takes_base_plus_per_sequence_and_answers_oldest_first(tmp_path):
    """One group of 8, 2 turns each, no environment step, batches of at most 4 taking 1 + 0.5 n seconds. The members
    get their permits one by one at 0: the idle service starts at once with member 0 alone (ends 1.5); then 1-4
    (the oldest queued; ends 4.5), then 5, 6, 7 and 0 (back since 1.5; ends 7.5: 0 is done), 1-4 again (ends 10.5)
    and 5-7 (ends 13)."""
    cfg = config(train={"max_training_steps": 1, "batch_size": 1, "max_concurrent_rollouts": 8},
                 environments=[{"name": "env", "workflow_config": {"group_size": 8}}],
                 trace={"group_every": 1},
                 sim={"rollout": {"turns": {"passing": 2, "failing": 2}},
                      "service": {"base_s": 1.0, "per_sequence_s": 0.5, "max_batch": 4}, **FLAT})
    r = run(cfg, tmp_path / "r")
    [row] = [x for x in read_jsonl(r.path / "metrics.jsonl") if "train/rollouts" in x]
    assert row["time"] == pytest.approx(13.0 + 5.0 + 0.1 * 8)  # the step trains 5 s + 0.1 s a datum
    events = trace(r.path)
    batches = [(b["ts"] / 1e6, b["dur"] / 1e6, b["args"]["size"]) for b in spans(events, "batch")]
    assert batches == [(0.0, 1.5, 1), (1.5, 3.0, 4), (4.5, 3.0, 4), (7.5, 3.0, 4), (10.5, 2.5, 3)]
    ends = sorted((e["args"]["member"], (e["ts"] + e["dur"]) / 1e6) for e in spans(events, "rollout"))
    assert ends == [(0, 7.5), *((i, 10.5) for i in range(1, 5)), *((i, 13.0) for i in range(5, 8))]
    assert {e["args"]["turns"] for e in spans(events, "rollout")} == {2}


@pytest.mark.parametrize("turns", [False, True])
def test_more_rollouts_at_once_make_longer_rollouts_only_with_turns(tmp_path, turns):
    """Raising max_concurrent_rollouts fills bigger batches: in turns mode each model call waits longer; a drawn
    duration does not care how many run."""
    rollout = ({"turns": {"passing": 3, "failing": 3}, "env_step_s": {"dist": "exponential", "mean_s": 4.0}}
               if turns else {"duration": {"dist": "exponential", "mean_s": 10.0}})
    means = []
    for permits in (4, 32):
        cfg = config(train={"max_training_steps": 12, "batch_size": 4, "max_concurrent_rollouts": permits,
                            "max_staleness": 8},
                     trace={"group_every": 1},
                     sim={"rollout": rollout, "service": {"base_s": 0.5, "per_sequence_s": 0.25, "max_batch": 64},
                          **FLAT})
        r = run(cfg, tmp_path / f"p{permits}")
        seconds = run_seconds(trace(r.path))
        assert len(seconds) >= 150
        means.append(statistics.fmean(seconds))
    print(f"turns={turns}: mean run seconds at 4 and 32 permits {means[0]:.2f}, {means[1]:.2f}")
    if turns:  # 12 s of environment steps; a call alone takes 0.75 s, among 32 at once up to 8.5 s
        assert means[1] > 1.5 * means[0]
    else:
        assert means[1] == pytest.approx(means[0], rel=0.2)


def test_mean_turns_move_as_the_policy_learns(tmp_path):
    """Failing rollouts take 10 turns, passing ones 2: as pass rates rise the rollouts get shorter."""
    cfg = config(train={"max_training_steps": 30, "batch_size": 8, "max_concurrent_rollouts": 64},
                 trace={"group_every": 1},
                 sim={"rollout": {"turns": {"passing": 2, "failing": 10}},
                      "population": {"difficulty_mean": 2.0, "difficulty_sd": 0.5},
                      "learning": {"gain": 0.5, "transfer": 0.5}})
    r = run(cfg, tmp_path / "r")
    done = [e["args"] for e in spans(trace(r.path), "rollout") if e["args"]["status"] == "ok"]
    for a in done:
        assert a["turns"] == (2 if a["passed"] else 10) or a["reward"] is None
    third = len(done) // 3  # in the order they ended
    first, last = (statistics.fmean(a["turns"] for a in part) for part in (done[:third], done[-third:]))
    print(f"mean turns, first third {first:.2f}, last third {last:.2f}")
    assert last < first - 2.0


def test_time_limits_errors_and_cancellations_leave_the_service_clean(tmp_path):
    """A rollout past timeout_s ends failing with fewer turns; one that raises does so at the end of a turn; every
    call still at the service belongs to a member that runs (cancelled ones left the queue)."""
    cfg = config(train={"max_training_steps": 6, "max_concurrent_rollouts": 24,
                        "workflow_config": {"straggler_timeout_seconds": 4.0, "straggler_quorum": 2}},
                 trace={"group_every": 1},
                 sim={"rollout": {"turns": {"passing": [1, 2, 3], "failing": 40}, "timeout_s": 20.0,
                                  "env_step_s": {"dist": "lognormal", "median_s": 1.0, "sigma": 1.0},
                                  "error_rate": 0.1},
                      "service": {"base_s": 0.5, "per_sequence_s": 0.05, "max_batch": 8}})
    r = run(cfg, tmp_path / "r")
    rows = [x for x in read_jsonl(r.path / "metrics.jsonl") if "train/rollouts" in x]
    assert sum(x["train/wasted_rollouts/cancelled"] for x in rows) > 0
    assert sum(x["train/wasted_rollouts/failed"] for x in rows) > 0
    events = trace(r.path)
    ended = [e for e in spans(events, "rollout") if e["args"]["status"] == "ok"]
    cut = [e for e in ended if not e["args"]["passed"]]
    assert cut and all(e["args"]["turns"] < 40 for e in cut)  # every failing one ran out of time
    raised = [e["args"] for e in spans(events, "rollout") if e["args"]["status"] == "failed"]
    assert raised and all(1 <= a["turns"] <= 40 for a in raised)
    svc = r.rt.service
    for s, q, i in [*svc.queue, *svc.batch]:
        assert r.rt.groups[(s, q)].members[i].phase is Phase.RUN


def test_evaluations_block_the_trainer_for_eval_s(tmp_path):
    base = {"train": {"max_training_steps": 4}, "eval": {"every": 2, "at_start": True}, "trace": {"group_every": 1}}
    free = run(config(**base), tmp_path / "free")
    timed = run(config(**base, sim={"trainer": {"eval_s": 100.0}}), tmp_path / "timed")
    # evaluations before steps 0 and 2 and after the last (4); rollouts go on meanwhile, so the next batches wait
    # less: the run is longer by 200 s to 300 s
    assert free.rt.now + 200.0 < timed.rt.now <= free.rt.now + 300.0
    events = trace(timed.path)
    evals = spans(events, "eval")
    assert [(e["args"]["step"], e["dur"]) for e in evals] == [(0, 100_000_000), (2, 100_000_000), (4, 100_000_000)]
    trains = {e["args"]["step"]: e["ts"] for e in spans(events, "train")}
    assert [trains[e["args"]["step"]] for e in evals[:2]] == [e["ts"] + e["dur"] for e in evals[:2]]  # it blocks
    last = read_jsonl(timed.path / "metrics.jsonl")[-1]
    assert last["step"] == 4 and last["time"] == pytest.approx(timed.rt.now)
    assert (evals[-1]["ts"] + evals[-1]["dur"]) / 1e6 == pytest.approx(timed.rt.now)


def overlap_s(span: dict, batches: list[dict]) -> float:
    """Seconds of ``span`` that the ``batches`` (one at a time, never overlapping) cover."""
    lo, hi = span["ts"], span["ts"] + span["dur"]
    return sum(max(0, min(hi, b["ts"] + b["dur"]) - max(lo, b["ts"])) for b in batches) / 1e6


@pytest.mark.parametrize("slowdown", [0.0, 1.5])
def test_the_service_slows_training_while_it_runs_a_batch(tmp_path, slowdown):
    """Processor sharing: a step of work W that overlaps the service's batches for o seconds does o / (1 + k) of its
    work in them and the rest at full speed, so it lasts W + o k / (1 + k). The hand-off between batches (0.4 s) does
    not slow it, so a step's speed changes many times; k = 0 is the old fixed time."""
    cfg = config(train={"max_training_steps": 6, "max_concurrent_rollouts": 12},
                 sim={"rollout": {"turns": {"passing": [2, 5], "failing": 7},
                                  "env_step_s": {"dist": "exponential", "mean_s": 1.0}},
                      "service": {"base_s": 0.5, "per_sequence_s": 0.05, "max_batch": 8, "handoff_s": 0.4},
                      "trainer": {"service_slowdown": slowdown}, **FLAT})
    events = trace(run(cfg, tmp_path / "r").path)
    batches = spans(events, "batch")
    share = slowdown / (1 + slowdown)
    overlaps = []
    for e in spans(events, "train"):
        work = 5.0 + 0.1 * e["args"]["datums"]
        o = overlap_s(e, batches)
        overlaps.append(o / (e["dur"] / 1e6))
        assert e["dur"] / 1e6 == pytest.approx(work + share * o, abs=1e-5)  # the trace's microseconds
    # every step but the last (nothing is drawn past the plan) overlaps batches in part: its speed changed on the way
    assert all(0 < s < 1 for s in overlaps[:-1]) and overlaps[-1] == 0


def test_the_trace_has_the_live_runs_spans(tmp_path):
    cfg = config(train={"max_training_steps": 4, "max_starting_rollouts": 4}, trace={"group_every": 3},
                 sim={"rollout": {"turns": {"passing": [2, 4], "failing": 6},
                                  "env_step_s": {"dist": "exponential", "mean_s": 1.0},
                                  "first_call_s": {"dist": "exponential", "mean_s": 2.0},
                                  "teardown_s": {"dist": "fixed", "value_s": 3.0}},
                      "trainer": {"eval_s": 5.0}})
    r = run(cfg, tmp_path / "r")
    events = trace(r.path)
    tracks = track_names(events)
    by_track: dict[str, set[str]] = {}
    for e in events:
        if e.get("ph") == "X":
            name = tracks[e["tid"]]
            by_track.setdefault("rollout lane" if name.startswith("rollout lane") else name, set()).add(e["name"])
    assert by_track == {"trainer": {"train", "publish", "eval"}, "model service": {"batch"},
                        "rollout lane": {"permit_wait", "startup", "model_call", "env_step", "teardown", "rollout"}}
    train = spans(events, "train")
    assert [e["args"]["step"] for e in train] == [0, 1, 2, 3] and all(e["args"]["datums"] > 0 for e in train)
    versions = [e["args"]["version"] for e in spans(events, "publish")]  # a step without an update keeps it
    assert len(versions) == 4 and versions == sorted(versions) and versions[-1] == r.rt.version >= 1
    assert all(set(b["args"]) == {"size", "prompt_tokens", "new_tokens"} for b in spans(events, "batch"))
    rollouts = spans(events, "rollout")
    assert {tuple(sorted(e["args"])) for e in rollouts} == {
        ("group", "member", "passed", "reward", "status", "task_id", "turns", "version")}
    assert {e["args"]["group"][1] % 3 for e in rollouts} == {0}  # every third group drawn (by position)
    for e in rollouts:  # a completed rollout's model calls on its lane, inside its span, one a turn
        if e["args"]["status"] == "ok":
            calls = [c for c in spans(events, "model_call") if c["tid"] == e["tid"]
                     and e["ts"] <= c["ts"] and c["ts"] + c["dur"] <= e["ts"] + e["dur"]]
            assert len(calls) == e["args"]["turns"]
    assert max(e["tid"] for e in rollouts) - 100 < 3 * 8  # lanes are reused: at most the traced rollouts at once


def test_no_trace_when_disabled_and_duration_mode_traces_no_turns(tmp_path):
    off = run(config(train={"max_training_steps": 2}, trace={"enabled": False}), tmp_path / "off")
    assert not (off.path / "trace.json").exists()
    plain = run(config(train={"max_training_steps": 2}, trace={"group_every": 1}), tmp_path / "plain")
    names = {e["name"] for e in trace(plain.path)}
    assert {"rollout", "permit_wait", "train", "publish"} <= names
    assert not names & {"model_call", "env_step", "batch", "startup"}  # no start-up here: no span of no time
