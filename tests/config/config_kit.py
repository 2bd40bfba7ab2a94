"""Configs for tests: the keys every config must set, added under a test's own (tests/conftest.py puts this folder on
``sys.path``, so test modules import it by its plain name)."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from platoon.config import TrainConfig

REQUIRED: dict[str, Any] = {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 10}
"""The train keys every config sets (a model, a renderer, a plan)."""


def complete(text: str) -> str:
    """The YAML ``text`` with ``REQUIRED`` under its own train keys (when its train section is a mapping or absent)."""
    data = yaml.safe_load(textwrap.dedent(text))
    data = {} if data is None else data
    if isinstance(data, dict) and isinstance(data.setdefault("train", {}), dict):
        data["train"] = {**REQUIRED, **data["train"]}
    return yaml.safe_dump(data, sort_keys=False)


def train_config(**keys: Any) -> TrainConfig:
    """A ``TrainConfig`` of ``keys`` over ``REQUIRED``."""
    return TrainConfig(**{**REQUIRED, **keys})
