"""docs/metrics.md: its names are the columns both runtimes write, no quantity both measure keeps a runtime's
prefix, and its example runs as written.

The doc's metric tables (headed ``| metric | runtime |``) give a name or pattern in backticks in their first cell
and ``both``, ``sim`` or ``live`` in their second. In a pattern ``<label>``, ``<column>``, ``<k>``, ``<reason>``
and ``<name>`` stand for a part of a name, ``{a,b}`` for one of the words and ``[...]`` for a part that may be left
out.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
RUNTIMES = ("both", "sim", "live")
PLACEHOLDERS = {"<label>": r"[^/]+", "<column>": r"[^/]+", "<k>": r"[0-9]+", "<reason>": r"[a-z][a-z0-9_]*", "<name>": r"[^/]+"}

# The quantities both runtimes measure, by the names the simulator and the live runtime wrote before they shared one
# vocabulary: none of them may be documented, nor match a documented pattern.
OLD_NAMES = ("sim/permit_busy_share", "sim/permit_idle_share", "live/permit_busy_share", "sim/trainer_idle_share",
             "live/trainer_idle_share", "sim/rollouts", "live/rollouts", "sim/rollouts_per_hour",
             "sim/wasted_rollouts/stale", "sim/wasted_rollouts/rejected", "sim/wasted_rollouts/failed",
             "sim/wasted_rollouts/cancelled", "sim/staleness/0", "sim/staleness_mean")

# What a step's row of each runtime must hold (docs/metrics.md: the runtime's own measurements, beside the policy
# layer's, which both runtimes write through the same code).
SHARED = ("rollout_client/permit_busy_share", "train/trainer_idle_share", "train/rollouts", "train/rollouts_per_hour",
          "train/wasted_rollouts/stale", "train/wasted_rollouts/rejected", "train/wasted_rollouts/failed",
          "train/wasted_rollouts/cancelled", "train/staleness/0", "train/staleness_mean", "train/reward_mean",
          "train/pass_rate", "train/informative_share")
SIM_ONLY = ("sim/simulated_seconds", "sim/gpu_hours", "sim/train_pass_rate_mean")


def documented() -> list[tuple[str, str]]:
    """(name or pattern, runtime) for every name in the first cell of a metric table's row, in the doc's order."""
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| metric | runtime |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows += [(name, cells[1]) for name in re.findall(r"`([^`]+)`", cells[0])]
    return rows


def regex(name: str) -> re.Pattern:
    """A documented name or pattern as a regular expression matching the whole of a metric's name."""
    out = []
    for token in re.findall(r"<[a-z]+>|\{[^}]*\}|\[|\]|[^<{\[\]]+", name):
        if token.startswith("<"):
            out.append(PLACEHOLDERS[token])
        elif token.startswith("{"):
            out.append("(?:" + "|".join(re.escape(w.strip()) for w in token[1:-1].split(",")) + ")")
        elif token == "[":
            out.append("(?:")
        elif token == "]":
            out.append(")?")
        else:
            out.append(re.escape(token))
    return re.compile("".join(out))


def undocumented(columns, runtime: str) -> list[str]:
    """The columns that match no documented name of ``runtime`` (or of ``both``)."""
    patterns = [regex(name) for name, who in documented() if who in ("both", runtime)]
    return sorted(c for c in columns if not any(p.fullmatch(c) for p in patterns))


def test_the_doc_names_every_metric_once_with_its_runtime():
    rows = documented()
    assert len(rows) >= 70
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a name documented twice"
    for name, runtime in rows:
        assert runtime in RUNTIMES, (name, runtime)
        regex(name)  # every placeholder is known
    assert ("step", "both") in rows and ("time", "both") in rows
    assert regex("train/sampler[/environment/<label>]/draws/<reason>").fullmatch(
        "train/sampler/environment/hard--large/draws/explore")


def test_no_quantity_both_runtimes_measure_keeps_a_runtimes_prefix():
    rows = documented()
    for name, runtime in rows:
        assert not name.startswith("live/"), name
        if name.startswith("sim/"):
            assert runtime == "sim", name
        if name.startswith("trainer/"):
            assert runtime == "live", name
        if runtime == "both":
            assert not name.startswith(("sim/", "live/", "trainer/")), name
    assert {name for name, runtime in rows if runtime == "sim"} == set(SIM_ONLY)
    patterns = [regex(name) for name, _ in rows]
    for old in OLD_NAMES:
        assert not any(p.fullmatch(old) for p in patterns), f"{old} is still documented"
    for name in SHARED:
        assert any(regex(n).fullmatch(name) and r == "both" for n, r in rows), name


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """The doc's yaml and console blocks run as written (a simulated run, a live one, their report) in a fresh
    directory; the directory."""
    where = tmp_path_factory.mktemp("metrics-doc")
    [config] = blocks("yaml")
    (where / "run.yaml").write_text(config, encoding="utf-8")
    commands = [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]
    assert [shlex.split(c)[1] for c in commands] == ["simulate", "train", "report"]
    with contextlib.chdir(where):
        for command in commands:
            argv = shlex.split(command)
            assert argv[0] == "platoon"
            result = CliRunner().invoke(app, argv[1:])
            assert result.exit_code == 0, f"{command}\n{result.output}"
    return where


def rows_of(run: Path) -> tuple[set[str], list[dict]]:
    """The columns of a run's ``metrics.jsonl``, and its steps' rows (not the final evaluation's)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [row for row in rows if "rollout_client/concurrency_achieved_fraction" in row]
    return {k for row in rows for k in row}, steps


@pytest.mark.slow
def test_every_column_of_a_simulated_run_is_documented(example):
    columns, steps = rows_of(example / "runs/sim")
    assert undocumented(columns, "sim") == []
    for name in (*SHARED, *SIM_ONLY, "train/sampler/decision_ms"):
        assert all(name in row for row in steps), f"a step's row has no {name}"
    assert any("train/batch/censoring/censored_share" in row for row in steps)  # the example covers the straggler
    assert any("rollout_client/start_limit/starting_mean" in row for row in steps)  # ... the start limit
    assert any("train/admission/environment/hard--large/admitted" in row for row in steps)  # ... the rule, entries


@pytest.mark.slow
@pytest.mark.live
def test_every_column_of_a_live_run_is_documented(example):
    columns, steps = rows_of(example / "runs/live")
    assert undocumented(columns, "live") == []
    for name in SHARED:
        assert all(name in row for row in steps), f"a step's row has no {name}"
    # logged for the steps in which a sampler decided (a step whose draws were all made before it logs none)
    assert any("train/sampler/decision_ms" in row for row in steps)
    assert any(c.startswith("trainer/") for c in columns) and "eval/pass@1_ci_low" in columns


@pytest.mark.slow
@pytest.mark.live
def test_the_python_example_runs_and_the_report_has_no_blank_for_the_live_run(example, monkeypatch):
    monkeypatch.chdir(example)
    [block] = blocks("python")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(DOC), "exec"), {})
    text = out.getvalue()
    assert text.startswith("sim\n") and "\nlive\n" in text and "train/trainer_idle_share" in text
    summary = (example / "runs/sim/report/summary.md").read_text(encoding="utf-8").splitlines()
    assert summary[0] == "| | sim | live |"
    for line in summary[2:]:
        label, sim, live = (c.strip() for c in line.strip("|").split("|"))
        assert live != "-", line
