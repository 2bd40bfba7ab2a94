"""docs/configuration.md's examples, run as written, and its key tables, which name every key of the schema."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config import entry_sampler, is_rule_mode, load_config, resolve_components, run_sampler
from platoon.config.base import ConfigModel
from platoon.config.models import RunConfig
from platoon.config.steps import run_directory

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_example_config_loads_and_resolves(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(blocks("yaml")[0])
    cfg = load_config(path, needs_log_path=True)
    assert [e.name for e in cfg.environments] == ["easy", "hard/large"]
    assert run_sampler(cfg) == "weighted" and entry_sampler(cfg, 1) == "pass_rate" and is_rule_mode(cfg)
    assert run_directory(cfg) == Path("runs/mix/first")
    refs = [(r.kind, r.ref, r.level, r.environments) for r in resolve_components(cfg)]
    assert refs == [
        ("task_sampler", "weighted", "run", ("easy", "hard/large")),
        ("task_sampler", "uniform", "entry", ("easy",)),
        ("task_sampler", "pass_rate", "entry", ("hard/large",)),
        ("group_admission", "informative", "run", ("easy", "hard/large")),
        ("environment", "platoon-number-search", "entry", ("easy", "hard/large")),
    ]


def test_the_validate_example_is_what_validate_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [console] = [b for b in blocks("console") if b.startswith("$ platoon config validate run.yaml")]
    expected = console.splitlines()[1:]
    monkeypatch.chdir(tmp_path)
    Path("run.yaml").write_text(
        "train: {model_name: tiny, renderer_name: role_colon, max_training_steps: ten, task_order: auto,\n"
        "        task_sampler: pass_rate, task_sampler_options: {explore: 2}, group_admission: informative,\n"
        "        num_minibatches: 4}\n"
        "environments: [{name: a}, {name: b, workflow_config: {grup_size: 4, straggler_quorum: 2}}]\n"
        "checkpoint: {strategy: none}\n"
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
    assert namespace["cfg"].train.max_training_steps == 50
    assert [r.ref for r in namespace["records"]][0] == "weighted"


def test_the_ranges_example_is_what_validate_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [console] = [b for b in blocks("console") if b.startswith("$ platoon config validate big.yaml")]
    monkeypatch.chdir(tmp_path)
    Path("big.yaml").write_text(
        "log_path: logs\n"
        "train: {model_name: tiny, renderer_name: role_colon, seed: 18446744073709551616,\n"
        "        workflow_config: {group_size: 100000}}\n"
        "sim: {rollout: {duration: {dist: lognormal, median_s: .inf, sigma: 1}}, trainer: {step_s: 1e3}}\n"
    )
    result = CliRunner().invoke(app, ["config", "validate", "big.yaml"])
    assert result.exit_code == 78
    assert result.stdout.splitlines() == console.splitlines()[1:]


# --- the key tables ----------------------------------------------------------------------------------------------


def _model_in(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """``("", M)`` for a field of model M (optional or not), ``("[]", M)`` for a list of them, ``(".<label>", M)``
    for a mapping to them; None for any other field."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        annotation = members[0] if len(members) == 1 else annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "", annotation
    args = get_args(annotation)
    if get_origin(annotation) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return "[]", args[0]
    if get_origin(annotation) is dict and isinstance(args[-1], type) and issubclass(args[-1], BaseModel):
        return ".<label>", args[-1]
    return None


def schema_keys(model: type[ConfigModel], prefix: str = "", inert: bool = False) -> dict[str, bool]:
    """Every key of ``model`` as the tables name it (``environments[].dataset_kwargs.limit``), whether it has no
    effect here; a section (a field of a model) is named by its keys, a whole no-effect section by ``<path>.*``.
    The run's ``sim`` block is one key here: simulator.md has its keys."""
    out: dict[str, bool] = {}
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        none_here = inert or name in model.NO_EFFECT
        nested = _model_in(field.annotation)
        if nested is None or path == "sim":
            out[path] = none_here
        elif nested[1].NO_EFFECT_ALL or (none_here and nested[0] == ""):
            out[f"{path}{nested[0]}.*"] = True
        else:
            out.update(schema_keys(nested[1], f"{path}{nested[0]}.", none_here))
    return out


def documented_keys() -> dict[str, bool]:
    """The keys the tables under "## The keys" name, with whether their row says **no effect**: a row's first cell
    names keys in backticks, relative to its section's heading (``### `train.workflow_config` ``)."""
    text = DOC.read_text(encoding="utf-8").split("## The keys", 1)[1].split("\n## ", 1)[0]
    out: dict[str, bool] = {}
    prefix = None
    for line in text.splitlines():
        heading = re.match(r"### (?:`(.+)`|Top level)$", line)
        if heading:
            prefix = f"{heading.group(1)}." if heading.group(1) else ""
        elif line.startswith("| `") and prefix is not None:
            first = line.split(" | ")[0]
            # a cell may say "`wandb.*` (`mode`, ...)": the keys in brackets are the starred section's
            for key in re.findall(r"`([^`]+)`", first.split(" (")[0]):
                out[prefix + key] = "**no effect**" in line
    return out


def test_the_tables_name_every_key_with_its_effect() -> None:
    schema = schema_keys(RunConfig)
    documented = documented_keys()
    covered = {k: v for k, v in documented.items() if not k.endswith(".*")}
    stars = {k[:-1]: v for k, v in documented.items() if k.endswith(".*")}

    def row(key: str) -> bool | None:
        if key in covered:
            return covered[key]
        starred = next((v for star, v in stars.items() if key.startswith(star)), None)
        if starred is None and key.endswith(".*"):  # a no-effect section may be documented key by key
            rows = [v for k, v in covered.items() if k.startswith(key[:-1])]
            return all(rows) if rows else None
        return starred

    missing = sorted(k for k in schema if row(k) is None)
    assert missing == []
    wrong = sorted(k for k, inert in schema.items() if row(k) != inert)
    assert wrong == []
    sections = {"train", "model", "environments", "train.workflow_config", "train.inference",
                "environments[].workflow_config"}
    starred = [k[:-1] for k in schema if k.endswith(".*")]
    unknown = sorted(k for k in covered if k not in schema and k not in sections
                     and not any(k.startswith(star) for star in starred))
    assert unknown == []
