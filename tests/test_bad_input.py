"""Bad input, case by case: what ``config validate`` passes the runs accept, what it refuses they refuse (exit 78,
every problem with its key path), a run that fails before its first step leaves no directory, and no command ever
shows a traceback (docs/configuration.md, "Validation" and "What a YAML file may hold").

The drawn counterpart, over every field of the schema, is tests/test_bad_input_properties.py.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app, main
from platoon.runs.rundir import RunDir

runner = CliRunner()
SMALL = ["--set", "train.batch_size=2", "--set", "train.workflow_config.group_size=2", "--set",
         "sim.population.tasks=8", "--set", "sim.population.heldout=2", "--set", "train.max_training_steps=1"]


def invoke(*args: object):
    result = runner.invoke(app, [str(a) for a in args])
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{type(exc).__name__}: {exc}"
    assert "Traceback" not in result.output
    return result


REQUIRED_TRAIN = "model_name: tiny, renderer_name: role_colon"


def complete(text: str) -> str:
    """``text`` with what every config sets: ``log_path``, and a model and a renderer in its train section (put in
    its ``train: {`` or given one). Done on the text, so that the YAML a test writes (anchors, dates, deep nesting,
    duplicate keys) reaches the loader as written."""
    if "train: {" in text:
        text = text.replace("train: {", "train: {" + REQUIRED_TRAIN + ", ", 1)
    elif not re.search(r"^train:", text, flags=re.M):
        text = f"train: {{{REQUIRED_TRAIN}}}\n" + text
    return "log_path: runs\n" + text


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(complete(text))
    return path


def refused_alike(tmp_path: Path, config: Path, *needles: str) -> None:
    """validate and simulate both exit 78 naming ``needles``; simulate leaves no directory."""
    validate = invoke("config", "validate", config)
    assert validate.exit_code == 78, validate.output
    out = tmp_path / "out"
    simulate = invoke("simulate", config, "--out", out, "--steps", "1")
    assert simulate.exit_code == 78, simulate.output
    for needle in needles:
        assert needle in validate.output and needle in simulate.output, (validate.output, simulate.output)
    assert not out.exists()


# --- item 7: what validate passes, the runs accept ------------------------------------------------------------


FILE_CASES = {
    "missing task file": ("sim: {tasks: nope.csv, learning: {enabled: false}}", "sim.tasks: ", "cannot read"),
    "empty task file name": ("sim: {tasks: ''}", "sim.tasks: must not be empty", ""),
    "empty task file": ("sim: {tasks: empty.csv}", "sim.tasks: ", "holds no tasks"),
    "malformed task file": ("sim: {tasks: cols.csv}", "sim.tasks: ", "needs columns task_id and pass_rate"),
    "task file with a repeated id": ("sim: {tasks: dup.csv}", "sim.tasks: ", "task_id 't1' repeats row 1"),
    "JSON task file with a repeated id": ("sim: {tasks: dup.json}", "sim.tasks: ", "task_id 't1' repeats item 1"),
    "deeply nested JSON task file": ("sim: {tasks: deep.json}", "sim.tasks: ", "nested more than 64 levels deep"),
    "missing duration file": ("sim: {rollout: {duration: {dist: empirical, file: nope.txt}}}",
                              "sim.rollout.duration.file: ", "cannot read"),
    "empty duration file": ("sim: {rollout: {duration: {dist: empirical, file: empty.csv}}}",
                            "sim.rollout.duration.file: ", "holds no durations"),
    "malformed duration file": ("sim: {rollout: {teardown_s: {dist: empirical, file: words.txt}}}",
                                "sim.rollout.teardown_s.file: ", "not a list of durations"),
    "an entry's missing duration file": (
        "environments: [{name: a, sim: {rollout: {first_call_s: {dist: empirical, file: nope.txt}}}}]",
        "environments.0.sim.rollout.first_call_s.file: ", "cannot read"),
    "an entry's missing task file": ("environments: [{name: a, sim: {tasks: nope.csv}}]",
                                     "environments.0.sim.tasks: ", "cannot read"),
    "unknown preset": ("sim: {preset: long-agentc}", "sim.preset: unknown preset 'long-agentc'",
                       "did you mean 'long-agentic'?"),
    "an entry's preset": ("environments: [{name: a, sim: {preset: math}}]", "environments.0.sim.preset: ",
                          "the run's alone"),
    "an entry's GPUs": ("environments: [{name: a, sim: {gpus: 2}}]", "environments.0.sim.gpus: ", "the run's alone"),
    "an entry's trainer": ("environments: [{name: a, sim: {trainer: {step_s: 2}}}]", "environments.0.sim.trainer: ",
                           "the run's alone"),
}


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "cols.csv").write_text("id,rate\nx,1\n")
    (tmp_path / "dup.csv").write_text("task_id,pass_rate\nt1,0.5\nt1,0.25\n")
    (tmp_path / "dup.json").write_text('[{"task_id": "t1", "pass_rate": 0.5}, {"task_id": "t1", "pass_rate": 1}]')
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "words.txt").write_text("one\ntwo\n")
    return tmp_path


@pytest.mark.parametrize("case", FILE_CASES)
def test_validate_refuses_the_files_and_presets_simulate_refuses(files: Path, case: str) -> None:
    text, *needles = FILE_CASES[case]
    refused_alike(files, write(files, text + "\n"), *[n for n in needles if n])


OUT_OF_RANGE = {
    "sim: {trainer: {step_s: .inf}}": "sim.trainer.step_s: must be a finite number, got inf",
    "sim: {learning: {gain: .nan}}": "sim.learning.gain: must be a finite number, got nan",
    "sim: {rollout: {duration: {dist: lognormal, median_s: 1.0e+308, sigma: 0.5}}}":
        "sim.rollout.duration.median_s: must be at most 10000000.0, got 1e+308",
    "sim: {rollout: {duration: {dist: lognormal, median_s: 1, sigma: 1.0e+308}}}":
        "sim.rollout.duration.sigma: must be at most 5.0",
    "sim: {rollout: {duration: {dist: empirical, values: [1, .inf]}}}": "sim.rollout.duration.values.1: ",
    "sim: {rollout: {length_sigma: 1.0e+308}}": "sim.rollout.length_sigma: must be at most 5.0",
    "sim: {rollout: {startup_capacity: 1.0e-308}}": "sim.rollout.startup_capacity: must be at least 0.001",
    "sim: {rollout: {timeout_s: .inf}}": "sim.rollout.timeout_s: must be a finite number",
    "sim: {population: {difficulty_mean: -.inf}}": "sim.population.difficulty_mean: must be a finite number",
    "sim: {learning: {initial_ability: 1.0e+308}}": "sim.learning.initial_ability: must be at most 50.0",
    "sim: {gpus: .inf}": "sim.gpus: must be a finite number",
    "train: {optimizer: {learning_rate: .inf}}": "train.optimizer.learning_rate: must be a finite number, got inf",
    "train: {workflow_config: {rollout_config: {inference_params: {temperature: .nan}}}}":
        "train.workflow_config.rollout_config.inference_params.temperature: must be a finite number",
    "train: {workflow_config: {straggler_timeout_seconds: .inf}}":
        "train.workflow_config.straggler_timeout_seconds: must be a finite number",
    "train: {loss_fn_config: {kl_coef: .nan}}": "train.loss_fn_config.kl_coef: must be a finite number, got nan",
    "train: {refill: {max_groups_per_step: 1.0e+300}}": "train.refill.max_groups_per_step: must be at most 100",
    "environments: [{name: a, success_threshold: .nan}]":
        "environments.0.success_threshold: must be a finite number, got nan",
    "environments: [{name: a, weight: 1.0e+308}, {name: b, weight: 1}]": "environments.0.weight: must be between 1e-06 and",
    "train: {seed: 100000000000000000000000}": "train.seed: must be a 64-bit integer",
    "environments: [{name: a, seed: -9223372036854775809}]": "environments.0.seed: must be a 64-bit integer",
    "environments: [{name: a, workflow_config: {group_size: 1000000000000}}]":
        "environments.0.workflow_config.group_size: must be at most 4096",
    "environments: [{name: a, dataset_kwargs: {limit: 100000000000}}]":
        "environments.0.dataset_kwargs.limit: must be at most 1000000",
    "sim: {population: {tasks: 100000000000}}": "sim.population.tasks: must be at most 1000000",
    "train: {batch_size: 65536}\nenvironments: [{name: a, workflow_config: {group_size: 4096}}]":
        "train.batch_size: 65536 groups of environments.0's 4096 rollouts make steps of 268435456 rollouts; a step "
        "may train at most 1048576",
    "train: {batch_size: 1000000000000}": "train.batch_size: must be at most 65536",
    "train: {max_staleness: 1000000000000}": "train.max_staleness: must be at most 64",
    "model: {d_model: 1000000000}": "model.d_model: must be at most 1024",
    "environments: [{name: a, env: 'builtins:dict'}]":
        "environments.0.env: builtins:dict: dict is not an environment: it has no method task_ids()",
    "environments: [{name: a, service_kwargs: {ranges: [1]}}]":
        "environments.0.service_kwargs.ranges.0: must be at least 2",
    "environments: [{name: a, dataset_kwargs: {split_name: validation}}]":
        "environments.0.dataset_kwargs.split_name: platoon-number-search has no split 'validation'",
    "environments: [{name: a, env: platoon-number-search@2}]":
        "environments.0.env: platoon-number-search is at version 1, not '2'",
    "environments: [{name: a, tasks: [t1, t2, t1]}]":
        "environments.0.tasks: task 't1' is listed twice (items 0 and 2)",
    "environments: [{name: a, sim: {population: {tasks: 1000000}}}, {name: b, sim: {population: {tasks: 1000000}}}]":
        "environments: the entries hold 2000000 training tasks in all; a run may have at most 1000000",
}


@pytest.mark.parametrize("text", OUT_OF_RANGE)
def test_non_finite_overflowing_and_huge_values_are_refused_with_their_bound(tmp_path: Path, text: str) -> None:
    refused_alike(tmp_path, write(tmp_path, text + "\n"), OUT_OF_RANGE[text])


def test_a_message_says_how_to_write_a_float_yaml_reads_as_text(tmp_path: Path) -> None:
    result = invoke("config", "validate", write(tmp_path, "sim: {trainer: {step_s: 1e3}}\n"))
    assert "sim.trainer.step_s: must be a number; YAML reads 1e3 as text" in result.output
    assert "write 1.0e+3" in result.output


def test_duplicate_task_ids_are_refused_in_an_override_too(tmp_path: Path) -> None:
    result = invoke("config", "validate", write(tmp_path, ""), "--set", "environments.0.tasks=[a, b, a]")
    assert result.exit_code == 78
    assert "override environments.0.tasks=[a, b, a]: environments.0.tasks: task 'a' is listed twice" in result.output


def test_a_run_that_fails_before_its_first_step_leaves_no_directory(tmp_path: Path, monkeypatch) -> None:
    from platoon.runs.session import RunSession

    out = tmp_path / "deep" / "run"

    def broken(self, *args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(RunDir, "write_pool", broken)  # inside SimRun.create, after the directory exists
    result = runner.invoke(app, ["simulate", "--out", str(out), *SMALL])
    assert isinstance(result.exception, RuntimeError) and not (tmp_path / "deep").exists()
    monkeypatch.undo()
    monkeypatch.setattr(RunSession, "write_row", broken)  # the first step's metrics
    result = runner.invoke(app, ["simulate", "--out", str(out), *SMALL])
    assert isinstance(result.exception, RuntimeError) and not (tmp_path / "deep").exists()
    monkeypatch.undo()
    (tmp_path / "given").mkdir()  # an empty directory given as --out is emptied again, not removed
    monkeypatch.setattr(RunSession, "write_row", broken)
    runner.invoke(app, ["simulate", "--out", str(tmp_path / "given"), *SMALL])
    assert (tmp_path / "given").is_dir() and not any((tmp_path / "given").iterdir())
    monkeypatch.undo()
    assert invoke("simulate", "--out", out, *SMALL).exit_code == 0  # nothing is in the way of the rerun


# --- item 8: no traceback ------------------------------------------------------------------------------------


def test_deeply_nested_yaml_is_refused_in_a_file_and_an_override(tmp_path: Path) -> None:
    deep = "[" * 3000 + "]" * 3000
    config = write(tmp_path, f"environments: [{{name: a, service_kwargs: {{x: {deep}}}}}]\n")
    for args in (("config", "validate", config), ("config", "show", config),
                 ("simulate", config, "--out", tmp_path / "out"),
                 ("config", "validate", write(tmp_path, "", "empty.yaml"), "--set", f"train.seed={deep}")):
        result = invoke(*args)
        assert result.exit_code == 78 and "nested more than 64 levels deep" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_a_5000_digit_integer_is_refused_in_a_file_and_an_override(tmp_path: Path) -> None:
    digits = "9" * 5000
    result = invoke("config", "validate", write(tmp_path, f"train: {{seed: {digits}}}\n"))
    assert result.exit_code == 78 and "an integer of 5000 digits; at most 100 are read" in result.output
    result = invoke("simulate", "--set", f"train.seed={digits}", "--out", tmp_path / "out")
    assert result.exit_code == 78 and "an integer of 5000 digits" in result.output
    result = invoke("simulate", "--seed", digits)  # an option's integer: a usage error (main exits 64)
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.output


BOMB = """
environments:
  - name: a
    service_kwargs:
      a: &a [x, x, x, x, x, x, x, x, x, x]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_an_alias_bomb_is_refused_at_once_by_every_command(tmp_path: Path) -> None:
    config = write(tmp_path, BOMB)
    started = time.perf_counter()
    for args in (("config", "validate", config), ("config", "show", config),
                 ("simulate", config, "--out", tmp_path / "out")):
        result = invoke(*args)
        assert result.exit_code == 78 and "aliases expand to" in result.output, result.output
    assert time.perf_counter() - started < 5
    result = invoke("config", "validate", write(tmp_path, "a: &a [1, *a]\n", "loop.yaml"))
    assert result.exit_code == 78 and "recursive alias" in result.output


def test_duplicate_keys_are_refused_naming_both_lines(tmp_path: Path) -> None:
    config = write(tmp_path, "train:\n  batch_size: 1\n  seed: 2\n  batch_size: 3\nenvironments:\n"
                             "  - {name: a, name: b}\n")
    result = invoke("config", "validate", config)
    assert result.exit_code == 78
    assert result.output.splitlines()[1:] == [  # the lines of the file as written, after log_path's
        "  train.batch_size: duplicate key, on lines 3 and 5; a key may appear once in a mapping",
        "  environments.0.name: duplicate key, on lines 7 and 7; a key may appear once in a mapping",
        # the file's other problems join them: its last values are validated
        "  train.model_name: missing required key",
        "  train.renderer_name: missing required key",
    ]
    assert invoke("simulate", config, "--out", tmp_path / "out").exit_code == 78
    merged = write(tmp_path, "x: &x {batch_size: 1}\ntrain:\n  <<: *x\n  batch_size: 2\n", "merge.yaml")
    assert "duplicate key" not in invoke("config", "validate", merged).output  # a merge key's keys may be overridden


def test_a_date_is_text_and_binary_data_is_refused(tmp_path: Path) -> None:
    ok = invoke("config", "show", write(tmp_path, "environments: [{name: 2024-05-01}]\n"))
    assert ok.exit_code == 0 and "name: '2024-05-01'" in ok.output
    bad = invoke("config", "validate", write(tmp_path, "environments: [{name: a, service_kwargs: {k: !!binary aGk=}}]\n"))
    assert bad.exit_code == 78 and "binary data is not a config value" in bad.output


@pytest.fixture()
def sim_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert invoke("simulate", "--out", out, *SMALL).exit_code == 0
    return out


def test_a_lock_without_a_config_or_with_an_invalid_one_is_refused(sim_run: Path) -> None:
    lock = json.loads((sim_run / "lock.json").read_text())
    train = {"model_name": "tiny", "renderer_name": "role_colon"}
    for config, needle in ((None, "holds no config"),
                           ({"train": {**train, "max_training_steps": "many"}},
                            "train.max_training_steps: must be an integer"),
                           ({"train": {**train, "max_training_steps": 2}, "sim": {"gpus": float("1e308")}},
                            "sim.gpus: must be at most"),
                           # a run recorded before 0.4.0's names: its lock names the keys that moved
                           ({"train": {"steps": 2}}, "train.steps: unknown key; use train.max_training_steps")):
        if config is None:
            lock.pop("config", None)
        else:
            lock["config"] = config
        for args in (("simulate", "--resume", sim_run), ("train", "--resume", sim_run), ("eval", sim_run)):
            # train and eval refuse a simulated run first (exit 64): the lock says live for them, so its config is read
            lock["runtime"] = "sim" if args[0] == "simulate" else "live"
            (sim_run / "lock.json").write_text(json.dumps(lock))
            result = invoke(*args)
            assert result.exit_code == 78 and needle in result.output, (args, result.output)
            assert "lock.json" in result.output


def test_tasks_on_a_file_and_an_export_to_a_path_that_cannot_be_written_exit_1(sim_run: Path) -> None:
    lock = sim_run / "lock.json"
    for args in (("tasks", "show", lock), ("tasks", "export", lock, "-o", sim_run / "t.csv")):
        result = invoke(*args)
        assert result.exit_code == 1 and "not a run directory" in result.output, result.output
    result = invoke("tasks", "export", sim_run, "-o", lock / "t.csv")
    assert result.exit_code == 1 and f"cannot write {lock / 't.csv'}" in result.output


def test_report_on_a_directory_that_is_not_a_run_exits_1(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    result = invoke("report", tmp_path / "notes")
    assert result.exit_code == 1 and "not a run directory" in result.output
    assert not (tmp_path / "notes" / "report").exists()


def test_the_entry_point_turns_any_other_error_into_one_line(monkeypatch, capsys) -> None:
    import platoon.config.loader as loader

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(loader, "load_config", broken)
    monkeypatch.setattr(sys, "argv", ["platoon", "config", "show"])
    monkeypatch.delenv("PLATOON_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 1 and "Traceback" not in err
    assert err.startswith("platoon: internal error: RuntimeError: a bug")


@pytest.mark.live
def test_a_live_run_that_fails_before_its_first_step_leaves_no_directory(tmp_path: Path, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from platoon.live import runtime

    async def broken(self, *args, **kwargs):
        raise RuntimeError("the trainer fell over")

    out = tmp_path / "live"
    small = ["--set", "train.max_training_steps=1", "--set", "train.batch_size=2", "--set",
             "train.workflow_config.group_size=2", "--set", "model.d_model=8", "--set", "model.n_heads=1"]
    monkeypatch.setattr(runtime.LiveRuntime, "run", broken)
    result = runner.invoke(app, ["train", "--out", str(out), *small])
    assert isinstance(result.exception, RuntimeError) and not out.exists()
    monkeypatch.undo()
    if not torch.cuda.is_available():
        result = invoke("train", "--out", out, *small, "--set", "model.device=cuda")
        assert result.exit_code == 78 and "model.device: cuda" in result.output and not out.exists()


def test_an_entry_sampler_of_the_run_s_alone_is_refused_beside_a_missing_train(tmp_path: Path) -> None:
    """Hypothesis found it: ``auto`` on an entry, with no train section, raised KeyError from the sampler's options."""
    config = tmp_path / "c.yaml"
    config.write_text("train: null\nenvironments:\n  - {name: a, task_sampler: auto}\n")
    result = runner.invoke(app, ["config", "validate", str(config)])
    assert result.exit_code == 78, result.output
    assert "train: must be a mapping" in result.output and "environments.0.task_sampler: 'auto'" in result.output
