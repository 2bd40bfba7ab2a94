"""`platoon tasks show|export` over a run directory written with the run-directory writers."""

import csv
import json
import sys
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from platoon.cli import app
from platoon.policy.task_table import TASK_COLUMNS
from platoon.runs.checkpoints import save_checkpoint
from platoon.runs.rundir import RunDir

sys.path.insert(0, str(Path(__file__).parent / "policy"))
from dispatch_harness import Script, build  # noqa: E402

runner = CliRunner()


def make_run(tmp_path):
    s = Script(build(tasks=6, steps=3, batch_size=2, group_size=4)).run()
    rd = RunDir.create(tmp_path / "run")
    rd.write_pool([(r.task_id, r.entry, r.label) for r in s.d.pool.rows])
    snap = s.d.recorder.snapshot()
    save_checkpoint(rd, 3, {"tasks/state-3.json": snap}, {"policy_version": s.d.version})
    return rd.path


def test_show_prints_the_header_and_one_line_per_task_with_a_group(tmp_path):
    run = make_run(tmp_path)
    result = runner.invoke(app, ["tasks", "show", str(run), "--sort", "groups"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{run}: checkpoint 000003, policy version 3: ")
    assert lines[0].endswith("of 6 tasks have a settled group")
    n = int(lines[0].split(": ")[-1].split()[0])
    assert len(lines) == n + 2


def test_export_csv_jsonl_parquet(tmp_path):
    run = make_run(tmp_path)
    for name in ("t.csv", "t.jsonl", "t.parquet"):
        out = tmp_path / name
        result = runner.invoke(app, ["tasks", "export", str(run), "-o", str(out)])
        assert result.exit_code == 0, result.output
    with open(tmp_path / "t.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == TASK_COLUMNS and len(rows) == 6
    assert b"\r\n" not in (tmp_path / "t.csv").read_bytes()
    jl = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in jl] == [r["task_id"] for r in rows]
    assert list(pd.read_parquet(tmp_path / "t.parquet").columns) == list(TASK_COLUMNS)


def test_a_run_without_a_readable_checkpoint_exits_1(tmp_path):
    rd = RunDir.create(tmp_path / "empty")
    result = runner.invoke(app, ["tasks", "show", str(rd.path)])
    assert result.exit_code == 1
