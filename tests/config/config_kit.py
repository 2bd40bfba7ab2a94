"""Configs for tests: the keys every config must set, added under a test's own (tests/conftest.py puts this folder on
``sys.path``, so test modules import it by its plain name)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import yaml

from platoon.config import RunConfig, TrainConfig, load_config

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


SCHEMA_BASE: dict[str, Any] = {"train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 100}}
"""A config of the schema's defaults (0.4.0's, what a config file starts from) and a plan of 100 steps."""


def schema_config(overrides: Sequence[str] = ()) -> RunConfig:
    """``SCHEMA_BASE`` with ``overrides``, loaded as a file would be: the base of the tests that pin what a key does
    at the schema's defaults, whatever the embedded default (``load_config(None)``, the CPU demo) sets."""
    return load_config(None, overrides, data=SCHEMA_BASE)
