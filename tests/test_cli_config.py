"""``platoon config validate`` and ``platoon config show``: one report per file, exit 78 on any problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config import RunConfig, load_config

runner = CliRunner()


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


FIVE_MISTAKES = """
    train:
      batch_size: -4
      task_order: auto
    environments:
      - name: a
        weight: heavy
    model:
      n_heads: 4
      d_model: 30
    sim:
      trainer: {step_seconds: 3}
"""


def test_five_unrelated_mistakes_print_five_lines_and_exit_78(tmp_path: Path) -> None:
    path = write(tmp_path, FIVE_MISTAKES)
    result = invoke("config", "validate", path)
    assert result.exit_code == 78
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL {path}"
    assert lines[1:] == [
        "  train.batch_size: must be at least 1, got -4",
        "  train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler",
        "  environments.0.weight: must be a positive number or 'tasks', got 'heavy'",
        "  sim.trainer.step_seconds: unknown key; did you mean 'step_s'?",
        "  model.d_model: 30 is not a multiple of n_heads (4)",
    ]


MALFORMED = {
    "types": ("train: {steps: ten, seed: 1.5}", ["train.steps: ", "train.seed: "]),
    "unknown keys": (
        """
        train: {stpes: 1}
        environments: [{name: a, colour: red}]
        model: {layers: 2}
        sim: {rollout: {duration: {dist: fixed, value_s: 1, scale: 2}}, speed: 3}
        extra: 1
        """,
        [
            "train.stpes: ",
            "environments.0.colour: ",
            "model.layers: ",
            "sim.rollout.duration.scale: ",
            "sim.speed: ",
            "extra: ",
        ],
    ),
    "bad options": (
        """
        train: {task_sampler: pass_rate, task_sampler_options: {explore: 2}}
        environments: [{name: a, group_admission: informative, group_admission_options: {band: [0.9, 0.1]}}]
        """,
        ["train.task_sampler_options.explore: ", "environments.0.group_admission_options.band: "],
    ),
    "task_order alone": (
        "train: {task_order: weighted}",
        ["train.task_order: unknown key; platoon 0.4.0 removed"],
    ),
    "task_order beside task_sampler": (
        "train: {task_sampler: weighted, task_order: weighted}",
        ["train.task_order: unknown key; platoon 0.4.0 removed"],
    ),
    "task_order auto": (
        "train: {task_order: auto}",
        ["train.task_order: unknown key; platoon 0.4.0 removed"],
    ),
    "unknown components": (
        "train: {task_sampler: fancy, group_admission: strict}",
        ["train.task_sampler: 'fancy' is not one of", "train.group_admission: 'strict' is not one of"],
    ),
    "cross-field": (
        """
        train: {task_sampler: uniform, num_minibatches: 2, max_concurrent_rollouts: 2}
        environments: [{name: a, weight: 2, group_admission: informative}, {name: a, group_size: 4}]
        """,
        [
            "environments.0.weight: ",
            "train.num_minibatches: ",
            "environments.1.name: ",
            "train.max_concurrent_rollouts: ",
        ],
    ),
    "yaml": ("train: {steps: 1\n", ["<yaml>: line "]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_report_all_their_problems(tmp_path: Path, case: str) -> None:
    text, starts = MALFORMED[case]
    path = write(tmp_path, text)
    result = invoke("config", "validate", "--no-resolve", path)
    assert result.exit_code == 78, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL {path}"
    assert len(lines) - 1 == len(starts), result.stdout
    for start in starts:
        assert any(line.startswith("  " + start) for line in lines[1:]), (start, result.stdout)
    assert "Traceback" not in result.stdout + result.stderr


def test_task_order_via_set_fails(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {task_sampler: weighted}")
    result = invoke("config", "validate", path, "--set", "train.task_order=auto")
    assert result.exit_code == 78
    assert result.stdout.splitlines()[1] == (
        "  override train.task_order=auto: train.task_order: unknown key; platoon 0.4.0 removed it; use "
        "train.task_sampler"
    )


def test_ok_files_warnings_and_several_files(tmp_path: Path) -> None:
    good = write(tmp_path, "train: {steps: 3}", "good.yaml")
    warned = write(
        tmp_path, "train: {group_admission: informative, loss_fn_config: {entropy_coef: 0.01}}", "warned.yaml"
    )
    bad = write(tmp_path, "train: {steps: 0}", "bad.yaml")
    result = invoke("config", "validate", good, warned, bad)
    assert result.exit_code == 78
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok   {good}"
    assert lines[1] == f"ok   {warned}"
    assert lines[2].startswith("  warning: train.loss_fn_config: kl_coef 0 and entropy_coef 0.01 train terms")
    assert lines[3:] == [f"FAIL {bad}", "  train.steps: must be at least 1, got 0"]
    result = invoke("config", "validate", good, warned)
    assert result.exit_code == 0


def test_validate_without_a_file_is_a_usage_error() -> None:
    result = invoke("config", "validate")
    assert result.exit_code == 64
    assert "needs at least one CONFIG" in result.stderr


def test_validate_resolves_components_unless_told_not_to(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, package: no_such_pkg_for_validate}]")
    result = invoke("config", "validate", path)
    assert result.exit_code == 78
    assert result.stdout.splitlines()[1].startswith(
        "  environments.0.package: cannot import package 'no_such_pkg_for_validate'"
    )
    assert invoke("config", "validate", "--no-resolve", path).exit_code == 0


# --- show ------------------------------------------------------------------------------------------------------


def test_show_defaults_round_trips(tmp_path: Path) -> None:
    result = invoke("config", "show", "--defaults")
    assert result.exit_code == 0
    assert "# Groups per step.\n  batch_size: 32\n" in result.stdout
    assert "task_order" not in result.stdout
    path = tmp_path / "defaults.yaml"
    path.write_text(result.stdout)
    assert load_config(path) == RunConfig()


def test_show_prints_the_config_as_loaded(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, group_size: 4}, {name: b, task_sampler: pass_rate}]")
    result = invoke("config", "show", path, "--set", "train.steps=9")
    assert result.exit_code == 0
    data = yaml.safe_load(result.stdout)
    assert data["train"]["steps"] == 9 and data["train"]["batch_size"] == 32
    assert [e["group_size"] for e in data["environments"]] == [4, 8]
    assert "#   b: drawn by pass_rate@b under weighted; group_admission: all (run)" in result.stdout
    again = tmp_path / "again.yaml"
    again.write_text(result.stdout)
    assert load_config(again) == load_config(path, ["train.steps=9"])


def test_show_on_a_bad_config_exits_78_on_stderr(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {steps: x, task_order: auto}")
    result = invoke("config", "show", path)
    assert result.exit_code == 78
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"platoon: invalid config {path}:",
        "  train.steps: must be an integer, got 'x'",
        "  train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler",
    ]
