"""lock.json's component records as platoon 0.4.0 writes them: ``resolved``, ``source``, ``distribution``,
``distribution_version`` and ``entry_point`` for every component a config names, core's included."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from config_kit import complete, train_config
from typer.testing import CliRunner

import platoon
from platoon.cli import app
from platoon.config import EnvironmentConfig, RunConfig, registry, resolve_components
from platoon.config.components import CORE_CLASS_PATHS
from platoon.live.envs import resolve_environment
from platoon.policy.admission.rules import CORE_RULES
from platoon.policy.samplers.core import CORE_CLASSES

_names = itertools.count()

MODULE = """
from platoon.config.registry import task_sampler


class Sampler:
    adaptive = False
    def next(self, ctx): ...
    def state_dict(self): return {}
    def load_state_dict(self, state): ...


@task_sampler("{name}")
class Registered(Sampler):
    pass


class Env:
    def __init__(self, size: int = 3): ...
    def task_ids(self, split): return ["a"]
    def task(self, task_id): ...
    def episode(self, task_id): ...
"""

FIELDS = ("resolved", "source", "distribution", "distribution_version", "entry_point")


def fields(record) -> tuple:
    data = record.to_json()
    return tuple(data[k] for k in FIELDS)


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module on the path that no installed distribution holds; yields its name (also its sampler's name)."""
    name = f"lock_rec_mod_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(MODULE.replace("{name}", name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    registry.unregister("task_sampler", name)


@pytest.fixture
def extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An installed distribution ``lock-rec-ext`` 1.2.3 whose ``platoon.extensions`` entry point imports a module that
    registers a sampler; yields the module's name (also the sampler's name)."""
    name = f"lock_rec_ext_{next(_names)}"
    site = tmp_path / "site"
    info = site / "lock_rec_ext-1.2.3.dist-info"
    info.mkdir(parents=True)
    (site / f"{name}.py").write_text(MODULE.replace("{name}", name))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lock-rec-ext\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[platoon.extensions]\nlock_rec = {name}\n")
    (info / "RECORD").write_text(f"{name}.py,,\nlock_rec_ext-1.2.3.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    registry.load_extensions(force=True)
    yield name
    sys.modules.pop(name, None)
    registry.unregister("task_sampler", name)


def test_each_core_class_path_names_the_class_the_runtimes_run() -> None:
    runtime = {("task_sampler", n): c for n, c in CORE_CLASSES.items()}
    runtime |= {("group_admission", n): c for n, c in CORE_RULES.items()}
    runtime[("environment", "platoon-number-search")] = type(resolve_environment("platoon-number-search"))
    assert set(CORE_CLASS_PATHS) == set(runtime)
    for key, path in CORE_CLASS_PATHS.items():
        assert registry.import_ref(path) is runtime[key], key


def test_core_components_are_core_s() -> None:
    cfg = RunConfig(
        train=train_config(group_admission="informative"),
        environments=[EnvironmentConfig(name="a", task_sampler="pass_rate"), EnvironmentConfig(name="b")],
    )
    core = ("platoon", platoon.__version__, None)
    records = {(r.kind, r.ref): fields(r) for r in resolve_components(cfg)}
    assert records == {
        ("task_sampler", "auto"): ("platoon.policy.samplers.weighted:WeightedSampler",) * 2 + core,
        ("task_sampler", "pass_rate"): ("platoon.policy.samplers.pass_rate:PassRateSampler",) * 2 + core,
        ("task_sampler", "uniform"): ("platoon.policy.samplers.uniform:UniformSampler",) * 2 + core,
        ("group_admission", "informative"): ("platoon.policy.admission:Informative",) * 2 + core,
        ("environment", "platoon-number-search"): ("platoon.live.envs.number_search:NumberSearch",) * 2 + core,
    }


def test_a_module_class_component_no_distribution_holds(module: str) -> None:
    cfg = RunConfig(
        train=train_config(task_sampler=f"{module}:Registered"),
        environments=[EnvironmentConfig(name="a", env=f"{module}:Env", service_kwargs={"size": 4}),
                      EnvironmentConfig(name="b", env=f"{module}:Env")],
    )
    records = {r.kind: r for r in resolve_components(cfg)}
    assert fields(records["task_sampler"]) == (f"{module}:Registered",) * 2 + (None, None, None)
    env = records["environment"].to_json()
    assert (env["ref"], env["core"], env["environments"]) == (f"{module}:Env", None, ["a", "b"])
    assert env["options"] == {"a": {"size": 4}, "b": {}}
    assert tuple(env[k] for k in FIELDS) == (f"{module}:Env",) * 2 + (None, None, None)


def test_a_name_a_package_registers_has_no_entry_point(module: str) -> None:
    cfg = RunConfig(train=train_config(task_sampler=module), environments=[EnvironmentConfig(name="a", package=module)])
    [record] = [r for r in resolve_components(cfg) if r.kind == "task_sampler"]
    assert fields(record) == (f"{module}:Registered",) * 2 + (None, None, None)


def test_a_component_an_entry_point_registered(extension: str) -> None:
    cfg = RunConfig(train=train_config(task_sampler=extension))
    [record] = [r for r in resolve_components(cfg) if r.kind == "task_sampler"]
    assert fields(record) == (
        f"{extension}:Registered", f"{extension}:Registered", "lock-rec-ext", "1.2.3", "platoon.extensions:lock_rec"
    )
    by_path = RunConfig(train=train_config(task_sampler=f"{extension}:Registered"))
    [record] = [r for r in resolve_components(by_path) if r.kind == "task_sampler"]
    assert fields(record)[2:] == ("lock-rec-ext", "1.2.3", None)  # the module's distribution, no entry point


def test_an_editable_install_holds_the_modules_under_its_directory(tmp_path: Path, module: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "editable-site"
    info = site / "lock_rec_dev-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lock-rec-dev\nVersion: 0.1\n")
    (info / "direct_url.json").write_text(json.dumps({"url": tmp_path.as_uri(), "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(site))
    cfg = RunConfig(train=train_config(task_sampler=f"{module}:Registered"))
    [record] = [r for r in resolve_components(cfg) if r.kind == "task_sampler"]
    assert fields(record)[2:] == ("lock-rec-dev", "0.1", None)


def test_lock_json_records_every_component_with_its_origin(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(complete("""
        train: {max_training_steps: 1, batch_size: 2, group_admission: informative, workflow_config: {group_size: 2}}
        environments: [{name: a}, {name: b, task_sampler: pass_rate}]
    """))
    result = CliRunner().invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.stdout + result.stderr
    components = json.loads((tmp_path / "run" / "lock.json").read_text())["components"]
    assert [(c["kind"], c["ref"]) for c in components] == [
        ("task_sampler", "auto"), ("task_sampler", "uniform"), ("task_sampler", "pass_rate"),
        ("group_admission", "informative"), ("environment", "platoon-number-search"),
    ]
    for c in components:
        assert c["resolved"] == c["source"] and ":" in c["resolved"], c
        assert (c["distribution"], c["distribution_version"], c["entry_point"]) == ("platoon", platoon.__version__,
                                                                                    None), c
