"""trace.json's writer: the JSON-array form that stays loadable, torn lines mended, sampling and the cap."""

from __future__ import annotations

import json

import pytest

from platoon.runs.trace import SERVICE, TRAINER, TraceWriter, read_trace, track_names


def loads_closed(path) -> list[dict]:
    """The trace as JSON once a ``]`` is appended, as the format's readers take it."""
    return json.loads(path.read_text() + "]")


def test_the_file_is_a_json_array_once_closed_and_at_every_flush(tmp_path):
    path = tmp_path / "trace.json"
    w = TraceWriter(path)
    w.span("train", TRAINER, 1.0, 2.5, datums=64)
    w.flush()
    assert [e["name"] for e in loads_closed(path)] == ["thread_name", "train"]
    lane = w.open_lane()
    w.span("model_call", lane, 1.25, 1.5, batch=3)
    w.span("batch", SERVICE, 1.25, 1.5, size=3)
    w.close()
    events = loads_closed(path)
    assert events == read_trace(path)
    train = next(e for e in events if e["name"] == "train")
    assert (train["ph"], train["ts"], train["dur"], train["args"]) == ("X", 1_000_000, 1_500_000, {"datums": 64})
    assert sorted(track_names(events).values()) == ["model service", "rollout lane 0", "trainer"]


def test_a_torn_last_line_is_cut_when_the_next_writer_opens(tmp_path):
    path = tmp_path / "trace.json"
    with_one = TraceWriter(path)
    with_one.span("train", TRAINER, 0.0, 1.0)
    with_one.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b',{"name":"tr')  # a process killed mid-write
    assert len(read_trace(path)) == 2  # readers skip the torn line
    again = TraceWriter(path)
    assert path.read_bytes() == whole
    again.span("publish", TRAINER, 1.0, 1.5)
    again.close()
    assert [e["name"] for e in loads_closed(path)] == ["thread_name", "train", "thread_name", "publish"]


def test_every_nth_group_is_traced_and_lanes_are_reused(tmp_path):
    w = TraceWriter(tmp_path / "trace.json", group_every=4)
    assert [p for p in range(10) if w.wants(p)] == [0, 4, 8]
    a, b = w.open_lane(), w.open_lane()
    w.close_lane(a)
    assert (a, b, w.open_lane(), w.open_lane()) == (0, 1, 0, 2)


def test_the_cap_stops_rollout_spans_only_and_says_where(tmp_path):
    path = tmp_path / "trace.json"
    w = TraceWriter(path, max_events=2)
    for i in range(4):
        w.span("model_call", 0, i, i + 0.5)
        w.span("train", TRAINER, i, i + 0.5)
    assert not w.wants(0)
    w.close()
    events = read_trace(path)
    assert [e["ts"] for e in events if e["name"] == "model_call"] == [0, 1_000_000]
    assert len([e for e in events if e["name"] == "train"]) == 4
    [cut] = [e for e in events if e["name"] == "trace truncated"]
    assert cut["ts"] == 2_000_000 and cut["args"] == {"rollout_events": 2, "max_events": 2}


def test_a_disabled_writer_writes_nothing(tmp_path):
    w = TraceWriter(tmp_path / "trace.json", enabled=False)
    w.span("train", TRAINER, 0.0, 1.0)
    w.close()
    assert not (tmp_path / "trace.json").exists() and not w.wants(0)


def test_an_unwritable_trace_warns_and_stops(tmp_path, caplog):
    (tmp_path / "trace.json").mkdir()  # a directory where the file should be
    w = TraceWriter(tmp_path / "trace.json")
    w.span("train", TRAINER, 0.0, 1.0)
    w.close()
    assert w.stopped is not None and "cannot write" in caplog.text


def test_group_every_is_at_least_one(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        TraceWriter(tmp_path / "trace.json", group_every=0)


def test_a_resumed_writer_goes_on_with_the_lanes_and_names_of_its_state(tmp_path):
    path = tmp_path / "trace.json"
    first = TraceWriter(path)
    a, b = first.open_lane(), first.open_lane()
    first.span("startup", b, 0.0, 1.0)
    first.close_lane(a)
    state = first.state_dict()
    first.close()
    again = TraceWriter(path)
    again.load_state_dict(state)
    assert again.open_lane() == a and again.open_lane() == 2
    again.span("rollout", b, 0.0, 2.0)
    again.close()
    assert [e["name"] for e in loads_closed(path)] == ["thread_name", "startup", "rollout"]  # lane 1 named once
    path.unlink()  # a lost trace: the next writer names its tracks again
    lost = TraceWriter(path)
    lost.load_state_dict(state)
    lost.span("rollout", b, 0.0, 2.0)
    lost.close()
    assert [e["name"] for e in loads_closed(path)] == ["thread_name", "rollout"]


def test_platoon_trace_writes_a_closed_copy_that_strict_json_reads(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from platoon.cli import app

    run = tmp_path / "run"
    run.mkdir()
    w = TraceWriter(run / "trace.json")
    w.span("train", TRAINER, 0.0, 1.0, datums=4)
    w.close()
    (run / "trace.json").write_bytes((run / "trace.json").read_bytes() + b',{"name":"tr')  # a torn last line
    with pytest.raises(json.JSONDecodeError):
        json.loads((run / "trace.json").read_text())  # the live file is an unterminated array
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["trace", str(run)])
    assert result.exit_code == 0 and result.stdout == "run.trace.json\n"
    assert json.loads((tmp_path / "run.trace.json").read_text()) == read_trace(run / "trace.json")
    assert CliRunner().invoke(app, ["trace", str(run), "-o", str(tmp_path / "x.json")]).exit_code == 0
    assert [e["name"] for e in json.loads((tmp_path / "x.json").read_text())] == ["thread_name", "train"]
    refused = CliRunner().invoke(app, ["trace", str(tmp_path)])
    assert refused.exit_code == 64 and "no trace.json there" in refused.output
