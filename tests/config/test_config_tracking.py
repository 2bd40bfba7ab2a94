"""The trackers of a config (``stats.loggers``, 0.4.0's ``stats.wandb``, ``stats.mlflow``): which are chosen, and
what is refused at validation (exit 78), every problem in one report."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from config_kit import complete

from platoon.config import ConfigError, load_config, tracking
from platoon.config.tracking import MlflowConfig, WandbConfig, chosen_loggers


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(complete(textwrap.dedent(text)))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def test_loggers_are_chosen_by_name_and_by_0_4_0_s_wandb_project():
    assert chosen_loggers([], WandbConfig()) == []
    assert chosen_loggers(["mlflow", "tensorboard"], WandbConfig()) == ["tensorboard", "mlflow"]
    assert chosen_loggers([], WandbConfig(project="p")) == ["wandb"]  # 0.4.0's meaning: a project logs to W&B
    assert chosen_loggers([], WandbConfig(project="p", mode="disabled")) == []


def test_a_logger_whose_package_is_missing_is_refused_naming_its_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("wandb", "sqlalchemy") else real(name, *a))
    assert problems(tmp_path, """
        stats: {loggers: [tensorboard, mlflow], wandb: {project: mine}}
    """) == [
        "stats.wandb.project: wandb is chosen (stats.wandb.project is set) but not installed: "
        "pip install 'platoon[wandb]'",
        "stats.loggers: mlflow is chosen (stats.loggers lists it) but not installed: pip install 'platoon[mlflow]'",
    ]


def test_a_file_store_and_a_disabled_but_listed_wandb_are_refused(tmp_path):
    assert problems(tmp_path, """
        stats: {loggers: [wandb, mlflow], wandb: {mode: disabled}, mlflow: {tracking_uri: "file:///tmp/mlruns"}}
    """) == [
        "stats.mlflow.tracking_uri: 'file:///tmp/mlruns' is an MLflow file store, which cannot hold a metric that is "
        "also a group of others (train/sampler/draws beside train/sampler/draws/explore); use a database "
        "(sqlite:////path/mlflow.db) or a server (http://host:5000)",
        "stats.wandb.mode: disabled, while stats.loggers lists wandb: drop one of them",
    ]


def test_an_unknown_logger_or_one_named_twice_is_refused(tmp_path):
    said = problems(tmp_path, "stats: {loggers: [tensorboard, comet, tensorboard]}")
    assert len(said) == 1 and said[0].startswith("stats.loggers.1: ") and "tensorboard" in said[0]
    said = problems(tmp_path, "stats: {loggers: [tensorboard, tensorboard]}")
    assert said == ["stats.loggers: names a logger twice: ['tensorboard', 'tensorboard']"]


def test_the_sections_take_0_4_0_s_wandb_keys_and_mlflow_s_own():
    cfg = load_config(None, ["stats.wandb.project=p", "stats.wandb.tags=[a,b]", "stats.mlflow.experiment=e"])
    assert cfg.stats.wandb.tags == ["a", "b"] and cfg.stats.mlflow == MlflowConfig(experiment="e")
