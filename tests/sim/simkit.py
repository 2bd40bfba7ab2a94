"""Small simulated runs for the simulator's tests: a config built in code, a run, and log comparisons."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from platoon.config.loader import check_config
from platoon.config.models import RunConfig
from platoon.runs import read_jsonl
from platoon.sim.run import SimRun

# max_staleness 1 and keep_recovery 3 are this project's defaults before 0.4.0's (null, null) became its own: the
# tests were written against them, and a bound on staleness and on retention is what they exercise.
BASE: dict[str, Any] = {
    "train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 6, "batch_size": 4,
              "max_concurrent_rollouts": 16, "max_staleness": 1},
    "checkpoint": {"recovery_every": 2, "keep_recovery": 3},
    "eval": {"every": 2, "at_start": True},
    "environments": [{"name": "env", "workflow_config": {"group_size": 4}}],
    "sim": {
        "rollout": {"duration": {"dist": "exponential", "mean_s": 10.0}},
        "trainer": {"step_s": 5.0, "per_datum_s": 0.1, "publish_s": 1.0},
        "population": {"tasks": 40, "heldout": 20},
    },
}


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and "dist" not in value:
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def config(**sections: Any) -> RunConfig:
    """``BASE`` with ``sections`` (train=..., checkpoint=..., eval=..., sim=..., environments=...) deep-merged in,
    validated."""
    cfg = RunConfig.model_validate(merge(BASE, sections))
    check_config(cfg)
    return cfg


def run(cfg: RunConfig, path: Path, until: float | None = None, log=None) -> SimRun:
    """A new run of ``cfg`` at ``path``, simulated to its end (or to simulated time ``until``, then closed)."""
    r = SimRun.create(cfg, path, log=log or (lambda level, message: None))
    r.run(until)
    r.close()
    return r


def resume(path: Path, steps: int | None = None) -> SimRun:
    r = SimRun.resume(path, steps=steps, log=lambda level, message: None)
    r.run()
    return r


LOGS = ("metrics.jsonl", "tasks/events.jsonl", "trace.json")


def timed_out(row: dict) -> dict:
    """A metrics row without the one figure of a simulated run that is not deterministic: the samplers' wall time
    (``train/sampler/decision_ms``, its maximum and per-environment forms, docs/metrics.md)."""
    return {k: v for k, v in row.items() if "decision_ms" not in k}


def deterministic(path: Path) -> bytes:
    """The bytes of a log (``metrics.jsonl`` without the samplers' wall time, see ``timed_out``)."""
    if path.name != "metrics.jsonl":
        return path.read_bytes()
    return "\n".join(json.dumps(timed_out(row), sort_keys=True) for row in read_jsonl(path)).encode()


def differing(a: Path, b: Path, names: tuple[str, ...] = LOGS) -> list[str]:
    """The files among ``names`` that differ between run directories ``a`` and ``b`` (see ``deterministic``)."""
    return [n for n in names if deterministic(a / n) != deterministic(b / n)]


def checkpoint_files(path: Path) -> dict[str, bytes]:
    """Every file under ``checkpoints/`` by relative name (their bytes)."""
    root = path / "checkpoints"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
