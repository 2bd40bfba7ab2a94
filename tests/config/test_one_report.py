"""One report: every problem of a config in one ConfigError (exit 78, each line at its key path, no traceback),
duplicate keys and stage 2's imports included (docs/configuration.md, "Validation")."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config import ConfigError, RunConfig, check_config, load_config
from platoon.config.yaml_loader import YamlProblems, load_yaml, read_yaml

runner = CliRunner()

DUPLICATE = """\
train:
  task_sampler: "nosuchmod:Cls"
  max_staleness: 1
  max_staleness: true
"""

UNIMPORTABLE = """\
train:
  model_name: tiny
  renderer_name: role_colon
  task_sampler: "nosuchmod:Cls"
environments:
  - name: a
    group_admission: "nosuchmod2:Rule"
"""

NO_SUCH_SAMPLER = ("train.task_sampler: cannot import 'nosuchmod' for 'nosuchmod:Cls': ModuleNotFoundError: No "
                   "module named 'nosuchmod'")
NO_LOG_PATH = "log_path: missing required key (where runs go; train --out DIR names the run directory instead)"
GROUP_OF_ONE = ("pass_rate chooses tasks likely to mix passes and failures, which a group of one never does "
                "(environments[a] has group_size 1); use uniform, or a group size of 2 or more")


def report(path: Path, overrides: tuple[str, ...] = (), **kwargs: bool) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides, **kwargs)
    return info.value.problems


def written(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cli_reports(config: Path, out: Path | None = None) -> dict[str, str]:
    """The output of ``config validate``, ``train`` and ``simulate`` on ``config`` (the runs with ``--out``, when
    given), each exit 78."""
    outputs = {}
    for command in (["config", "validate"], ["train"], ["simulate"]):
        run = [] if out is None or command[0] == "config" else ["--out", str(out)]
        result = runner.invoke(app, [*command, str(config), *run])
        assert result.exit_code == 78, (command, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
        outputs[command[0]] = result.output
    return outputs


# --- case 1: a duplicate key no longer stops the report ---------------------------------------------------------


def test_a_duplicate_key_joins_the_files_other_problems(tmp_path: Path) -> None:
    path = written(tmp_path, DUPLICATE)
    assert report(path, strict_resolve=True, needs_log_path=True) == [
        "train.max_staleness: duplicate key, on lines 3 and 4; a key may appear once in a mapping",
        "train.model_name: missing required key",
        "train.renderer_name: missing required key",
        "train.max_staleness: must be an integer, got true",  # the last value, validated as platoon 0.4.0 does
        NO_LOG_PATH,
        NO_SUCH_SAMPLER,
    ]
    assert report(path)[:4] == report(path, strict_resolve=True)[:4]  # stage 1 alone: the same, less the import
    assert NO_SUCH_SAMPLER not in report(path)
    for command, output in cli_reports(path, tmp_path / "out").items():
        assert "train.max_staleness: duplicate key, on lines 3 and 4" in output, command
        assert "train.max_staleness: must be an integer, got true" in output, command
        assert "train.renderer_name: missing required key" in output, command
        assert NO_SUCH_SAMPLER in output, command
    assert not (tmp_path / "out").exists()


def test_read_yaml_keeps_the_last_value_and_load_yaml_still_refuses() -> None:
    data, duplicates = read_yaml("a: 1\nb: {c: 2, c: 3}\na: 4\n")
    assert data == {"a": 4, "b": {"c": 3}}
    assert [(p.path, p.message.split(";")[0]) for p in duplicates] == [
        ("b.c", "duplicate key, on lines 2 and 2"), ("a", "duplicate key, on lines 1 and 3")]
    with pytest.raises(YamlProblems) as info:
        load_yaml("a: 1\na: 2\n")
    assert [p.path for p in info.value.problems] == ["a"]
    with pytest.raises(YamlProblems) as info:  # a value that is no config's beside a duplicate: both named
        read_yaml("a: 1\na: !!binary aGk=\n")
    assert len(info.value.problems) == 2


def test_a_duplicate_key_in_an_overrides_value_is_reported_and_the_rest_checked(tmp_path: Path) -> None:
    path = written(tmp_path, "train: {model_name: tiny, renderer_name: role_colon}\n")
    lines = report(path, ("train.workflow_config={group_size: 2, group_size: x}",))
    assert lines[0] == ("override train.workflow_config={group_size: 2, group_size: x}: the value is not YAML: "
                        "group_size: duplicate key, on lines 1 and 1; a key may appear once in a mapping")
    assert lines[1:] == ["override train.workflow_config={group_size: 2, group_size: x}: "
                         "train.workflow_config.group_size: must be an integer, got 'x'"]


# --- case 2: stage 2 joins stage 1's report -------------------------------------------------------------------


def test_what_cannot_import_joins_a_missing_log_path(tmp_path: Path) -> None:
    path = written(tmp_path, UNIMPORTABLE)
    expected = [
        NO_LOG_PATH,
        NO_SUCH_SAMPLER,
        "environments.0.group_admission: cannot import 'nosuchmod2' for 'nosuchmod2:Rule': ModuleNotFoundError: "
        "No module named 'nosuchmod2'",
    ]
    assert report(path, strict_resolve=True, needs_log_path=True) == expected
    assert report(path, strict_resolve=True) == expected[1:]
    validate = cli_reports(path)["config"]
    assert validate.splitlines()[1:] == [f"  {line}" for line in expected]


def test_stage_2_leaves_what_stage_1_named_to_stage_1(tmp_path: Path) -> None:
    """A bad entry beside a good one: the good one's imports are reported, nothing about the bad one's stand-in;
    a name stage 1 refused is not refused again in stage 2's words."""
    path = written(tmp_path, """\
log_path: runs
train: {model_name: tiny, renderer_name: role_colon, batch_size: zero}
environments:
  - {name: a, env: weird, workflow_config: {group_size: many}}
  - {name: b, group_admission: "nosuchmod2:Rule"}
  - 7
""")
    assert report(path, strict_resolve=True) == [
        "train.batch_size: must be an integer, got 'zero'",
        "environments.0.workflow_config.group_size: must be an integer, got 'many'",
        "environments.2: must be a mapping, got 7",
        "environments.0.env: 'weird' is not one of 'platoon-number-search', a name an environment's package "
        "registers, or module:Class",
        "environments.1.group_admission: cannot import 'nosuchmod2' for 'nosuchmod2:Rule': ModuleNotFoundError: "
        "No module named 'nosuchmod2'",
    ]


