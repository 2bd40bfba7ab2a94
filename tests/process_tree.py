"""Process trees by pid, for the tests that check no process platoon starts outlives its run (``platoon.lifeline``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["SIGTERM_DURING_A_WRITE", "alive", "children", "reap_tree", "tree_of", "wait_gone"]


def tree_of(root: int) -> dict[int, str]:
    """The descendants of ``root`` now, by pid, with their command lines."""
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, kids):
                if child not in out:
                    try:
                        out[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    except OSError:
                        out[child] = "?"
                    todo.append(child)
    return out


def alive(pids) -> list[int]:
    """The pids that still run (a zombie, which has ended and waits for its reaper, does not)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def wait_gone(pids, within_s: float) -> tuple[list[int], float]:
    began = time.monotonic()
    while (left := alive(pids)) and time.monotonic() - began < within_s:
        time.sleep(0.02)
    return left, time.monotonic() - began


def reap_tree(pids, within_s: float) -> tuple[list[int], float]:
    """Wait up to ``within_s`` for ``pids`` to end, then SIGKILL those that did not (a test never leaves them
    behind, whatever it asserts next); the pids that were left, and the seconds waited."""
    import signal

    left, took = wait_gone(pids, within_s)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left, took


def children(pid: int) -> set[int]:
    """``pid``'s own children (a forked worker is a grandchild: its fork server's child)."""
    out: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.update(map(int, Path(f"/proc/{pid}/task/{tid}/children").read_text().split()))
        except OSError:
            pass
    return out


#: ``python -c SIGTERM_DURING_A_WRITE N platoon-args...``: the CLI, which SIGTERMs itself after writing half of its
#: N-th checkpoint file (the tests of a signal inside a checkpoint's write, simulated and live).
SIGTERM_DURING_A_WRITE = """
import os, signal, sys
import platoon.runs.checkpoints as checkpoints
from platoon.cli import main

real, writes, nth = checkpoints._write_synced, [], int(sys.argv[1])

def write_synced(path, data):
    writes.append(path)
    if len(writes) == nth:
        real(path, data[: len(data) // 2])  # half of this checkpoint file written, then the signal
        os.kill(os.getpid(), signal.SIGTERM)
    return real(path, data)

checkpoints._write_synced = write_synced
sys.argv = ["platoon", *sys.argv[2:]]
main()
"""
