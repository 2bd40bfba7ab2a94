"""The extension as platoon meets it: installed, found through its entry point, listed, refused when its requirement
on platoon excludes the running version, and resolved by name."""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import platoon
from platoon.config import registry
from platoon.environments import is_text_environment
from platoon.live.envs.catalog import list_environments
from platoon.live.envs.resolve import resolve_environment

EXTENSION = Path(__file__).resolve().parents[1]


def platoon_cli(*args: str, site: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    paths = [str(site)] * (site is not None) + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    inherited = {k: v for k, v in os.environ.items() if k != "PLATOON_IGNORE_EXTENSION_REQUIREMENTS"}
    environ = {**inherited, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200", "NO_COLOR": "1", **env}
    return subprocess.run([sys.executable, "-m", "platoon", *args], capture_output=True, text=True, env=environ,
                          timeout=120)


def test_the_distribution_and_its_entry_point() -> None:
    dist = md.distribution("platoon-textcraft")
    assert dist.version == "0.3.0"
    assert dist.metadata["License"] == "MIT"
    [req] = [Requirement(r) for r in dist.requires or [] if Requirement(r).name == "platoon"]
    assert (str(req.specifier), req.marker.evaluate({"extra": "platoon"})) == ("<0.5,>=0.4", True)
    [ep] = [e for e in dist.entry_points if e.group == registry.ENTRY_POINT_GROUP]
    assert (ep.name, ep.value) == ("textcraft", "platoon_textcraft")
    assert f'version = "{dist.version}"' in (EXTENSION / "pyproject.toml").read_text()


def test_both_environments_resolve_by_name_with_the_extension_s_origin() -> None:
    by_name = {e.name: e for e in list_environments()}
    for name, cls in (("textcraft-synth", "TextCraftSynth"), ("textcraft", "TextCraft")):
        listed = by_name[name]
        assert (listed.distribution, listed.version, listed.speaks_text) == ("platoon-textcraft", "0.3.0", True)
        assert listed.ref.endswith(f":{cls}")
    env = resolve_environment("textcraft-synth", {"train_tasks": 10, "val_tasks": 5})
    assert is_text_environment(env) and env.eval_split == "val" and len(env.task_ids("val")) == 5
    env = resolve_environment("textcraft", {"recipes_dir": str(EXTENSION / "tests" / "recipes"),
                                            "train_tasks": 5, "val_tasks": 2})
    assert len(env.task_ids("train")) == 5


def test_env_list_names_both_with_their_distribution_and_version() -> None:
    result = platoon_cli("env", "list")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["textcraft"][1:4] == ["platoon-textcraft", "0.3.0", "text"]
    assert rows["textcraft-synth"][1:4] == ["platoon-textcraft", "0.3.0", "text"]
    assert rows["platoon-number-search"][1:3] == ["platoon", platoon.__version__]


@pytest.fixture
def old_release(tmp_path: Path) -> Path:
    """platoon-textcraft 0.2.0's metadata (it requires platoon>=0.3,<0.4) ahead of the installed 0.3.0 on the path,
    its entry point the same package: what an upgrade of platoon alone leaves behind."""
    site = tmp_path / "site"
    info = site / "platoon_textcraft-0.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: platoon-textcraft\nVersion: 0.2.0\nProvides-Extra: platoon\n"
        'Requires-Dist: platoon<0.4,>=0.3; extra == "platoon"\n')
    (info / "entry_points.txt").write_text("[platoon.extensions]\ntextcraft = platoon_textcraft\n")
    return site


def test_a_release_that_excludes_this_platoon_is_refused_naming_both_versions(old_release: Path) -> None:
    result = platoon_cli("env", "list", site=old_release)
    assert result.returncode == 78, result.stdout + result.stderr
    assert "platoon-textcraft 0.2.0 requires platoon<0.4,>=0.3" in result.stderr
    assert f"but platoon {platoon.__version__} is running" in result.stderr
    assert "PLATOON_IGNORE_EXTENSION_REQUIREMENTS=1" in result.stderr and "Traceback" not in result.stderr


def test_the_ignore_flag_loads_it_with_a_warning(old_release: Path) -> None:
    result = platoon_cli("env", "list", site=old_release, PLATOON_IGNORE_EXTENSION_REQUIREMENTS="1")
    assert result.returncode == 0, result.stderr
    assert "loading it anyway, since PLATOON_IGNORE_EXTENSION_REQUIREMENTS is set" in result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["textcraft-synth"][1:3] == ["platoon-textcraft", "0.2.0"]


def test_a_config_naming_it_is_refused_too(old_release: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("train: {max_training_steps: 2}\nenvironments:\n  - name: tc\n    env: textcraft-synth\n")
    result = platoon_cli("config", "validate", str(config), site=old_release)
    assert result.returncode == 78
    assert "platoon-textcraft 0.2.0 requires platoon<0.4,>=0.3" in result.stdout + result.stderr


def test_both_keep_the_text_protocol() -> None:
    from platoon.environments import TextEnvironment, TextEpisode

    env = resolve_environment("textcraft-synth", {"train_tasks": 4, "val_tasks": 4})
    assert isinstance(env, TextEnvironment)
    episode = env.episode(env.task(env.task_ids("train")[0]))
    assert isinstance(episode, TextEpisode)
    assert [t.name for t in episode.tools if t.terminal] == ["finish"]
    assert all(t.schema()["function"]["parameters"]["type"] == "object" for t in episode.tools)