def test_a_broken_package_and_override_join_the_rest(tmp_path: Path) -> None:
    path = written(tmp_path, """\
train: {model_name: tiny, renderer_name: role_colon, task_sampler: "nosuchmod:Cls"}
environments: [{name: a, package: nosuchpkg, env: weird}]
""")
    lines = report(path, ("train.max_staleness=x", "not an override"), strict_resolve=True, needs_log_path=True)
    assert lines == [
        "override not an override: expected dotted.key=value or dotted.key+=value",
        "override train.max_staleness=x: train.max_staleness: must be an integer, got 'x'",
        NO_LOG_PATH,
        "environments.0.package: cannot import package 'nosuchpkg': ModuleNotFoundError: No module named 'nosuchpkg'",
        NO_SUCH_SAMPLER,
        "environments.0.env: unknown environment 'weird'",
    ]


# --- case 3: pass_rate's group of one, at the sampler's key ---------------------------------------------------


def test_a_group_of_one_is_named_at_the_samplers_key(tmp_path: Path) -> None:
    run = written(tmp_path, "log_path: runs\ntrain: {model_name: tiny, renderer_name: role_colon, task_sampler: "
                            "pass_rate}\nenvironments: [{name: a, workflow_config: {group_size: 1}}, {name: b}]\n")
    assert report(run) == report(run, strict_resolve=True) == [f"train.task_sampler: {GROUP_OF_ONE}"]
    assert f"  train.task_sampler: {GROUP_OF_ONE}" in cli_reports(run)["config"]
    entry = written(tmp_path, "log_path: runs\ntrain: {model_name: tiny, renderer_name: role_colon, workflow_config: "
                              "{group_size: 1}}\nenvironments: [{name: a, task_sampler: pass_rate}, {name: b}]\n",
                    "entry.yaml")
    assert report(entry, strict_resolve=True) == [f"environments.0.task_sampler: {GROUP_OF_ONE}"]
    cfg = RunConfig.model_validate({
        "train": {"model_name": "tiny", "renderer_name": "role_colon", "task_sampler": "pass_rate"},
        "environments": [{"name": "a", "workflow_config": {"group_size": 1}}, {"name": "b"}],
    })
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert info.value.problems == [f"train.task_sampler: {GROUP_OF_ONE}"]


