"""Full checkpoints and loading with fallback (platoon.runs.checkpoints)."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from platoon.runs import checkpoints as ckpt
from platoon.runs.atomic import write_json_atomic
from platoon.runs.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_latest_checkpoint,
    read_checkpoint_rows,
    save_checkpoint,
)
from platoon.runs.jsonl import JsonlWriter
from platoon.runs.rundir import RunDir


def files_of(step: int, weights: bytes = b"\x00\x01weights") -> dict[str, object]:
    return {
        f"tasks/dispatch-{step:06d}.json": {"format": 2, "next_position": step * 4, "outstanding": []},
        f"tasks/state-{step:06d}.json": {"format": 1, "tasks": {"t0": {"groups": step}}},
        "trainer.pt": weights,
    }


@pytest.fixture
def run(tmp_path) -> RunDir:
    return RunDir.create(tmp_path / "run")


def test_save_writes_files_then_a_row(run):
    row = save_checkpoint(run, 10, files_of(10), {"policy_version": 10, "next_position": 40})
    assert list(row)[:5] == ["step", "name", "path", "files", "time"]
    assert (row["step"], row["name"], row["path"]) == (10, "000010", "checkpoints/000010")
    assert (row["policy_version"], row["next_position"]) == (10, 40)
    directory = run.path / "checkpoints" / "000010"
    for name, sha in row["files"].items():
        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == sha
    assert (directory / "trainer.pt").read_bytes() == b"\x00\x01weights"
    assert (directory / "tasks/dispatch-000010.json").read_text() == (
        '{"format":2,"next_position":40,"outstanding":[]}\n'
    )
    assert read_checkpoint_rows(run) == [row]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000010"]  # no temporary left

    loaded = load_latest_checkpoint(run.path)  # a plain path works too
    assert loaded.row == row and loaded.step == 10 and loaded.name == "000010"
    assert loaded.files == files_of(10)
    assert loaded.path == directory and loaded.passed_over == []


def test_resave_replaces_the_directory_and_appends_a_row(run):
    save_checkpoint(run, 10, {**files_of(10), "extra.json": {"old": True}}, {"start": 1})
    save_checkpoint(run, 10, files_of(10, b"new"), {"start": 2})
    assert [r["start"] for r in read_checkpoint_rows(run)] == [1, 2]
    directory = run.checkpoint_dir(10)
    assert not (directory / "extra.json").exists()  # a fresh directory, not a merge
    loaded = load_latest_checkpoint(run)
    assert loaded.row["start"] == 2 and loaded.files["trainer.pt"] == b"new"
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000010"]


def test_resave_without_atomic_exchange_falls_back_to_two_renames(run, monkeypatch):
    monkeypatch.setattr(ckpt, "_exchange", lambda a, b: False)
    save_checkpoint(run, 10, files_of(10), {})
    save_checkpoint(run, 10, files_of(10, b"second"), {})
    assert load_latest_checkpoint(run).files["trainer.pt"] == b"second"
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000010"]


def test_a_save_that_dies_before_its_row_leaves_the_previous_checkpoint(run, monkeypatch):
    save_checkpoint(run, 10, files_of(10), {})

    def die(self, row):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(JsonlWriter, "write", die)
    with pytest.raises(OSError):
        save_checkpoint(run, 20, files_of(20), {})
    monkeypatch.undo()
    assert run.checkpoint_dir(20).exists()  # its files are there, but without a row it does not count
    assert load_latest_checkpoint(run).step == 10


def test_a_leftover_partial_directory_is_cleared(run):
    partial = run.checkpoints_dir / ".000010.partial"
    (partial / "tasks").mkdir(parents=True)
    (partial / "junk.json").write_text("{")
    save_checkpoint(run, 10, files_of(10), {})
    assert not partial.exists()
    assert not (run.checkpoint_dir(10) / "junk.json").exists()


@pytest.mark.parametrize(
    ("files", "row", "error"),
    [
        ({"trainer.pt": {"not": "bytes"}}, {}, "only a .json or .npz file takes an object"),
        ({"tasks/x.json": {"loss": math.nan}}, {}, "Out of range float"),
        ({"tasks/x.json": b'{"torn":'}, {}, "truncated or unreadable JSON"),
        ({"../escape.json": {}}, {}, "not a plain relative path"),
        ({"/abs.json": {}}, {}, "not a plain relative path"),
        ({"a//b.json": {}}, {}, "not a plain relative path"),
        ({"ok.json": {}}, {"files": {}}, "clash"),
        ({"ok.json": {}}, {"policy_version": math.nan}, "Out of range float"),
    ],
)
def test_bad_input_raises_before_anything_is_written(run, files, row, error):
    save_checkpoint(run, 10, files_of(10), {})
    before = run.checkpoints_path.read_bytes()
    with pytest.raises(ValueError, match=error):
        save_checkpoint(run, 20, files, row)
    assert run.checkpoints_path.read_bytes() == before
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000010"]


def truncate(path):
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def flip_bytes(path):
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


def delete(path):
    path.unlink()


def unknown_format(path):
    # a well-formed file that a newer platoon wrote; it is written as the row expects, so only its format is wrong
    write_json_atomic(path, {"format": 3, "next_position": 80})


CORRUPTIONS = [
    ("tasks/dispatch-000020.json", truncate, "truncated or unreadable JSON"),
    ("trainer.pt", flip_bytes, "checksum mismatch"),
    ("tasks/state-000020.json", flip_bytes, "truncated or unreadable JSON"),
    ("tasks/state-000020.json", delete, "missing"),
    ("tasks/dispatch-000020.json", unknown_format, "unknown format 3"),
]


def rehash(run, step, name):
    """Rewrite the newest row of ``step`` so that ``name``'s checksum matches the file (isolates the format check)."""
    rows = read_checkpoint_rows(run)
    rows[-1]["files"][name] = hashlib.sha256((run.checkpoint_dir(step) / name).read_bytes()).hexdigest()
    run.checkpoints_path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(("name", "corrupt", "problem"), CORRUPTIONS)
