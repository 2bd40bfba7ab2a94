"""A simulated run on vLLM servers (``train.inference.engine: vllm`` in turns mode): the engine's metrics in the live
runtime's names, the trace's pause and model-call spans, and what more servers and the in-flight setting change."""

from __future__ import annotations

import json

import pytest
from simkit import config, run

from platoon.runs import read_jsonl


def servers_run(tmp_path, name: str, *, servers: int = 2, in_flight: str = "abort", pause_s: float = 0.5):
    urls = [f"http://server-{i}:8100" for i in range(servers)]
    cfg = config(train={"model_name": "org/model", "max_training_steps": 8, "batch_size": 4,
                        "max_concurrent_rollouts": 16, "max_staleness": 4,
                        "inference": {"engine": "vllm", "servers": urls, "in_flight": in_flight}},
                 trace={"group_every": 1},
                 sim={"rollout": {"turns": {"passing": 3, "failing": 5},
                                  "env_step_s": {"dist": "exponential", "mean_s": 1.0}},
                      "service": {"base_s": 0.5, "per_sequence_s": 0.2, "max_batch": 64, "pause_s": pause_s},
                      "trainer": {"step_s": 3.0, "per_datum_s": 0.0, "publish_s": 1.0},
                      "learning": {"enabled": False}})
    r = run(cfg, tmp_path / name)
    steps = [x for x in read_jsonl(r.path / "metrics.jsonl") if "train/rollouts" in x]
    events = [e for e in json.loads((r.path / "trace.json").read_text() + "]") if e.get("ph") == "X"]
    return steps, events


def test_the_engines_metrics_and_spans_are_the_live_ones(tmp_path):
    steps, events = servers_run(tmp_path, "r", servers=3)
    assert all(s["inference/servers_up"] == 3 for s in steps)
    assert sum(s["inference/requests"] for s in steps) >= len([e for e in events if e["name"] == "model_call"])
    later = steps[1:]  # each step reports the publish before it
    assert all(s["inference/weight_sync_s"] == 1.0 for s in later)
    assert all(0 < s["inference/paused_share"] < 1 for s in later)
    assert sum(s["inference/resent"] for s in steps) > 0  # abort: requests in flight at a pause start over
    pauses = [e for e in events if e["name"] == "pause"]
    assert len(pauses) == len([e for e in events if e["name"] == "publish"])
    assert {e["dur"] for e in pauses} == {500_000}
    calls = [e["args"] for e in events if e["name"] == "model_call"]
    assert {c["server"] for c in calls} == {0, 1, 2}
    assert all(c["concurrency"] >= 1 for c in calls)


def test_keep_resends_nothing_and_a_pause_of_none_pauses_nothing(tmp_path):
    kept, _ = servers_run(tmp_path, "keep", in_flight="keep")
    assert sum(s["inference/resent"] for s in kept) == 0
    unpaused, events = servers_run(tmp_path, "none", pause_s=0.0)
    assert all(s["inference/paused_share"] == 0 for s in unpaused)
    assert not [e for e in events if e["name"] == "pause"]


def test_more_servers_answer_faster_when_they_are_the_bottleneck(tmp_path):
    one, _ = servers_run(tmp_path, "one", servers=1)
    four, _ = servers_run(tmp_path, "four", servers=4)
    assert four[-1]["time"] < 0.7 * one[-1]["time"]


@pytest.mark.parametrize(("override", "message"), [
    ({"service": {"pause_s": 3.0}}, "pause_s \\(3\\) is part of the publish: at most sim.trainer.publish_s \\(1\\)"),
])
def test_a_pause_longer_than_its_publish_is_refused(override, message):
    from platoon.config.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match=message):
        config(sim={"rollout": {"turns": {"passing": 2, "failing": 2}}, **override})