# --- drawn: k independent problems, k lines -------------------------------------------------------------------

PLANTS: dict[str, tuple[str, str]] = {
    # name: (where it goes: a placeholder of BASE, what it writes), and the line's start is EXPECTED[name]
    "duplicate key": ("train", "  seed: 1\n  seed: 2\n"),
    "unknown key": ("train", "  bogus_key: 1\n"),
    "wrong type": ("train", "  batch_size: many\n"),
    "unresolvable name": ("train", "  group_admission: nosuch_rule\n"),
    "unimportable sampler": ("train", '  task_sampler: "nosuchmod_a:Cls"\n'),
    "unimportable rule": ("b", '    group_admission: "nosuchmod_b:Rule"\n'),
    "unimportable environment": ("b", '    env: "nosuchmod_c:Env"\n'),
    "bad entry value": ("a", "    workflow_config: {group_size: lots}\n"),
    "unknown model key": ("model", "model: {bogus: 1}\n"),
    "missing key": ("renderer", ""),
    "missing log_path": ("log_path", ""),
}
EXPECTED = {
    "duplicate key": "train.seed: duplicate key, on lines",
    "unknown key": "train.bogus_key: unknown key",
    "wrong type": "train.batch_size: must be an integer, got 'many'",
    "unresolvable name": "train.group_admission: 'nosuch_rule' is not one of",
    "unimportable sampler": "train.task_sampler: cannot import 'nosuchmod_a'",
    "unimportable rule": "environments.1.group_admission: cannot import 'nosuchmod_b'",
    "unimportable environment": "environments.1.env: cannot import 'nosuchmod_c'",
    "bad entry value": "environments.0.workflow_config.group_size: must be an integer, got 'lots'",
    "unknown model key": "model.bogus: unknown key",
    "missing key": "train.renderer_name: missing required key",
    "missing log_path": "log_path: missing required key",
}


def planted(names: set[str]) -> str:
    def at(where: str) -> str:
        return "".join(text for name, (place, text) in PLANTS.items() if place == where and name in names)

    return (
        ("" if "missing log_path" in names else "log_path: runs\n")
        + "train:\n  model_name: tiny\n"
        + ("" if "missing key" in names else "  renderer_name: role_colon\n")
        + "  max_training_steps: 10\n" + at("train")
        + "environments:\n  - name: a\n" + at("a") + "  - name: b\n" + at("b")
        + at("model")
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.sets(st.sampled_from(sorted(PLANTS)), min_size=1))
def test_k_planted_problems_make_k_lines(tmp_path: Path, names: set[str]) -> None:
    path = written(tmp_path, planted(names))
    lines = report(path, strict_resolve=True, needs_log_path=True)
    for name in names:
        assert sum(line.startswith(EXPECTED[name]) for line in lines) == 1, (name, lines)
    assert len(lines) == len(names), lines


def test_the_planted_base_is_valid(tmp_path: Path) -> None:
    assert load_config(written(tmp_path, planted(set())), strict_resolve=True, needs_log_path=True).log_path == "runs"
    result = runner.invoke(app, ["config", "validate", str(written(tmp_path, planted(set(PLANTS)), "all.yaml"))])
    assert result.exit_code == 78 and "Traceback" not in result.output
    assert all(EXPECTED[name] in result.output for name in PLANTS), result.output