def test_a_broken_newest_checkpoint_falls_back_to_the_previous(run, name, corrupt, problem):
    save_checkpoint(run, 10, files_of(10), {"policy_version": 10})
    save_checkpoint(run, 20, files_of(20), {"policy_version": 20})
    corrupt(run.checkpoint_dir(20) / name)
    if corrupt is unknown_format:
        rehash(run, 20, name)

    loaded = load_latest_checkpoint(run)
    assert loaded.step == 10 and loaded.row["policy_version"] == 10
    assert loaded.files == files_of(10)
    assert len(loaded.passed_over) == 1
    note = loaded.passed_over[0]
    assert note.startswith("passed over checkpoint 000020 (step 20): ")
    assert f"checkpoints/000020/{name}: {problem}" in note

    with pytest.raises(CheckpointError, match=problem) as info:
        load_checkpoint(run, 20)
    assert info.value.path == run.checkpoint_dir(20) / name
    assert load_checkpoint(run, 10).files == files_of(10)


def test_a_missing_checkpoint_directory_is_passed_over(run):
    save_checkpoint(run, 10, files_of(10), {})
    save_checkpoint(run, 20, files_of(20), {})
    (run.checkpoints_dir / "000020").rename(run.checkpoints_dir / ".000020.replaced")
    loaded = load_latest_checkpoint(run)
    assert loaded.step == 10 and "missing" in loaded.passed_over[0]


def test_a_malformed_or_torn_row_is_passed_over(run):
    save_checkpoint(run, 10, files_of(10), {})
    with open(run.checkpoints_path, "a") as f:
        f.write('{"step": 30, "name": "000030"}\n{"step": 40, "na')
    loaded = load_latest_checkpoint(run)
    assert loaded.step == 10
    assert loaded.passed_over == [
        "passed over checkpoint 000030 (step 30): checkpoint 000030: its row in checkpoints.jsonl "
        "has no valid path and files"
    ]


