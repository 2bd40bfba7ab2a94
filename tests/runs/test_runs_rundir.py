"""The run directory layout and lock.json (platoon.runs.rundir)."""

from __future__ import annotations

import json
import platform

import pytest

import platoon
from platoon.runs.atomic import CorruptFileError
from platoon.runs.rundir import LOCK_LISTS, RunDir, checkpoint_name, metrics_row


def test_paths(tmp_path):
    run = RunDir(tmp_path / "r")
    assert not (tmp_path / "r").exists()  # constructing touches nothing
    assert run.lock_path == tmp_path / "r" / "lock.json"
    assert run.metrics_path == tmp_path / "r" / "metrics.jsonl"
    assert run.events_path == tmp_path / "r" / "tasks" / "events.jsonl"
    assert run.checkpoints_path == tmp_path / "r" / "checkpoints.jsonl"
    assert run.checkpoint_dir(42) == tmp_path / "r" / "checkpoints" / "000042"
    assert run.report_dir == tmp_path / "r" / "report"


def test_create_refuses_a_non_empty_directory_unless_exist_ok(tmp_path):
    run = RunDir.create(tmp_path / "a" / "run")
    assert run.tasks_dir.is_dir() and run.checkpoints_dir.is_dir()
    run.release()  # the writer lock: while it is held, a second create is refused as busy (test_runs_writer)
    with pytest.raises(FileExistsError, match="not empty"):
        RunDir.create(tmp_path / "a" / "run")
    assert RunDir.create(tmp_path / "a" / "run", exist_ok=True).path == run.path
    (tmp_path / "empty").mkdir()
    RunDir.create(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        RunDir.create(tmp_path / "file")


def test_checkpoint_name():
    assert checkpoint_name(0) == "000000"
    assert checkpoint_name(1234567) == "1234567"
    for bad in (-1, 1.0, True, "3"):
        with pytest.raises(ValueError):
            checkpoint_name(bad)  # type: ignore[arg-type]


def test_write_and_read_lock(tmp_path):
    run = RunDir.create(tmp_path / "r")
    components = [{"kind": "task_sampler", "ref": "auto", "options": {"train": {}}}]
    lock = run.write_lock({"train": {"steps": 3}}, components, {"backend": "sim"})
    assert list(lock) == ["platoon_version", "python_version", "config", "components", "created", "backend"]
    assert lock["platoon_version"] == platoon.__version__
    assert lock["python_version"] == platform.python_version()
    assert run.read_lock() == lock
    # compact JSON with a trailing newline, as every state file
    raw = run.lock_path.read_text()
    assert raw.endswith("}\n") and ", " not in raw
    assert json.loads(raw) == lock


def test_lock_extra_may_not_replace_base_keys(tmp_path):
    run = RunDir.create(tmp_path / "r")
    with pytest.raises(ValueError, match="config"):
        run.write_lock({}, [], {"config": {}})
    assert not run.lock_path.exists()


def test_append_lock_list_keeps_the_rest(tmp_path):
    run = RunDir.create(tmp_path / "r")
    run.write_lock({"seed": 0}, [])
    run.append_lock_list("tasks_state_lost", {"start": 2, "checkpoint": "000010", "problem": "missing"})
    lock = run.append_lock_list("tasks_state_lost", {"start": 3, "checkpoint": "000020", "problem": "x"})
    assert [item["start"] for item in lock["tasks_state_lost"]] == [2, 3]
    assert run.read_lock() == lock and lock["config"] == {"seed": 0}
    with pytest.raises(ValueError, match="not a list"):
        run.append_lock_list("config", 1)
    run.write_lock({}, [], {"note": "x"})
    with pytest.raises(ValueError, match="str, not a list"):
        run.append_lock_list("note", 1)


def test_rewriting_the_lock_keeps_the_appended_lists(tmp_path):
    run = RunDir.create(tmp_path / "r")
    run.write_lock({"seed": 0}, [])
    run.append_lock_list("sampling_changed", {"start": 2, "changes": ["train.task_sampler: a -> b"]})
    lock = run.write_lock({"seed": 0}, [], {"start": 2})
    assert lock["sampling_changed"] == [{"start": 2, "changes": ["train.task_sampler: a -> b"]}]
    assert "tasks_state_lost" not in lock
    assert set(LOCK_LISTS) == {"sampling_changed", "tasks_state_lost", "finished"}


def test_read_lock_errors_name_the_file(tmp_path):
    run = RunDir.create(tmp_path / "r")
    with pytest.raises(CorruptFileError, match=r"lock\.json: missing"):
        run.read_lock()
    with pytest.raises(CorruptFileError, match="missing"):
        run.append_lock_list("tasks_state_lost", {})
    run.lock_path.write_text('{"config": ')
    with pytest.raises(CorruptFileError, match=r"lock\.json: truncated or unreadable JSON"):
        run.read_lock()
    run.lock_path.write_text("[1]\n")
    with pytest.raises(CorruptFileError, match="not a JSON object"):
        run.read_lock()


def test_metrics_and_events_writers_and_readers(tmp_path):
    run = RunDir.create(tmp_path / "r")
    with run.metrics_writer() as m, run.events_writer() as e:
        m.write(metrics_row(0, 1.5, {"train/sampler/draws": 4}))
        e.write({"event": "draw", "start": 1, "seq": 0, "task_id": "t0"})
    assert run.read_metrics() == [{"step": 0, "time": 1.5, "train/sampler/draws": 4}]
    assert run.read_events() == [{"event": "draw", "start": 1, "seq": 0, "task_id": "t0"}]
    with run.events_writer() as e, run.metrics_writer() as m:
        assert (e.on_error, m.on_error) == ("warn", "raise")


def test_metrics_row_puts_step_and_time_first():
    row = metrics_row(3, 9.0, {"b": 1, "a": 2})
    assert list(row) == ["step", "time", "b", "a"]
    with pytest.raises(ValueError, match="step"):
        metrics_row(3, 9.0, {"step": 1})


def test_the_pool_is_written_as_lists_and_read_back_as_tuples(tmp_path):
    rd = RunDir.create(tmp_path / "run")
    rows = [("a::t1", "a", "x"), ("b::t1", "b", None)]
    rd.write_pool(rows)
    assert rd.pool_path.read_bytes() == b'{"format":1,"tasks":[["a::t1","a","x"],["b::t1","b",null]]}\n'
    assert rd.read_pool() == rows
