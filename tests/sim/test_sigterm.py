"""SIGTERM at any moment, a checkpoint's write included, loses nothing: ``platoon simulate --resume`` ends the run as
the run that never stopped ends (every step once, the same events and timeline), and the terminated command says
how to go on, exiting 1 without a traceback."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_tree import SIGTERM_DURING_A_WRITE

ARGS = ["simulate", "--preset", "textcraft-synth", "--set", "train.batch_size=4", "--set",
        "train.max_concurrent_rollouts=32", "--steps", "50", "--set", "checkpoint.recovery_every=1", "--set",
        "checkpoint.keep_recovery=2"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def platoon(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platoon", *args], capture_output=True, text=True, env=ENV,
                          timeout=120, **kwargs)


def outcome(run: Path) -> tuple[list[dict], str, str]:
    """The run's rows (decision times aside: they are wall-clock), events and timeline."""
    rows = [{k: v for k, v in json.loads(line).items() if "decision_ms" not in k}
            for line in (run / "metrics.jsonl").read_text().splitlines()]
    return rows, (run / "tasks" / "events.jsonl").read_text(), (run / "trace.json").read_text()


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[list[dict], str, str]:
    run = tmp_path_factory.mktemp("whole") / "run"
    assert platoon(*ARGS, "--out", str(run)).returncode == 0
    return outcome(run)


def terminated_then_resumed(run: Path, proc: subprocess.Popen) -> bool:
    """Wait for the terminated ``proc``; resume its run when it had begun (False: it ended or never began)."""
    _, err = proc.communicate(timeout=120)
    if proc.returncode == -signal.SIGTERM:  # before the handler was set, or after the run had ended and returned
        assert not (run / "lock.json").exists() or "finished" in json.loads((run / "lock.json").read_text())
        return False
    if proc.returncode == 0 or not (run / "checkpoints.jsonl").exists():
        return False
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert re.search(r"terminated \(SIGTERM\); saved: checkpoint \d{6} \(step \d+\) in \S+; go on with: "
                     r"platoon simulate --resume \S+", err), err[-2000:]
    resumed = platoon("simulate", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    return True


def running_span(run: Path) -> float:
    """Seconds a run of ``ARGS`` runs from its launch checkpoint to its end, here and now (at most 1)."""
    proc = subprocess.Popen([sys.executable, "-m", "platoon", *ARGS, "--out", str(run)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    began(run, proc)
    start = time.monotonic()
    proc.wait(120)
    return min(1.0, time.monotonic() - start)


def began(run: Path, proc: subprocess.Popen, within_s: float = 60.0) -> None:
    """Wait until ``proc`` has begun its run (its launch checkpoint is listed) or has ended."""
    deadline = time.monotonic() + within_s
    while not (run / "checkpoints.jsonl").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.slow
def test_sigterm_at_random_moments_then_resume_ends_as_the_whole_run(tmp_path, whole):
    rng = random.Random(0)
    span = running_span(tmp_path / "timed")  # the moments fall in the run however fast this machine runs it now
    resumed = 0
    for trial in range(30):
        run = tmp_path / f"trial-{trial}"
        proc = subprocess.Popen([sys.executable, "-m", "platoon", *ARGS, "--out", str(run)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if rng.random() < 0.2:  # some moments fall in the start-up, before or as the handler is set
            time.sleep(rng.uniform(0.0, 0.8))
        else:  # the rest in the run, timed from its start (so a loaded machine's slow imports move no moment)
            began(run, proc)
            time.sleep(rng.uniform(0.0, span))
        proc.send_signal(signal.SIGTERM)
        if terminated_then_resumed(run, proc):
            resumed += 1
            rows, events, trace = outcome(run)
            assert [r["step"] for r in rows] == [r["step"] for r in whole[0]]  # no step missing or twice
            assert (rows, events, trace) == whole, f"trial {trial}"
    assert resumed >= 10  # most trials hit the run while it ran




@pytest.mark.slow
@pytest.mark.parametrize("nth_write", [6, 13, 27])  # past the launch save (4 files a checkpoint)
def test_sigterm_during_a_checkpoint_write_loses_nothing(tmp_path, whole, nth_write):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_DURING_A_WRITE, str(nth_write), *ARGS, "--out", str(run)],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert terminated_then_resumed(run, proc)
    assert outcome(run) == whole