def test_a_row_pointing_outside_the_run_is_refused(run):
    with open(run.checkpoints_path, "a") as f:
        f.write(json.dumps({"step": 1, "name": "000001", "path": "../elsewhere", "files": {}}) + "\n")
    with pytest.raises(CheckpointError, match="leaves the run directory"):
        load_latest_checkpoint(run)


def test_when_none_reads_the_error_names_the_newest_bad_file(run):
    save_checkpoint(run, 10, files_of(10), {})
    save_checkpoint(run, 20, files_of(20), {})
    delete(run.checkpoint_dir(10) / "trainer.pt")
    truncate(run.checkpoint_dir(20) / "tasks/dispatch-000020.json")
    with pytest.raises(CheckpointError) as info:
        load_latest_checkpoint(run)
    err = info.value
    assert "no checkpoint reads back" in str(err)
    assert "checkpoints/000020/tasks/dispatch-000020.json: truncated" in str(err)
    assert err.path == run.checkpoint_dir(20) / "tasks/dispatch-000020.json"
    assert len(err.problems) == 2 and "000010/trainer.pt: missing" in err.problems[1]


def test_no_rows(run):
    with pytest.raises(CheckpointError, match="no checkpoint") as info:
        load_latest_checkpoint(run)
    assert info.value.path == run.checkpoints_path
    with pytest.raises(CheckpointError, match="no checkpoint 000007"):
        load_checkpoint(run, 7)


def test_formats_argument(run):
    save_checkpoint(run, 10, files_of(10), {})
    # the statistics snapshot is format 1: a reader that knows only format 2 of it passes the checkpoint over
    with pytest.raises(
        CheckpointError, match=r"state-000010\.json: unknown format 1 \(this reader knows 2\)"
    ):
        load_latest_checkpoint(run, formats={"tasks/state-*.json": {2}})
    # by default dispatch files must be format 1 or 2, others are not checked
    save_checkpoint(run, 20, {"tasks/dispatch-000020.json": {"format": 9}, "other.json": {"format": 9}}, {})
    assert load_latest_checkpoint(run).step == 10
    assert load_latest_checkpoint(run, formats={}).step == 20
    save_checkpoint(run, 30, {"tasks/dispatch-000030.json": {"format": 1}}, {})
    assert load_latest_checkpoint(run).step == 30


# -- retention and partial reads ------------------------------------------------------------------------------------
def test_keep_removes_all_but_the_newest_and_readers_skip_them_without_a_note(run):
    for step in (0, 2, 4, 6):
        row = save_checkpoint(run, step, files_of(step), {}, keep=2)
    assert row["pruned"] == ["000002"]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000004", "000006"]
    assert [r.get("pruned") for r in read_checkpoint_rows(run)] == [None, None, ["000000"], ["000002"]]
    assert [r["name"] for r in ckpt.kept_rows(run)] == ["000006", "000004"]
    (run.checkpoint_dir(6) / "trainer.pt").write_bytes(b"torn")
    loaded = load_latest_checkpoint(run)
    assert loaded.step == 4 and len(loaded.passed_over) == 1
    save_checkpoint(run, 4, files_of(4), {}, keep=2)  # a resume re-saves its step: nothing newer is lost
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000004", "000006"]
    with pytest.raises(ValueError, match="keep"):
        save_checkpoint(run, 8, files_of(8), {}, keep=0)


