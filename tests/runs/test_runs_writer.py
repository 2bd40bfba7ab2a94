"""The writer lock (platoon.runs.writer): one writer a run, a refusal that names the holder, and a dead writer's lock
that never blocks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from platoon.runs import RunBusyError, RunDir, WriterLock
from platoon.runs.writer import WRITER_FILE, stale_note


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    first = WriterLock.acquire(tmp_path, command="platoon simulate --out x")
    with pytest.raises(RunBusyError) as info:
        WriterLock.acquire(tmp_path)  # flock belongs to the open file: a second one in this process is refused too
    message = str(info.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in message and "platoon simulate --out x" in message
    assert info.value.holder["pid"] == os.getpid()
    first.release()
    assert (tmp_path / WRITER_FILE).read_bytes() == b""  # released: the record is emptied, the file stays
    with WriterLock.acquire(tmp_path) as again:
        assert again.previous is None and again.held
    assert not again.held


def test_create_takes_the_lock_before_it_looks_at_the_directory(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    holder = WriterLock.acquire(path)  # another process creating the same run, between its mkdir and its files
    with pytest.raises(RunBusyError):
        RunDir.create(path)
    holder.release()
    run = RunDir.create(path)  # an empty directory with a released writer.lock is still an empty run directory
    with pytest.raises(RunBusyError):
        RunDir.create(path)
    with pytest.raises(RunBusyError):
        WriterLock.acquire(path)
    run.release()
    with pytest.raises(FileExistsError, match="not empty"):
        RunDir.create(path)


def test_claim_leaves_a_directory_that_is_not_a_run_untouched(tmp_path):
    from platoon.runs import CorruptFileError

    with pytest.raises(CorruptFileError, match="lock.json"):
        RunDir.claim(tmp_path)
    assert not (tmp_path / WRITER_FILE).exists()


def test_a_record_without_a_lock_is_a_dead_writer_and_does_not_block(tmp_path):
    # a writer on another host that went down (or one that was killed) leaves its record but no lock
    dead = {"pid": 1, "host": "gpu-7", "command": "platoon train --resume r", "since": "2025-01-01T00:00:00+00:00"}
    (tmp_path / WRITER_FILE).write_text(json.dumps(dead))
    lock = WriterLock.acquire(tmp_path)
    assert lock.previous == dead
    assert "pid 1 on host gpu-7" in stale_note(lock) and "ended without releasing" in stale_note(lock)
    assert json.loads((tmp_path / WRITER_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_a_sigkilled_writer_leaves_no_lock(tmp_path):
    code = ("import sys, time; from platoon.runs import WriterLock; held = WriterLock.acquire(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(RunBusyError, match=f"pid {proc.pid} "):
            WriterLock.acquire(tmp_path)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    lock = WriterLock.acquire(tmp_path)  # the kernel dropped the dead process's lock
    assert lock.previous["pid"] == proc.pid
    lock.release()


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    lock = WriterLock.acquire(tmp_path)
    go_read, go_write = os.pipe()
    up_read, up_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that outlives its parent's hold on the lock (a worker of a killed writer)
        os.write(up_write, b"1" if not lock.held else b"0")
        os.read(go_read, 1)
        os._exit(0)
    try:
        assert os.read(up_read, 1) == b"1"  # the child is up and holds nothing
        assert lock.held
        lock.release()
        WriterLock.acquire(tmp_path).release()  # while the child lives on
    finally:
        os.write(go_write, b"x")
        os.waitpid(pid, 0)
        for fd in (go_read, go_write, up_read, up_write):
            os.close(fd)
