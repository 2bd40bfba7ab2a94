"""Every process platoon starts for rollouts ends with the process that started it (``platoon.lifeline``):
the parent-death signal and its race, the parent watch, and a ``SIGKILL`` of ``platoon train`` under both start
methods, after which no process it started survives (checked by pid, on the tree recorded before the kill)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from process_tree import children, reap_tree, tree_of, wait_gone

LINUX = sys.platform.startswith("linux")


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, text=True)


# ------------------------------------------------------------------------------------------ one child, one parent
@pytest.mark.skipif(not LINUX, reason="the parent-death signal is Linux's")
def test_a_child_dies_with_its_parent_by_the_kernels_signal():
    # the middle process starts a child that arms the signal (naming the middle as its parent), then sleeps
    middle = _python("""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import os, sys, time; from platoon.lifeline import die_with_parent; "
            "die_with_parent(int(sys.argv[1])); print('armed', flush=True); time.sleep(60)", str(os.getpid())],
            stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "armed"
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    child = int(middle.stdout.readline())
    os.kill(middle.pid, signal.SIGKILL)
    middle.wait()
    left, took = wait_gone([child], 5.0)
    assert left == [], f"the child outlived its parent by {took:.1f}s"


def test_a_child_whose_parent_is_already_gone_ends_at_once():
    # the race: the pid it was told is not its parent (any more), so it exits 1 before doing anything
    done = subprocess.run([sys.executable, "-c", "import sys; from platoon.lifeline import "
                           "die_with_parent; die_with_parent(1 if __import__('os').getppid() != 1 else 2); "
                           "print('ran on')"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "ran on" not in done.stdout


def test_the_watch_ends_a_process_its_grace_after_its_trainer_is_gone(tmp_path):
    # the portable fallback, without the kernel's signal: the watched "trainer" is a sleeping process we kill
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    leftover = tmp_path / "ready"
    leftover.write_text("x")
    child = _python("""
        import os, sys, time
        from platoon.lifeline import watch_parent
        watch_parent(os.getppid(), int(sys.argv[1]), 0.5, [sys.argv[2]])
        print("watching", flush=True)
        time.sleep(60)  # a rollout that never unwinds
    """, str(trainer.pid), str(leftover))
    assert child.stdout.readline().strip() == "watching"
    time.sleep(0.3)
    assert child.poll() is None  # the trainer lives: so does the child
    trainer.kill()
    trainer.wait()
    began = time.monotonic()
    assert child.wait(timeout=10) == 1
    took = time.monotonic() - began
    assert 0.4 <= took < 3.0, took  # its grace (0.5 s), plus a poll
    assert not leftover.exists()


# -------------------------------------------------------------------------------------- a killed platoon train
def _kill_mid_run(tmp_path, method: str, signum: int = signal.SIGKILL,
                  ended: list | None = None) -> tuple[dict[int, str], list[int], float]:
    """Start ``platoon train`` with rollout workers (``method``; ``ray``: rollout actors on a local Ray instance), send
    it ``signum`` while a worker runs; the tree it
    had started, what of it still runs after 10 s, and how long the rest took to end. ``ended`` gets the process's
    exit code and its stderr, when it ended by itself within a minute of the signal."""
    run, scratch = tmp_path / "run", tmp_path / "scratch"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PLATOON_NODE_SCRATCH": str(scratch)}
    settings = ["train.batch_size=2", "environments.0.workflow_config.group_size=2", "model.d_model=16",
                "model.n_layers=1", "eval.every=1000"]
    settings += (["train.workflow_config.rollout_isolation=ray", "train.ray.actor_cpus=0.5"] if method == "ray" else
                 ["train.workflow_config.rollout_isolation=process", f"train.workflow_config.worker_start_method={method}"])
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", "--out", str(run), "--steps", "1000",
                             *[a for s in settings for a in ("--set", s)]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            tree.update(tree_of(proc.pid))
            now = tree_of(proc.pid)
            worker_now = any(("spawn_main" in c) if method == "exec" else ("RolloutActor" in c) if method == "ray" else
                             ("forkserver" in c and pid not in children(proc.pid)) for pid, c in now.items())
            if worker_now:  # a training rollout's or the first evaluation's: a worker either way
                tree.update(now)
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signum)
        if ended is not None:
            _, err = proc.communicate(timeout=60)
            ended += [proc.returncode, err.decode()]
    finally:
        proc.kill()
        proc.wait()
    left, took = reap_tree(tree, 10.0)
    return tree, left, took


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("method", ["exec", "forkserver", "ray"])
def test_sigkill_of_platoon_train_ends_every_process_it_started(tmp_path, method):
    if method == "ray":
        pytest.importorskip("ray")
    tree, left, took = _kill_mid_run(tmp_path, method)
    print(f"\n{method}: {len(tree)} process(es) started, all ended {took:.2f}s after the kill:", *tree.values(), sep="\n  ")
    assert tree, "the run started no process"
    assert left == [], f"still running {took:.1f}s after the kill: {[tree[p] for p in left]}"
    assert took < 5.0, took


@pytest.mark.live
@pytest.mark.slow
def test_sigterm_of_platoon_train_unwinds_it_and_ends_every_process_it_started(tmp_path):
    ended: list = []
    tree, left, took = _kill_mid_run(tmp_path, "exec", signal.SIGTERM, ended)
    returncode, err = ended
    assert returncode == 1 and "Traceback" not in err, err[-2000:]
    assert re.search(r"terminated \(SIGTERM\); saved: checkpoint \d{6} \(step \d+\) in \S+; go on with: "
                     r"platoon train --resume \S+", err), err[-2000:]
    assert tree and left == [], f"still running {took:.1f}s after it ended: {[tree[p] for p in left]}"
