"""A disk that fills up mid-run (a small tmpfs): ``platoon train`` exits 1 naming the file it could not write, its
last checkpoint stands, and once there is room ``--resume`` goes on with every step once."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from platoon.runs.jsonl import read_jsonl

pytestmark = [pytest.mark.live, pytest.mark.slow]
CONFIG = """\
environments:
  - service_kwargs: {ranges: [4, 8]}
train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 400, batch_size: 2, max_staleness: 1,
        workflow_config: {group_size: 2}}
checkpoint: {recovery_every: 1, keep_recovery: 2}
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs (mounting one needs root, as CI's machine has it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write zeros until the disk has no room left."""
    filler = disk / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (1 << 20))
            f.flush()
    return filler


def test_a_full_disk_mid_run_exits_1_naming_the_file_and_a_resume_goes_on_once_there_is_room(tmp_path, small_disk):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    run = small_disk / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "platoon", "train", str(config), "--out", str(run)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(read_jsonl(run / "checkpoints.jsonl")) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    filler = fill(small_disk)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-3000:]
    said = " ".join(stderr.split())
    assert f"the disk is full, writing {run}/" in said and "No space left on device" in said
    assert "free some space, then go on with --resume" in said and "Traceback" not in stderr

    filler.unlink()
    resumed = subprocess.run([sys.executable, "-m", "platoon", "train", "--resume", str(run), "--steps", "30"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if any(k.startswith("train/") for k in r)]
    assert steps == list(range(30))
