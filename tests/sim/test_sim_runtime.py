"""The SimPy runtime end to end: determinism, exact resume from a kill anywhere, accounting, failures, stragglers."""

from __future__ import annotations

import json

import pytest
from simkit import checkpoint_files, config, differing, resume, run, timed_out

from platoon.runs import read_jsonl
from platoon.sim.runtime import SimulationStalled

EVERYTHING = {
    "train": {"max_training_steps": 8, "max_concurrent_rollouts": 12, "max_starting_rollouts": 3,
              "workflow_config": {"straggler_timeout_seconds": 15.0}, "group_admission": "informative",
              "task_sampler": "pass_rate"},
    "checkpoint": {"recovery_every": 3},
    "sim": {"rollout": {"duration": {"dist": "lognormal", "median_s": 8.0, "sigma": 1.0},
                        "fail_duration": {"dist": "exponential", "mean_s": 12.0}, "error_rate": 0.05,
                        "invalid_rate": 0.1, "first_call_s": {"dist": "exponential", "mean_s": 2.0},
                        "startup_capacity": 2, "teardown_s": {"dist": "lognormal", "median_s": 20.0, "sigma": 1.5},
                        "length_sigma": 0.4}},
}
TIES = {  # every duration fixed: many events at the same instant
    "train": {"max_training_steps": 7},
    "checkpoint": {"recovery_every": 2},
    "sim": {"rollout": {"duration": {"dist": "fixed", "value_s": 10.0}, "first_call_s": {"dist": "fixed", "value_s": 1.0}},
            "trainer": {"step_s": 10.0, "per_datum_s": 0.0, "publish_s": 0.0}},
}
GROUP = {"train": {"permit_release": "group", "max_staleness": 2},
         "sim": {"rollout": {"teardown_s": {"dist": "exponential", "mean_s": 3.0}}}}
TURNS = {  # turns mode, everything on: the service's queue and batch, env steps, time limits, evaluations
    "train": {"max_training_steps": 8, "max_concurrent_rollouts": 12, "max_starting_rollouts": 3,
              "workflow_config": {"straggler_timeout_seconds": 15.0}},
    "checkpoint": {"recovery_every": 3},
    "trace": {"group_every": 1},
    "sim": {"rollout": {"turns": {"passing": [2, 3, 5], "failing": [4, 9]},
                        "env_step_s": {"dist": "exponential", "mean_s": 1.5}, "error_rate": 0.05,
                        "invalid_rate": 0.1, "timeout_s": 25.0, "first_call_s": {"dist": "exponential", "mean_s": 2.0},
                        "startup_capacity": 2, "teardown_s": {"dist": "lognormal", "median_s": 20.0, "sigma": 1.5},
                        "length_sigma": 0.4},
            "service": {"base_s": 0.4, "per_sequence_s": 0.1, "max_batch": 4},
            "trainer": {"eval_s": 2.0}},
}
TURN_TIES = {  # turns mode with every time a whole second: calls made at the instant a batch ends join the next
    "train": {"max_training_steps": 7, "permit_release": "group", "max_staleness": 2},
    "checkpoint": {"recovery_every": 2},
    "trace": {"group_every": 2},
    "sim": {"rollout": {"turns": {"passing": 2, "failing": 3}, "first_call_s": {"dist": "fixed", "value_s": 1.0}},
            "service": {"base_s": 1.0, "per_sequence_s": 0.0, "max_batch": 6},
            "trainer": {"step_s": 10.0, "per_datum_s": 0.0, "publish_s": 0.0, "eval_s": 1.0}},
}
CONTENDED = {  # turns mode with the trainer slowed while the service runs a batch: its step re-armed at each change
    **TURNS,
    "sim": {**TURNS["sim"], "service": {"base_s": 0.4, "per_sequence_s": 0.1, "max_batch": 4, "handoff_s": 0.3},
            "trainer": {"eval_s": 2.0, "service_slowdown": 1.7}},
}
VLLM = {"model_name": "org/model", "inference": {"engine": "vllm", "servers": ["http://a:8100", "http://b:8100",
                                                                             "http://c:8100"]}}
