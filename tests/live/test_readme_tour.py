"""The README's tour, run in order as a newcomer runs it (with small step counts): every command exits 0 and prints
no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow]
ROOT = Path(__file__).parents[2]


def tour() -> list[str]:
    """The tour's commands, in order: the README's ``## A tour`` block, comments and ``source`` left out."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## A tour\n+```bash\n(.*?)```", text, re.S).group(1)
    lines = [re.split(r"\s+#", line, maxsplit=1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "source "))]


def small(command: str) -> str:
    """``command`` with a small step count: a few steps where it names its own, two where a training run names none."""
    command = re.sub(r"--steps \d+", "--steps 3", command)
    command = re.sub(r"train\.max_training_steps=\d+", "train.max_training_steps=2", command)
    if re.match(r"platoon (train|sft)\b", command) and "--steps" not in command and "max_training_steps" not in command:
        command += " --steps 2"
    return command


def test_the_tour_is_the_readme_s_and_keeps_its_order():
    commands = tour()
    assert commands[0].startswith("platoon simulate") and any(c.startswith("platoon sft") for c in commands)
    shown = next(i for i, c in enumerate(commands) if c.startswith("platoon config show"))
    assert shown < next(i for i, c in enumerate(commands) if c.startswith("platoon prestage my-run.yaml"))


def test_the_readme_tour_runs_in_order(tmp_path):
    (tmp_path / "extensions").symlink_to(ROOT / "extensions")  # the tour names the TextCraft example by its path
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    for command in map(small, tour()):
        if "--ray" in command:
            continue  # Ray's sweeps have tests of their own (tests/sim/test_sweep_ray.py); a local Ray here costs a minute
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        said = f"$ {command}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, said
        assert "Traceback" not in done.stdout + done.stderr, said
