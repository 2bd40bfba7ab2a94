"""Append-only JSONL logs (platoon.runs.jsonl)."""

from __future__ import annotations

import logging
import math

import pytest

from platoon.runs.jsonl import JsonlWriter, iter_jsonl, read_jsonl


def test_rows_are_compact_lines_flushed_as_written(tmp_path):
    path = tmp_path / "tasks" / "events.jsonl"
    writer = JsonlWriter(path)
    writer.write({"event": "draw", "start": 1, "seq": 0})
    # flushed per line: another reader sees the row before the writer closes
    assert path.read_bytes() == b'{"event":"draw","start":1,"seq":0}\n'
    writer.write({"event": "settle", "valid": 8})
    assert read_jsonl(path) == [{"event": "draw", "start": 1, "seq": 0}, {"event": "settle", "valid": 8}]
    writer.close()
    writer.close()
    assert writer.closed


def test_appends_to_an_existing_log(tmp_path):
    path = tmp_path / "m.jsonl"
    with JsonlWriter(path) as w:
        w.write({"step": 0})
    with JsonlWriter(path) as w:
        w.write({"step": 1})
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]


def test_torn_last_line_gets_a_newline_before_new_rows(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event":"draw","seq":0}\n{"event":"dr')
    with JsonlWriter(path) as w:
        w.write({"event": "start", "start": 2})
    assert path.read_bytes() == b'{"event":"draw","seq":0}\n{"event":"dr\n{"event":"start","start":2}\n'
    assert read_jsonl(path) == [{"event": "draw", "seq": 0}, {"event": "start", "start": 2}]


def test_no_extra_newline_when_file_ends_cleanly_or_is_empty(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"")
    with JsonlWriter(path) as w:
        w.write({"a": 1})
    with JsonlWriter(path) as w:
        w.write({"a": 2})
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n'


def test_nan_and_non_objects_are_refused_and_nothing_is_written(tmp_path):
    path = tmp_path / "m.jsonl"
    with JsonlWriter(path) as w:
        with pytest.raises(ValueError):
            w.write({"step": 1, "loss": math.nan})
        with pytest.raises(TypeError):
            w.write([1, 2])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            w.write({"x": object()})
        w.write({"step": 1, "loss": None})
    assert path.read_bytes() == b'{"step":1,"loss":null}\n'


def test_write_after_close_raises(tmp_path):
    w = JsonlWriter(tmp_path / "m.jsonl")
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write({"a": 1})


def test_readers_skip_unparseable_lines_and_missing_file(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(b'{"a":1}\n\nnot json\n[1,2]\n"str"\n\xff\xfe\n{"b":2}\n{"c":')
    assert read_jsonl(path) == [{"a": 1}, {"b": 2}]
    assert list(iter_jsonl(path)) == [{"a": 1}, {"b": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []
    assert list(iter_jsonl(tmp_path / "missing.jsonl")) == []


def test_warn_mode_warns_once_and_stops_the_log(tmp_path, caplog):
    path = tmp_path / "events.jsonl"
    w = JsonlWriter(path, on_error="warn")
    w.write({"n": 1})

    class FullDisk:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    w._file = FullDisk()  # the disk fills up under a live writer
    with caplog.at_level(logging.WARNING, logger="platoon.runs.jsonl"):
        w.write({"n": 2})
        w.write({"n": 3})
    assert w.stopped is not None and "No space" in w.stopped
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    assert read_jsonl(path) == [{"n": 1}]
    # a bad row is still the caller's bug, even on a stopped log
    with pytest.raises(ValueError):
        w.write({"n": math.nan})


def test_warn_mode_when_the_file_cannot_be_opened(tmp_path, caplog):
    blocker = tmp_path / "tasks"
    blocker.write_text("a file where the directory should be")
    with caplog.at_level(logging.WARNING, logger="platoon.runs.jsonl"):
        w = JsonlWriter(blocker / "events.jsonl", on_error="warn")
        w.write({"n": 1})
    assert w.stopped is not None
    assert len(caplog.records) == 1
    with pytest.raises(OSError):
        JsonlWriter(blocker / "events.jsonl")


def test_on_error_is_checked():
    with pytest.raises(ValueError, match="on_error"):
        JsonlWriter("x.jsonl", on_error="ignore")  # type: ignore[arg-type]


def test_a_line_longer_than_the_cap_is_skipped_in_pieces_and_the_rows_after_it_read(tmp_path):
    import io

    from platoon.runs.jsonl import bounded_lines

    data = b'{"a":1}\n' + b"x" * 100 + b"\n" + b"y" * 37 + b'\n{"b":2}\n' + b"z" * 50
    lines = list(bounded_lines(io.BytesIO(data), cap=16))
    assert lines == [(b'{"a":1}\n', 8), (None, 101), (None, 38), (b'{"b":2}\n', 8), (None, 50)]
    assert sum(size for _, size in lines) == len(data)  # the sizes add up: a checkpoint's recorded length holds
    path = tmp_path / "m.jsonl"
    path.write_bytes(data)
    assert read_jsonl(path) == [{"a": 1}, {"b": 2}]