SERVERS = {  # turns mode on three vLLM servers: routing, continuous batching, pauses that abort requests in flight
    **TURNS,
    "train": {**TURNS["train"], **VLLM, "max_staleness": 3},
    "sim": {**TURNS["sim"], "service": {"base_s": 0.4, "per_sequence_s": 0.1, "max_batch": 3, "pause_s": 0.7},
            "trainer": {"eval_s": 2.0, "publish_s": 1.0, "service_slowdown": 0.5}},
}
SERVER_TIES = {  # ... whole seconds, requests kept across each update
    **TURN_TIES,
    "train": {**TURN_TIES["train"], "model_name": "org/model",
              "inference": {**VLLM["inference"], "in_flight": "keep"}},
    "sim": {**TURN_TIES["sim"], "service": {"base_s": 1.0, "per_sequence_s": 1.0, "max_batch": 2, "pause_s": 1.0},
            "trainer": {"step_s": 10.0, "per_datum_s": 0.0, "publish_s": 2.0, "eval_s": 1.0}},
}
# pass_rate with every option beside its contract: loss weights (pending in the learner across a checkpoint),
# reshuffled exploration, evidence discounted by versions, a wider near-best set.
WEIGHTED = {"train": {"task_sampler": "pass_rate", "batch_size": 6,
                      "task_sampler_options": {"importance_cap": 3.0, "explore_order": "reshuffled",
                                               "forget_versions": 4.0, "near_best": 0.2}}}
GATED = {  # everything, rollouts in worker processes: one group launching at a time, a launch held 4 s at most
    **EVERYTHING,
    "train": {**EVERYTHING["train"],
              "workflow_config": {**EVERYTHING["train"]["workflow_config"], "rollout_isolation": "process",
                                  "worker_launch_concurrent_groups": 1, "worker_startup_budget_seconds": 4.0}},
    "trace": {"group_every": 1},
}
CASES = {"everything": EVERYTHING, "gated": GATED, "weighted": WEIGHTED, "ties": TIES, "group": GROUP, "plain": {}, "turns": TURNS, "turn-ties": TURN_TIES,
         "contended": CONTENDED, "servers": SERVERS, "server-ties": SERVER_TIES}


def rows(path):
    return read_jsonl(path / "metrics.jsonl")


