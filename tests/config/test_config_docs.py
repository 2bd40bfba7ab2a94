"""docs/configuration.md's examples, run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config import entry_sampler, is_rule_mode, load_config, resolve_components, run_sampler

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_example_config_loads_and_resolves(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(blocks("yaml")[0])
    cfg = load_config(path)
    assert [e.name for e in cfg.environments] == ["easy", "hard/large"]
    assert run_sampler(cfg) == "weighted" and entry_sampler(cfg, 1) == "pass_rate" and is_rule_mode(cfg)
    refs = [(r.kind, r.ref, r.level, r.environments) for r in resolve_components(cfg)]
    assert refs == [
        ("task_sampler", "weighted", "run", ("easy", "hard/large")),
        ("task_sampler", "uniform", "entry", ("easy",)),
        ("task_sampler", "pass_rate", "entry", ("hard/large",)),
        ("group_admission", "informative", "run", ("easy", "hard/large")),
        ("environment", "number_search", "entry", ("easy", "hard/large")),
    ]


def test_the_validate_example_is_what_validate_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [console] = [b for b in blocks("console") if b.startswith("$ platoon config validate run.yaml")]
    expected = console.splitlines()[1:]
    monkeypatch.chdir(tmp_path)
    Path("run.yaml").write_text(
        "train: {steps: ten, task_order: auto, task_sampler: pass_rate, task_sampler_options: {explore: 2},\n"
        "        group_admission: informative, num_minibatches: 4}\n"
        "environments: [{name: a}, {name: b, grup_size: 4}]\n"
    )
    result = CliRunner().invoke(app, ["config", "validate", "run.yaml"])
    assert result.exit_code == 78
    assert result.stdout.splitlines() == expected


def test_the_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("run.yaml").write_text(blocks("yaml")[0])
    [code] = blocks("python")
    namespace: dict = {"__name__": "configuration_guide"}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the guide's own example
    assert namespace["cfg"].train.steps == 50
    assert [r.ref for r in namespace["records"]][0] == "weighted"


def test_the_ranges_example_is_what_validate_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [console] = [b for b in blocks("console") if b.startswith("$ platoon config validate big.yaml")]
    monkeypatch.chdir(tmp_path)
    Path("big.yaml").write_text(
        "train: {seed: 18446744073709551616}\n"
        "environments: [{name: a, group_size: 100000}]\n"
        "sim: {rollout: {duration: {dist: lognormal, median_s: .inf, sigma: 1}}, trainer: {step_s: 1e3}}\n"
    )
    result = CliRunner().invoke(app, ["config", "validate", "big.yaml"])
    assert result.exit_code == 78
    assert result.stdout.splitlines() == console.splitlines()[1:]
