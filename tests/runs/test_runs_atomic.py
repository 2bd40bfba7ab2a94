"""Atomic state writes and verified JSON reads (platoon.runs.atomic)."""

from __future__ import annotations

import hashlib
import json
import math
import os

import pytest

from platoon.runs.atomic import (
    CorruptFileError,
    read_json_state,
    sha256_file,
    write_atomic,
    write_json_atomic,
)


def test_write_atomic_replaces_whole_file_and_leaves_no_partial(tmp_path):
    target = tmp_path / "sub" / "state.bin"
    write_atomic(target, b"old contents that are longer")
    write_atomic(target, "new")
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(target.parent)) == ["state.bin"]


def test_write_atomic_failure_keeps_old_file_and_removes_partial(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    write_atomic(target, b"old")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_write_json_atomic_is_compact_with_newline_and_returns_sha(tmp_path):
    target = tmp_path / "s.json"
    sha = write_json_atomic(target, {"format": 2, "xs": [1, 2], "name": "é"})
    data = target.read_bytes()
    assert data == '{"format":2,"xs":[1,2],"name":"é"}\n'.encode()
    assert sha == hashlib.sha256(data).hexdigest() == sha256_file(target)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_write_json_atomic_refuses_nan_and_writes_nothing(tmp_path, bad):
    target = tmp_path / "s.json"
    with pytest.raises(ValueError):
        write_json_atomic(target, {"x": bad})
    assert list(tmp_path.iterdir()) == []


def test_read_json_state_round_trip_with_checksum_and_format(tmp_path):
    target = tmp_path / "dispatch.json"
    sha = write_json_atomic(target, {"format": 2, "next_position": 7})
    assert read_json_state(target, sha256=sha, formats={1, 2}) == {"format": 2, "next_position": 7}
    assert read_json_state(target, sha256=sha.upper()) == {"format": 2, "next_position": 7}


def test_read_json_state_missing(tmp_path):
    with pytest.raises(CorruptFileError) as info:
        read_json_state(tmp_path / "gone.json")
    assert info.value.path == tmp_path / "gone.json"
    assert str(info.value) == f"{tmp_path / 'gone.json'}: missing"


def test_read_json_state_truncated(tmp_path):
    target = tmp_path / "s.json"
    sha = write_json_atomic(target, {"format": 1, "tasks": {"a": [1, 2, 3]}})
    target.write_bytes(target.read_bytes()[:10])
    with pytest.raises(CorruptFileError, match=r"s\.json: truncated or unreadable JSON .*checksum mismatch"):
        read_json_state(target, sha256=sha)
    target.write_bytes(b"")
    with pytest.raises(CorruptFileError, match="empty file"):
        read_json_state(target)


def test_read_json_state_checksum_mismatch_of_valid_json(tmp_path):
    target = tmp_path / "s.json"
    sha = write_json_atomic(target, {"format": 1, "n": 1})
    target.write_bytes(json.dumps({"format": 1, "n": 2}).encode())
    with pytest.raises(CorruptFileError, match=rf"s\.json: checksum mismatch \(expected {sha}, found "):
        read_json_state(target, sha256=sha)


def test_read_json_state_unknown_format(tmp_path):
    target = tmp_path / "s.json"
    write_json_atomic(target, {"format": 3})
    with pytest.raises(CorruptFileError, match=r"unknown format 3 \(this reader knows 1, 2\)"):
        read_json_state(target, formats={1, 2})
    write_json_atomic(target, {"format": True})
    with pytest.raises(CorruptFileError, match="unknown format True"):
        read_json_state(target, formats={1, 2})
    # without a format field, or without formats to check against, the file reads
    write_json_atomic(target, {"state": 1})
    assert read_json_state(target, formats={1, 2}) == {"state": 1}
    write_json_atomic(target, {"format": 3})
    assert read_json_state(target) == {"format": 3}


def test_corrupt_file_error_is_a_value_error():
    assert issubclass(CorruptFileError, ValueError)
