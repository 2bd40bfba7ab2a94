"""The simulator lists an extension's environment's training tasks (ids and columns); the built-in stays a stand-in
whose entries get a synthesized population."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from platoon.config import registry
from platoon.config.errors import ConfigError
from platoon.live.envs.base import Task
from platoon.sim.setup import build_tasks, load_sim_config

TRAIN = "train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 3, label_by: level}\n"


class Levels:
    """An environment of ``n`` tasks a split, each with a ``level`` column; it refuses ``n`` below 1."""

    def __init__(self, n: int = 3) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self.splits = {s: [f"{s}-{k}" for k in range(n)] for s in ("train", "hard", "val")} | {"empty": []}

    def task_ids(self, split: str) -> list[str]:
        if split not in self.splits:
            raise KeyError(f"unknown split {split!r}")
        return list(self.splits[split])

    def task(self, task_id: str) -> Task:
        return Task(task_id, task_id.split("-")[0], {"level": "high" if task_id.endswith("0") else "low"})


@pytest.fixture
def levels() -> Iterator[str]:
    registry.register("environment", "sim-levels", Levels)
    yield "sim-levels"
    registry.unregister("environment", "sim-levels")


def load(tmp_path: Path, entry: str):
    (tmp_path / "run.yaml").write_text(TRAIN + f"environments:\n  - {entry}\n")
    return build_tasks(load_sim_config(tmp_path / "run.yaml"))


def test_an_extension_s_environment_gives_its_tasks_and_columns(tmp_path: Path, levels: str) -> None:
    tasks = load(tmp_path, f"{{name: a, env: {levels}, service_kwargs: {{n: 2}}, "
                           "dataset_kwargs: {split_name: [train, hard]}}")
    assert tasks.pool.task_ids == ("train-0", "train-1", "hard-0", "hard-1")
    assert [r.label for r in tasks.pool.rows] == ["high", "low", "high", "low"]


def test_an_entry_s_own_tasks_and_the_built_in_keep_their_way(tmp_path: Path, levels: str) -> None:
    assert load(tmp_path, f"{{name: a, env: {levels}, tasks: [x, y]}}").pool.task_ids == ("x", "y")
    built_in = load(tmp_path, "{name: a, env: platoon-number-search}")
    assert built_in.pool.task_ids[:2] == ("a/0", "a/1") and len(built_in.pool) == 256


def test_an_environment_that_cannot_open_or_list_is_a_config_problem(tmp_path: Path, levels: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"{{name: a, env: {levels}, service_kwargs: {{n: 0}}}}")
    assert info.value.problems == [
        "environments.0.service_kwargs: sim-levels cannot open: ValueError: n must be at least 1"]
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"{{name: a, env: {levels}, dataset_kwargs: {{split_name: test}}}}")
    assert info.value.problems == ["environments.0.dataset_kwargs.split_name: unknown split 'test'"]
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"{{name: a, env: {levels}, dataset_kwargs: {{split_name: empty}}}}")
    assert info.value.problems == ["environments.0.dataset_kwargs.split_name: sim-levels lists no task in empty"]
