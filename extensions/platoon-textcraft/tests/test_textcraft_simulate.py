"""``platoon simulate`` on a config that names the extension's environments: their real tasks, labelled by their
columns; an environment that cannot open is a config error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from platoon.sim.setup import build_tasks, load_sim_config
from platoon_textcraft.synth import TextCraftSynth

CONFIG = """\
train:
  model_name: tiny
  renderer_name: role_colon
  max_training_steps: 3
  batch_size: 8
  max_concurrent_rollouts: 64
  label_by: difficulty
  workflow_config: {group_size: 4}
environments:
  - name: textcraft
    env: textcraft-synth
    dataset_kwargs: {split_name: [train-easy, train-extreme]}
sim:
  preset: textcraft-synth
"""


def test_the_simulator_plays_textcraft_synth_s_own_tasks(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(CONFIG)
    tasks = build_tasks(load_sim_config(tmp_path / "run.yaml"))
    env = TextCraftSynth()
    assert list(tasks.pool.task_ids) == env.task_ids("train-easy") + env.task_ids("train-extreme")
    assert {r.label for r in tasks.pool.rows} == {"easy", "extreme"}


def test_platoon_simulate_runs_it(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(CONFIG)
    run = subprocess.run([sys.executable, "-m", "platoon", "simulate", str(tmp_path / "run.yaml"), "--out",
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    pool = json.loads((tmp_path / "run" / "tasks" / "pool.json").read_text())["tasks"]
    assert pool[0][0].startswith("train-") and {label for _, _, label in pool} == {"easy", "extreme"}
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == [0, 1, 2]  # three steps trained


def test_textcraft_without_recipes_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(CONFIG.replace("env: textcraft-synth", "env: textcraft")
                                       .replace("[train-easy, train-extreme]", "train"))
    run = subprocess.run([sys.executable, "-m", "platoon", "simulate", str(tmp_path / "run.yaml"), "--out",
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 78
    assert "environments.0.service_kwargs: textcraft cannot open: RecipeError: textcraft needs recipes_dir" in \
        run.stderr
