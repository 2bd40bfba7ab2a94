"""The per-task statistics in their columnar checkpoint file (``tasks/state-<step>.npz``): they load back as the JSON
form does, a run whose checkpoints hold the JSON form of older releases resumes exactly, and a corrupt file is
refused by name while the checkpoint before it still resumes."""

from __future__ import annotations

import json

import pytest
from simkit import config, differing, resume, run

from platoon.policy.recorder import StatsRecorder
from platoon.runs import load_latest_checkpoint, read_jsonl
from platoon.runs.atomic import json_bytes, sha256_bytes
from platoon.runs.columnar import npz_bytes, parse_npz

MANY = {  # errors, invalid members, stragglers and cancels: None and NaN in the histories and means
    "train": {"max_training_steps": 8, "max_concurrent_rollouts": 12, "workflow_config": {"straggler_timeout_seconds": 15.0},
              "task_sampler": "pass_rate"},
    "checkpoint": {"recovery_every": 2},
    "sim": {"rollout": {"duration": {"dist": "lognormal", "median_s": 8.0, "sigma": 1.0}, "error_rate": 0.1,
                        "invalid_rate": 0.2}},
}


def test_the_columns_load_back_as_the_json_form(tmp_path):
    r = run(config(**MANY), tmp_path / "run", until=60.0)
    recorder = r.driver.dispatcher.recorder
    as_json = recorder.snapshot()
    data = npz_bytes("tasks/state.npz", recorder.snapshot(columns=True))
    assert data == npz_bytes("tasks/state.npz", recorder.snapshot(columns=True))  # deterministic bytes
    again = StatsRecorder(recorder.peek_store().fresh())
    again.load_snapshot(parse_npz("tasks/state.npz", data))
    own = ("start", "next_seq")  # the recorder's own counters, which a resume sets beside the snapshot
    assert json_bytes({k: v for k, v in again.snapshot().items() if k not in own}) == \
        json_bytes({k: v for k, v in as_json.items() if k not in own})
    assert as_json["tasks"] and any(h[2] is None or None in h for t in as_json["tasks"].values() for h in t["history"])


def _to_json_form(path) -> None:
    """Rewrite every checkpoint of the run at ``path`` as an older release wrote it: ``tasks/state-<step>.json``."""
    rows = read_jsonl(path / "checkpoints.jsonl")
    for row in rows:
        npz = f"tasks/state-{row['name']}.npz"
        if npz not in row["files"]:
            continue
        directory = path / row["path"]
        snapshot = parse_npz(npz, (directory / npz).read_bytes())
        recorder = StatsRecorder(_store_of(path))
        recorder.load_snapshot(snapshot)
        as_json = {**recorder.snapshot(), "start": snapshot["start"], "next_seq": snapshot["next_seq"]}
        data = json_bytes(as_json)
        name = f"tasks/state-{row['name']}.json"
        (directory / npz).unlink()
        (directory / name).write_bytes(data)
        del row["files"][npz]
        row["files"][name] = sha256_bytes(data)
        row["tasks"] = {"file": name, "format": 1, "start": row["tasks"]["start"], "sha256": sha256_bytes(data)}
    (path / "checkpoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _store_of(path):
    from platoon.config.loader import config_from_lock
    from platoon.policy.stats import TaskStatsStore
    from platoon.runs import RunDir

    rd = RunDir(path)
    cfg = config_from_lock(rd.read_lock(), str(rd.lock_path))
    size = cfg.environments[0].workflow_config.group_size or cfg.train.workflow_config.group_size
    return TaskStatsStore(rd.read_pool(), {e.name: (size, 1.0) for e in cfg.environments})


def test_a_run_with_json_statistics_of_old_resumes_exactly(tmp_path):
    cfg = config(**MANY)
    whole = run(cfg, tmp_path / "whole")
    killed = run(cfg, tmp_path / "killed", until=whole.rt.now * 0.6)
    _to_json_form(killed.path)
    assert load_latest_checkpoint(killed.path).row["tasks"]["file"].endswith(".json")
    resume(killed.path)
    assert differing(whole.path, killed.path) == []


def test_a_corrupt_columnar_file_is_refused_by_name_and_the_one_before_resumes(tmp_path):
    cfg = config(**MANY)
    whole = run(cfg, tmp_path / "whole")
    killed = run(cfg, tmp_path / "killed", until=whole.rt.now * 0.6)
    newest = load_latest_checkpoint(killed.path)
    target = newest.path / f"tasks/state-{newest.name}.npz"
    target.write_bytes(target.read_bytes()[:100])
    older = load_latest_checkpoint(killed.path)
    assert older.step < newest.step
    (note,) = older.passed_over
    assert f"tasks/state-{newest.name}.npz" in note
    resume(killed.path)
    assert differing(whole.path, killed.path) == []


def test_a_columnar_file_that_is_not_one_names_itself():
    from platoon.runs.atomic import CorruptFileError

    with pytest.raises(CorruptFileError, match="state-000004.npz"):
        parse_npz("tasks/state-000004.npz", b"PK\x03\x04 not a zip")