def test_permanent_checkpoints_are_never_pruned_and_keep_counts_only_recovery_ones(run):
    # checkpoint.every 4 (and the launch and final ones) permanent, checkpoint.recovery_every 1, keep_recovery 2
    for step in range(10):
        row = save_checkpoint(run, step, files_of(step), {}, keep=2, permanent=step % 4 == 0 or step == 9)
        assert row["permanent"] is (step % 4 == 0 or step == 9)
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000000", "000004", "000006", "000007",
                                                                     "000008", "000009"]
    pruned = [n for r in read_checkpoint_rows(run) for n in r.get("pruned", [])]
    assert pruned == ["000001", "000002", "000003", "000005"]  # each once, by the save that made it the third
    save_checkpoint(run, 10, files_of(10), {}, keep=1)
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["000000", "000004", "000008", "000009",
                                                                     "000010"]
    # a permanent step saved again as a recovery one (its newest row decides its kind) is not pruned by its own save
    assert "pruned" not in save_checkpoint(run, 4, files_of(4), {}, keep=1)
    assert run.checkpoint_dir(4).is_dir()
    assert save_checkpoint(run, 11, files_of(11), {}, keep=1)["pruned"] == ["000004", "000010"]
    assert save_checkpoint(run, 12, files_of(12), {})["permanent"] is False  # the default: a recovery checkpoint


def test_optional_files_that_do_not_read_leave_the_checkpoint_standing(run):
    save_checkpoint(run, 2, files_of(2), {})
    save_checkpoint(run, 4, files_of(4), {})
    (run.checkpoint_dir(4) / "tasks" / "state-000004.json").write_text("{}")
    loaded = load_latest_checkpoint(run, optional=("tasks/state-*.json",))
    assert loaded.step == 4 and loaded.passed_over == []
    assert "tasks/state-000004.json" not in loaded.files and "checksum mismatch" in loaded.broken[
        "tasks/state-000004.json"]
    older = read_checkpoint_rows(run)[0]
    assert ckpt.read_checkpoint_file(run, older, "tasks/state-000002.json") == files_of(2)["tasks/state-000002.json"]
    with pytest.raises(CheckpointError, match="no file"):
        ckpt.read_checkpoint_file(run, older, "tasks/state-000004.json")
    assert load_latest_checkpoint(run).step == 2  # not optional: the whole checkpoint is passed over


def test_a_row_records_no_more_of_the_logs_than_the_disk_holds(run, monkeypatch):
    synced = []
    monkeypatch.setattr(RunDir, "sync_logs", lambda self: synced.append(self.path))
    with JsonlWriter(run.metrics_path) as w:
        w.write({"step": 0})
    save_checkpoint(run, 1, files_of(1), {"logs": run.log_lengths()})
    assert synced == [run.path]
    assert read_checkpoint_rows(run)[0]["logs"] == {"metrics.jsonl": 11, "tasks/events.jsonl": 0, "trace.json": 0}


def test_iter_jsonl_stops_at_a_recorded_length(run):
    from platoon.runs.jsonl import iter_jsonl

    with JsonlWriter(run.events_path) as w:
        for seq in range(3):
            w.write({"seq": seq})
    first = len(b'{"seq":0}\n')
    assert [r["seq"] for r in iter_jsonl(run.events_path, limit=2 * first)] == [0, 1]
    assert [r["seq"] for r in iter_jsonl(run.events_path, limit=2 * first - 1)] == [0]


def test_a_checkpoint_pruned_while_read_is_followed_by_the_newer_one_not_an_older(run, monkeypatch):
    """A reader beside a running trainer (``platoon eval RUN``): the trainer saves 30 and prunes 20 while 20 is
    read. The reader goes on from the new listing (30), not back to 10."""
    import shutil

    save_checkpoint(run, 10, files_of(10), {"policy_version": 10})
    save_checkpoint(run, 20, files_of(20), {"policy_version": 20})
    read_row = ckpt._read_row
    raced = []

    def racing(rd, row, *args):
        if row["step"] == 20 and not raced:
            raced.append(True)
            save_checkpoint(run, 30, files_of(30), {"policy_version": 30})
            shutil.rmtree(run.checkpoint_dir(20))
        return read_row(rd, row, *args)

    monkeypatch.setattr(ckpt, "_read_row", racing)
    loaded = load_latest_checkpoint(run)
    assert raced and loaded.step == 30 and loaded.passed_over == []