def test_same_seed_same_run_directory(tmp_path):
    cfg = config(**EVERYTHING)
    a, b = run(cfg, tmp_path / "a"), run(cfg, tmp_path / "b")
    assert differing(a.path, b.path) == []
    assert checkpoint_files(a.path) == checkpoint_files(b.path)
    ra, rb = read_jsonl(a.path / "checkpoints.jsonl"), read_jsonl(b.path / "checkpoints.jsonl")
    # wall-clock fields aside: the row's time, and the logs' byte lengths (decision_ms varies in its digits)
    assert [{k: v for k, v in r.items() if k not in ("time", "logs")} for r in ra] == \
           [{k: v for k, v in r.items() if k not in ("time", "logs")} for r in rb]
    other = run(config(**{**EVERYTHING, "train": {**EVERYTHING["train"], "seed": 1}}), tmp_path / "c")
    assert differing(a.path, other.path) == ["metrics.jsonl", "tasks/events.jsonl", "trace.json"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_killed_anywhere_and_resumed_is_the_uninterrupted_run(tmp_path, case):
    cfg = config(**CASES[case])
    whole = run(cfg, tmp_path / "whole")
    end = whole.rt.now
    step_times = [r["time"] for r in rows(whole.path) if "train/rollouts" in r]
    kills = [0.0, end * 0.37, step_times[2], step_times[3] + 1e-9, end * 0.81, end]
    for n, kill in enumerate(kills):
        killed = run(cfg, tmp_path / f"k{n}", until=kill)
        assert not killed.rt.done or kill == end
        resumed = resume(killed.path)
        assert resumed.rt.done
        assert differing(whole.path, killed.path) == [], f"killed at {kill} of {end}"
        assert checkpoint_files(whole.path) == checkpoint_files(killed.path)


def test_importance_weights_reach_the_step_scaled_to_mean_one(tmp_path):
    """pass_rate's ``importance_cap``: each step's trained groups weigh ``min(cap, uniform share / drawn share)``,
    scaled to mean 1, so a step's weights straddle 1; without the option no step reports weights."""
    weighted = rows(run(config(**WEIGHTED), tmp_path / "w").path)
    spans = [(r["train/sampler/loss_weight_min"], r["train/sampler/loss_weight_max"]) for r in weighted
             if "train/sampler/loss_weight_min" in r]
    assert spans and all(lo <= 1.0 <= hi for lo, hi in spans) and any(lo < hi for lo, hi in spans)
    plain = rows(run(config(train={"task_sampler": "pass_rate"}), tmp_path / "p").path)
    assert not any("train/sampler/loss_weight_min" in r for r in plain)


def test_resume_twice_and_with_more_steps(tmp_path):
    cfg = config(**EVERYTHING)
    longer = run(config(**{**EVERYTHING, "train": {**EVERYTHING["train"], "max_training_steps": 11}}), tmp_path / "longer")
    part = run(cfg, tmp_path / "part", until=40.0)
    resume(part.path)  # to the end of its 8 steps (a final checkpoint at 8)
    assert len([r for r in rows(part.path) if "train/rollouts" in r]) == 8
    more = resume(part.path, steps=11)
    assert more.cfg.train.max_training_steps == 11
    steps = [r["step"] for r in rows(part.path) if "train/rollouts" in r]
    assert steps == list(range(11))
    with pytest.raises(ValueError, match="already done 11 steps"):
        resume(part.path, steps=5)
    # a run planned for 8 steps draws less ahead near its end than one planned for 11: only the first steps agree
    same = [timed_out(a) == timed_out(b) for a, b in zip(rows(part.path), rows(longer.path), strict=False)]
    assert same[:5] == [True] * 5


@pytest.mark.parametrize("release", ["rollout", "group"])
def test_accounting_agrees_with_the_dispatcher(tmp_path, release):
    """The runtime's busy permits are the dispatcher's rollouts in flight (under rollout, its permits' busy share;
    under group, with groups of 4 on 12 permits, the configured concurrency is the budget too)."""
    cfg = config(**{**EVERYTHING, "train": {**EVERYTHING["train"], "permit_release": release}})
    r = run(cfg, tmp_path / "r")
    steps = [x for x in rows(r.path) if "train/rollouts" in x]
    assert len(steps) == 8
    for x in steps:
        assert x["rollout_client/permit_busy_share"] == pytest.approx(x["rollout_client/concurrency_achieved_fraction"],
                                                           abs=1e-9)
        assert x["rollout_client/rollouts_in_flight_max"] <= 12
    assert steps[-1]["sim/simulated_seconds"] == steps[-1]["time"]


def test_shares_and_waste(tmp_path):
    r = run(config(**EVERYTHING), tmp_path / "r")
    steps = [x for x in rows(r.path) if "train/rollouts" in x]
    for x in steps:
        assert 0.0 <= x["rollout_client/permit_busy_share"] <= 1.0 + 1e-12
        assert 0.0 <= x["train/trainer_idle_share"] <= 1.0 + 1e-12
    wasted = {f: sum(x[f"train/wasted_rollouts/{f}"] for x in steps) for f in ("rejected", "failed", "cancelled")}
    assert wasted["rejected"] > 0 and wasted["failed"] > 0 and wasted["cancelled"] > 0
    assert sum(x["train/rollouts"] for x in steps) > 0
    d = r.driver.dispatcher
    assert d.permits.free + sum(lease.holding for _, lease in d.running.values()) == d.permits.capacity


def test_events_name_every_draw_and_settle(tmp_path):
    r = run(config(**EVERYTHING), tmp_path / "r")
    events = read_jsonl(r.path / "tasks/events.jsonl")
    assert events[0]["event"] == "start"
    draws = {(e["start"], e["seq"]) for e in events if e["event"] == "draw"}
    settles = [e for e in events if e["event"] == "settle"]
    fates = [e for e in events if e["event"] == "fate"]
    assert {(e["start"], e["seq"]) for e in settles} <= draws
    assert {(e["start"], e["seq"]) for e in fates} <= draws
    assert {e["fate"] for e in fates} >= {"consumed", "rejected", "failed"}
    assert all(e["sampler"] == "pass_rate" for e in events if e["event"] == "draw")


def test_every_rollout_raising_fails_every_group_until_the_failure_streak_stops_the_run(tmp_path):
    """Every group fails; step 0 consumes four of them (training nothing), and the eighth in a row (the streak's
    limit, max(8, 2 x batch 4)) stops the run as live stops it (platoon.policy.failures), its events written."""
    with pytest.raises(SimulationStalled) as stopped:
        run(config(train={"max_training_steps": 3}, sim={"rollout": {"error_rate": 1.0}}), tmp_path / "r")
    assert str(stopped.value).startswith("the run stopped at step 1: its last 8 groups all failed")
    assert "failed: RolloutRaised: rollout " in str(stopped.value)
    steps = [x for x in rows(tmp_path / "r") if "train/rollouts" in x]
    assert [x["train/batch/informative_groups"] for x in steps] == [0.0]
    events = read_jsonl(tmp_path / "r/tasks/events.jsonl")
    settles = [e for e in events if e["event"] == "settle"]
    assert {e["verdict"] for e in settles} == {"failed"} and len(settles) >= 8
    # each failed group: the rollout that raised ran for nothing, the others it cancelled (those that had started)
    assert 4 <= steps[0]["train/wasted_rollouts/failed"] <= len(settles)
    assert 0 < steps[0]["train/wasted_rollouts/cancelled"] <= 3 * steps[0]["train/wasted_rollouts/failed"]


def test_stragglers_are_cut_after_the_quorum(tmp_path):
    sim = {"rollout": {"duration": {"dist": "lognormal", "median_s": 10.0, "sigma": 1.5}}}
    free = run(config(train={"max_training_steps": 4}, sim=sim), tmp_path / "free")
    cut = run(config(train={"max_training_steps": 4, "workflow_config": {"straggler_timeout_seconds": 5.0,
                                                                         "straggler_quorum": 2}}, sim=sim),
              tmp_path / "cut")
    cancelled = sum(x["train/wasted_rollouts/cancelled"] for x in rows(cut.path) if "train/rollouts" in x)
    assert cancelled > 0
    assert cut.rt.now < free.rt.now
    settles = [e for e in read_jsonl(cut.path / "tasks/events.jsonl") if e["event"] == "settle"]
    assert all(e["valid"] >= 2 for e in settles)  # the quorum's members always finished


def test_teardowns_hold_permits_under_rollout_release(tmp_path):
    sim = {"rollout": {"duration": {"dist": "fixed", "value_s": 10.0},
                       "teardown_s": {"dist": "fixed", "value_s": 90.0}}}
    r = run(config(train={"max_training_steps": 2, "batch_size": 4, "max_concurrent_rollouts": 4, "max_staleness": 0},
                   sim=sim), tmp_path / "r")
    first = rows(r.path)[0]
    # 4 permits, one group of 4 at a time: each permit is held 10 s of rollout + the 60 s teardown wait; then the
    # step trains 5 s + 0.1 s x 16 datums
    assert first["time"] == pytest.approx(4 * 70.0 + 5 + 0.1 * 16, abs=1e-6)
    warnings: list[str] = []
    r2 = run(config(train={"max_training_steps": 1, "batch_size": 1, "max_concurrent_rollouts": 4}, sim=sim), tmp_path / "r2",
             log=lambda level, message: warnings.append(message))
    assert r2.rt.now == pytest.approx(70.0 + 5 + 0.4 + 1)
    assert len([w for w in warnings if "teardowns still running after 60s" in w]) == 4
    group = run(config(train={"max_training_steps": 2, "batch_size": 4, "max_concurrent_rollouts": 4, "max_staleness": 0,
                              "permit_release": "group"}, sim=sim), tmp_path / "group")
    assert rows(group.path)[0]["time"] == pytest.approx(4 * 10.0 + 5 + 0.1 * 16, abs=1e-6)  # nothing waits


def test_learning_shows_in_eval(tmp_path):
    r = run(config(train={"max_training_steps": 12}, eval={"every": 4}, sim={"learning": {"gain": 0.5, "transfer": 0.5}}),
            tmp_path / "r")
    evals = [(x["step"], x["eval/pass@1"]) for x in rows(r.path) if "eval/pass@1" in x]
    assert [s for s, _ in evals] == [0, 4, 8, 12]
    assert evals[-1][1] > evals[0][1]
    flat = run(config(train={"max_training_steps": 3}, sim={"learning": {"enabled": False}}), tmp_path / "flat")
    assert not any("eval/pass@1" in x for x in rows(flat.path))


def test_a_task_file_population(tmp_path):
    (tmp_path / "tasks.csv").write_text("task_id,pass_rate\n" + "".join(f"t{i},0.5\n" for i in range(20)))
    r = run(config(train={"max_training_steps": 30, "batch_size": 8, "max_concurrent_rollouts": 64},
                   sim={"tasks": str(tmp_path / "tasks.csv")}), tmp_path / "r")
    steps = [x for x in rows(r.path) if "train/rollouts" in x]
    informative = sum(x["train/batch/informative_groups"] for x in steps)
    trained = informative + sum(x["train/batch/all_pass_groups"] + x["train/batch/all_fail_groups"]
                                for x in steps)
    # groups of 4 at p = 0.5 mix passes and failures with probability 1 - 2 / 16
    assert informative / trained == pytest.approx(0.875, abs=0.05)
    assert {e["task_id"] for e in read_jsonl(r.path / "tasks/events.jsonl") if e["event"] == "draw"} <= {
        f"t{i}" for i in range(20)}
    lock = json.loads((r.path / "lock.json").read_text())
    assert lock["runtime"] == "sim" and lock["config"]["sim"]["tasks"].endswith("tasks.csv")
