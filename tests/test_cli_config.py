"""``platoon config validate`` and ``platoon config show``: one report per file, exit 78 on any problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from platoon.cli import app
from platoon.config import load_config
from platoon.config.models import default_config

runner = CliRunner()

REQUIRED = {"log_path": "runs", "train": {"model_name": "tiny", "renderer_name": "role_colon", "max_training_steps": 10}}
"""What every file ``config validate`` passes sets (where runs go, a model, a renderer, a plan), under a test's own."""


def complete(text: str) -> str:
    """The YAML ``text`` with ``REQUIRED`` under its own keys (``text`` as is when it is not a YAML mapping whose train
    section is a mapping or absent)."""
    text = textwrap.dedent(text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    data = {} if data is None else data
    if not isinstance(data, dict) or not isinstance(data.get("train", {}), dict):
        return text
    return yaml.safe_dump({**REQUIRED, **data, "train": {**REQUIRED["train"], **data.get("train", {})}},
                          sort_keys=False)


def write(tmp_path: Path, text: str, name: str = "run.yaml", *, raw: bool = False) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text) if raw else complete(text))
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
    "types": ("train: {max_training_steps: ten, seed: 1.5}", ["train.max_training_steps: ", "train.seed: "]),
    "unknown keys": (
        """
        train: {stpes: 1}
        environments: [{name: a, xyzzy: red}]
        model: {layers: 2}
        sim: {rollout: {duration: {dist: fixed, value_s: 1, scale: 2}}, speed: 3}
        extra: 1
        """,
        [
            "train.stpes: ",
            "environments.0.xyzzy: ",
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
        environments: [{name: a, weight: 2, group_admission: informative}, {name: a, workflow_config: {group_size: 4}}]
        """,
        [
            "environments.0.weight: ",
            "train.num_minibatches: ",
            "environments.1.name: ",
            "environments.1.weight: ",
            "train.max_concurrent_rollouts: ",
        ],
    ),
    "0.4.0 rules": (
        """
        train: {workflow_config: {straggler_quorum: 2, min_successful_group_size: 9}}
        environments: [{env: platoon-number-search@2, dataset_kwargs: {split_name: heldout}}, {name: b}]
        checkpoint: {strategy: none}
        """,
        [
            "environments.0.env: platoon-number-search is at version 1",
            "checkpoint.strategy: 'none' is not one of 'step', 'epoch'; platoon 0.3.0 removed it",
            "environments.0.name: a mixture's entries each need a unique name",
            "train.workflow_config.min_successful_group_size: 9 is more than the group size of environments.0",
            "train.workflow_config.min_successful_group_size: 9 is more than the group size of environments.1",
            "train.workflow_config.straggler_quorum: needs straggler_timeout_seconds",
        ],
    ),
    "environments as a mapping": (
        "environments: {a: {}}",
        ["environments: must be a list of entries"],
    ),
    "yaml": ("train: {max_training_steps: 1\n", ["<yaml>: line "]),
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
    good = write(tmp_path, "train: {max_training_steps: 3}", "good.yaml")
    warned = write(
        tmp_path, "train: {group_admission: informative, loss_fn_config: {entropy_coef: 0.01}}", "warned.yaml"
    )
    bad = write(tmp_path, "train: {max_training_steps: 0}", "bad.yaml")
    result = invoke("config", "validate", good, warned, bad)
    assert result.exit_code == 78
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok   {good}"
    assert lines[1] == f"ok   {warned}"
    assert lines[2].startswith("  warning: train.loss_fn_config: kl_coef 0 and entropy_coef 0.01 train terms")
    assert lines[3:] == [f"FAIL {bad}", "  train.max_training_steps: must be at least 1, got 0"]
    result = invoke("config", "validate", good, warned)
    assert result.exit_code == 0


def test_validate_requires_log_path_as_0_4_does(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 3}", raw=True)
    result = invoke("config", "validate", path)
    assert result.exit_code == 78
    assert result.stdout.splitlines()[1:] == [
        "  log_path: missing required key (where runs go; train --out DIR names the run directory instead)"
    ]
    assert invoke("config", "validate", path, "--set", "log_path=runs").exit_code == 0
    assert invoke("config", "show", path).exit_code == 0  # only where runs go needs it


def test_validate_names_every_no_effect_key_in_one_warning(tmp_path: Path) -> None:
    text = """
        tinker_base_url: http://localhost:8000
        train: {lora_rank: 8, workflow_config: {worker_binding_poll_seconds: 2, worker_startup_budget_seconds: 60}}
        stats: {wandb: {project: p}}
    """
    result = invoke("config", "validate", write(tmp_path, text))
    assert result.exit_code == 0, result.stdout
    [warning] = [line for line in result.stdout.splitlines() if line.startswith("  warning: ")]
    keys = warning.removeprefix("  warning: ").split(": no effect here")[0].split(", ")
    # worker_startup_budget_seconds acts (the start limit's timer), so it is not among them
    assert sorted(keys) == ["tinker_base_url", "train.lora_rank",
                            "train.workflow_config.worker_binding_poll_seconds"]


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
    assert "# Rollouts per task (a group); an entry may set its own.\n    group_size: 8\n" in result.stdout
    assert "  # (no effect in this release; kept for platoon 0.4.0 configs)\n  # lora_rank: 32\n" in result.stdout
    path = tmp_path / "defaults.yaml"
    path.write_text(result.stdout)
    assert load_config(path) == default_config().model_copy(update={"log_path": "runs"})  # a file names log_path
    assert invoke("config", "validate", "--strict", str(path)).exit_code == 0


def test_show_prints_the_config_as_loaded(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, workflow_config: {group_size: 4}}, {name: b, task_sampler: pass_rate}]")
    result = invoke("config", "show", path, "--set", "train.max_training_steps=9")
    assert result.exit_code == 0
    data = yaml.safe_load(result.stdout)
    assert data["train"]["max_training_steps"] == 9 and data["train"]["batch_size"] == 32
    assert [e["workflow_config"]["group_size"] for e in data["environments"]] == [4, None]
    assert "#   a: drawn by uniform@a under weighted; group_admission: all (run); group_size 4" in result.stdout
    assert "#   b: drawn by pass_rate@b under weighted; group_admission: all (run); group_size 8" in result.stdout
    again = tmp_path / "again.yaml"
    again.write_text(result.stdout)
    assert load_config(again) == load_config(path, ["train.max_training_steps=9"])


def test_show_on_a_bad_config_exits_78_on_stderr(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {max_training_steps: x, task_order: auto}")
    result = invoke("config", "show", path)
    assert result.exit_code == 78
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"platoon: invalid config {path}:",
        "  train.max_training_steps: must be an integer, got 'x'",
        "  train.task_order: unknown key; platoon 0.4.0 removed it; use train.task_sampler",
    ]


# --- 0.4.0's command line: positional overrides, --config, and config validate's flags ------------------------------


def test_a_positional_override_beside_the_file_is_an_override(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {max_training_steps: 3}")
    result = invoke("config", "validate", path, "train.batch_size=0")
    assert result.exit_code == 78
    assert result.stdout.splitlines() == [
        f"FAIL {path}", "  override train.batch_size=0: train.batch_size: must be at least 1, got 0"
    ]


def test_overrides_among_several_files_apply_to_each(tmp_path: Path) -> None:
    a = write(tmp_path, "train: {max_training_steps: 3}", "a.yaml")
    b = write(tmp_path, "environments: [{name: x}, {name: y}]", "b.yaml")
    result = invoke("config", "validate", a, "train.max_training_steps=0", b)
    assert result.exit_code == 78
    assert result.stdout.splitlines() == [
        f"FAIL {a}", "  override train.max_training_steps=0: train.max_training_steps: must be at least 1, got 0",
        f"FAIL {b}", "  override train.max_training_steps=0: train.max_training_steps: must be at least 1, got 0",
    ]


def test_show_takes_positional_overrides_and_appends(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, weight: 1}]")
    result = invoke("config", "show", path, "train.max_training_steps=9", "environments+={name: b, weight: 3}")
    assert result.exit_code == 0, result.stderr
    data = yaml.safe_load(result.stdout)
    assert data["train"]["max_training_steps"] == 9
    assert [(e["name"], e["weight"]) for e in data["environments"]] == [("a", 1.0), ("b", 3.0)]


def test_a_file_named_like_an_override_is_a_file_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b.yaml").write_text(complete("train: {max_training_steps: 0}"))
    result = invoke("config", "validate", "a=b.yaml")
    assert result.stdout.splitlines() == ["FAIL a=b.yaml", "  train.max_training_steps: must be at least 1, got 0"]
    (tmp_path / "a=b.yaml").unlink()  # now an override of the key a, beside no file
    result = invoke("config", "validate", "a=b.yaml")
    assert result.exit_code == 64 and "needs at least one CONFIG" in result.stderr


def test_config_option_is_the_positional_file(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {max_training_steps: 4}")
    by_option = invoke("config", "show", "--config", path, "train.batch_size=2")
    assert by_option.exit_code == 0
    assert by_option.stdout == invoke("config", "show", path, "--set", "train.batch_size=2").stdout
    assert invoke("config", "validate", "-c", path).stdout.splitlines() == [f"ok   {path}"]
    both = invoke("config", "show", "--config", path, path)
    assert both.exit_code == 64 and "one CONFIG at most" in both.stderr


def test_simulate_and_train_read_positional_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {max_training_steps: 3}")
    for command in ("simulate", "train"):
        result = invoke(command, path, "train.max_training_steps=0", "--out", tmp_path / command)
        assert result.exit_code == 78, (command, result.stdout, result.stderr)
        assert "override train.max_training_steps=0: train.max_training_steps: must be at least 1, got 0" in result.stderr
        assert not (tmp_path / command).exists()


def test_strict_fails_on_warnings(tmp_path: Path) -> None:
    warned = write(tmp_path, "train: {group_admission: informative, loss_fn_config: {entropy_coef: 0.01}}")
    assert invoke("config", "validate", warned).exit_code == 0
    result = invoke("config", "validate", "--strict", warned)
    assert result.exit_code == 78
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL {warned} (--strict: its warnings fail it)"
    assert lines[1].startswith("  warning: train.loss_fn_config: kl_coef 0 and entropy_coef 0.01")
    good = write(tmp_path, "train: {max_training_steps: 3}", "good.yaml")
    assert invoke("config", "validate", "--strict", good).exit_code == 0


def test_kind_eval_is_refused_and_none_checks_the_yaml_only(tmp_path: Path) -> None:
    path = write(tmp_path, "inference: {model: x}\ntrain: {max_training_steps: 0}")
    result = invoke("config", "validate", "--kind", "eval", path)
    assert result.exit_code == 64 and "this platoon has no evaluation config" in result.stderr
    result = invoke("config", "validate", "--kind", "none", path, "anything.at.all=1")
    assert (result.exit_code, result.stdout.splitlines()) == (0, [f"ok   {path} (no schema)"])
    bad = write(tmp_path, "a: [1", "bad.yaml")
    assert invoke("config", "validate", "--kind", "none", bad).exit_code == 78
    assert invoke("config", "validate", "--kind", "bogus", path).exit_code == 2  # click's usage error: main() exits 64
    assert invoke("config", "validate", "--kind", "train", path).exit_code == 78


SCHEMA = '''
from dataclasses import dataclass
from pydantic import BaseModel, ConfigDict

class Mine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: int = 1
    names: list[str] = []

@dataclass
class Plain:
    steps: int
'''


def test_schema_checks_against_the_users_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_schema_mod.py").write_text(SCHEMA)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path, "steps: 2", raw=True)
    result = invoke("config", "validate", "--schema", "cli_schema_mod:Mine", path, "names+=a")
    assert (result.exit_code, result.stdout.splitlines()) == (0, [f"ok   {path} (Mine)"])
    result = invoke("config", "validate", "--schema", "cli_schema_mod:Mine", path, "stepz=1", "steps=x")
    assert result.exit_code == 78
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL {path}" and len(lines) == 3
    assert lines[1].startswith("  override steps=x: steps: ")  # pydantic's words, for a class of the user's
    assert lines[2] == "  override stepz=1: stepz: unknown key; did you mean 'steps'?"
    assert invoke("config", "validate", "--schema", "cli_schema_mod:Plain", path).exit_code == 0
    result = invoke("config", "validate", "--schema", "no_such_mod_for_schema:X", path)
    assert result.exit_code == 78
    assert result.stdout.splitlines()[1].startswith("  --schema 'no_such_mod_for_schema:X' cannot be imported")
    result = invoke("config", "validate", "--schema", "platoon.config:RunConfig", path)
    assert result.exit_code == 78 and "  steps: unknown key; did you mean 'sft.steps'?" in result.stdout.splitlines()


def test_resolve_is_on_by_default_and_can_be_named(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, package: no_such_pkg_for_validate}]")
    assert invoke("config", "validate", "--resolve", path).exit_code == 78
    assert invoke("config", "validate", "--no-resolve", path).exit_code == 0


def test_tasks_lists_the_plan_and_warns_of_a_lopsided_mixture(tmp_path: Path) -> None:
    path = write(tmp_path, """
        train: {max_training_steps: 100, batch_size: 32}
        environments:
          - {name: a, env: platoon-number-search, weight: 1}
          - {name: b, env: platoon-number-search, weight: 20}
    """)
    result = invoke("config", "validate", "--tasks", path)
    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        f"ok   {path}",
        "  training tasks: 384, 3200 slots (100 steps of 32), shared by weighted by weight",
        "  environments[a]: 192 tasks, weight 1, 4.8% of the slots: each task drawn about 0.79 times over the "
        "run's 100 steps",
        "  environments[b]: 192 tasks, weight 20, 95.2% of the slots: each task drawn about 15.9 times over the "
        "run's 100 steps",
    ]
    assert lines[4].startswith("  warning: environments[a]: its weight (1, 4.8% of the slots) gives it about 152 "
                               "of the run's 3200 task slots")
    assert lines[5].startswith("  warning: environments[b]'s 192 training tasks are each drawn about 20.0 times as "
                               "often as environments[a]'s 192")
    even = invoke("config", "validate", "--tasks", path, "environments.1.weight=tasks", "environments.0.weight=tasks")
    assert not [line for line in even.stdout.splitlines() if "warning" in line]
    assert invoke("config", "validate", "--strict", "--tasks", path).exit_code == 78


def test_tasks_fails_on_what_listing_them_finds(tmp_path: Path) -> None:
    path = write(tmp_path, "environments: [{name: a, env: platoon-number-search, tasks: [no-such-task]}]")
    assert invoke("config", "validate", path).exit_code == 0  # only listing the split finds it
    result = invoke("config", "validate", "--tasks", path)
    assert result.exit_code == 78
    assert result.stdout.splitlines() == [f"FAIL {path}", "  environments.0.tasks: not in split 'train': no-such-task"]
