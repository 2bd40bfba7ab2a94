"""A sweep's process pool ends with ``platoon simulate``, however it ends: ``SIGKILL`` included (``platoon.lifeline``:
each pool process arms the kernel's parent-death signal as it starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from process_tree import reap_tree, tree_of


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_sigkill_of_a_sweep_ends_its_pool_processes(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "simulate", "--preset", "textcraft-synth", "--steps",
                             "100000", "--sweep", "train.permit_release=rollout,group", "--out", str(tmp_path / "s")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(tree) < 2 and time.monotonic() < deadline and proc.poll() is None:
            tree = tree_of(proc.pid)
            time.sleep(0.05)
        assert len(tree) >= 2, f"the sweep started {len(tree)} pool process(es): {proc.stderr.read().decode()[-2000:]}"
        time.sleep(0.5)  # the points running
        tree.update(tree_of(proc.pid))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    left, took = reap_tree(tree, 10.0)
    assert left == [], f"still running {took:.1f}s after the kill: {[tree[p] for p in left]}"
    assert took < 2.0, took
