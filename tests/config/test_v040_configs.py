"""platoon 0.4.0 users' training configs load here as they load in 0.4.0: the same exit code of
``platoon config validate``, and every problem 0.4.0 names reported here under the same key path.

The configs and 0.4.0's verdicts on them are fixtures (``tests/fixtures/v040``; its README says how the verdicts were
recorded). 0.4.0 may stop at its first kind of problem where this project reports every one, so the check is that each
of 0.4.0's key paths is among this project's, not that the reports are equal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v040"
CONFIGS = sorted((FIXTURES / "configs").glob("*.yaml"))
VERDICTS: dict[str, dict] = json.loads((FIXTURES / "verdicts.json").read_text())

# A problem line of `config validate`: two spaces, a dotted key path (an entry as .N), a colon or a space, the message.
PROBLEM = re.compile(r"^  (?P<path>[A-Za-z_][\w-]*(?:\.[\w-]+)*)(?::\s|\s)")
# The verdict kept for each way of running validate: with the components resolved (the default) or --no-resolve.
MODES = {"resolve": (), "no_resolve": ("--no-resolve",)}

runner = CliRunner()


def verdict_of(name: str, mode: str) -> dict:
    verdict = VERDICTS[name]
    return verdict if mode == "resolve" else verdict["no_resolve"]


def problem_paths(stdout: str) -> list[str]:
    """The key paths of the problems `config validate` printed for one file (its warnings left out)."""

    lines = stdout.splitlines()[1:]
    return [
        match["path"]
        for line in lines
        if not line.startswith("  warning:") and (match := PROBLEM.match(line))
    ]


def reported(expected: dict, paths: list[str]) -> bool:
    """Whether one of ``paths`` is 0.4.0's key path of a problem, or one it accepts in its place (``also``: the key
    whose value caused it), or a key inside one of those."""

    wanted = [expected["path"], *expected.get("also", [])]
    return any(path == key or path.startswith(f"{key}.") for path in paths for key in wanted)


def test_every_fixture_config_has_a_verdict() -> None:
    assert sorted(VERDICTS) == [path.name for path in CONFIGS]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_validate_agrees_with_v040(config: Path, mode: str) -> None:
    expected = verdict_of(config.name, mode)
    result = runner.invoke(app, ["config", "validate", *MODES[mode], str(config)])
    assert result.exit_code == expected["exit"], result.stdout
    paths = problem_paths(result.stdout)
    missing = [problem["printed"] for problem in expected["problems"] if not reported(problem, paths)]
    assert not missing, f"0.4.0's problems not reported here: {missing}\nhere:\n{result.stdout}"


def test_valid_configs_load_and_invalid_ones_fail_in_v040() -> None:
    """The fixtures' names say what 0.4.0 made of them, so a regenerated verdict that disagrees is noticed."""

    for config in CONFIGS:
        assert (VERDICTS[config.name]["exit"] == 0) == config.name.startswith("valid_"), config.name


# --- the valid ones run: simulate unchanged, train with the model pointed at one here ----------------------------

VALID = [path for path in CONFIGS if path.name.startswith("valid_")]
PLANNED = [path for path in VALID if not VERDICTS[path.name]["train_problems"]]
"""The valid configs 0.4.0's ``train`` also starts (one sets no duration, which 0.4.0 validates and train refuses)."""


@pytest.mark.slow
@pytest.mark.parametrize("config", VALID, ids=lambda path: path.stem)
def test_simulate_runs_a_valid_config_unchanged(config: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run")])
    if config in PLANNED:
        assert result.exit_code == 0, result.stdout + result.stderr
        assert (tmp_path / "run" / "metrics.jsonl").stat().st_size > 0
    else:  # 0.4.0's train refuses it, with the words simulate and train say here
        assert result.exit_code == 78 and f"invalid config {config}:" in result.stderr
        assert [f"  {problem}" for problem in VERDICTS[config.name]["train_problems"]] == result.stderr.splitlines()[1:]
        assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small randomly initialised Hugging Face causal LM in a local directory (no downloads)."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from live_harness import save_tiny_llama, save_word_tokenizer

    from platoon.live.agent.harness import tiny_tokenizer
    from platoon.live.envs import NumberSearch

    path = save_tiny_llama(tmp_path_factory.mktemp("local-llama"))
    return save_word_tokenizer(path, tiny_tokenizer([NumberSearch()]).pieces)


@pytest.mark.slow
@pytest.mark.live
@pytest.mark.parametrize("config", PLANNED, ids=lambda path: path.stem)
def test_train_runs_a_valid_config_with_only_the_model_pointed_here(config: Path, local_model: Path,
                                                                   tmp_path: Path) -> None:
    # role_colon over the checkpoint's own (word-level) tokenizer, which has no chat template for 0.4.0's renderer
    # names to render with; --steps 2 keeps the test short
    result = runner.invoke(app, ["train", str(config), f"train.model_name={local_model}",
                                 "train.renderer_name=role_colon", "train.renderer_kwargs={}", "--steps", "2",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {row["step"] for row in rows} >= {0, 1}  # two steps of the local model
    # a step updates the model only when its groups scored differently, and a random model rarely writes a call
    assert {row["step"] for row in rows if "trainer/grad_norm" in row} <= {0, 1}
