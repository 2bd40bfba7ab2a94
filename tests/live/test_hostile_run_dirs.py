"""The commands that read a run (``report``, ``calibrate``, ``tasks show``, ``tasks export``, ``eval``) given run
directories that are broken, garbage or huge: each ends with exit 0 or 1 and a message naming what is wrong (never an
internal error), and a 2 GB garbage log costs no more memory than a clean one (lines past ``MAX_ROW_BYTES`` are
skipped without being held)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from platoon.cli import app

pytestmark = pytest.mark.live
runner = CliRunner()
CONFIG = """\
environments:
  - service_kwargs: {ranges: [4, 8]}
train: {model_name: tiny, renderer_name: role_colon, max_training_steps: 3, batch_size: 2,
        workflow_config: {group_size: 2}}
"""
READERS = {
    "report": lambda run, tmp: ["report", str(run), "--out", str(tmp / "report")],
    "calibrate": lambda run, tmp: ["calibrate", str(run)],
    "tasks show": lambda run, tmp: ["tasks", "show", str(run)],
    "tasks export": lambda run, tmp: ["tasks", "export", str(run), "--out", str(tmp / "tasks.csv")],
    "eval": lambda run, tmp: ["eval", str(run), "--n", "8"],
}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("clean")
    (tmp / "run.yaml").write_text(CONFIG)
    result = runner.invoke(app, ["train", str(tmp / "run.yaml"), "--out", str(tmp / "run")])
    assert result.exit_code == 0, result.output
    return tmp / "run"


def broken(clean: Path, tmp: Path, how: str) -> Path:
    run = tmp / how
    shutil.copytree(clean, run)
    if how == "garbage lock":
        (run / "lock.json").write_bytes(b"\xa4\x00 not json")
    elif how == "no lock":
        (run / "lock.json").unlink()
    elif how == "garbage logs":
        for name in ("metrics.jsonl", "trace.json", "tasks/events.jsonl"):
            with open(run / name, "ab") as f:
                f.write(b"\xff\xfe{not json\n" * 1000 + b"[1, 2]\n" + b"{" * 100_000 + b"\n")
    elif how == "no checkpoints":
        shutil.rmtree(run / "checkpoints")
        (run / "checkpoints").mkdir()
    elif how == "garbage pool":
        (run / "tasks" / "pool.json").write_text('{"x":')
    elif how == "a file":
        shutil.rmtree(run)
        run.write_text("garbage")
    return run


@pytest.mark.parametrize("how", ["garbage lock", "no lock", "garbage logs", "no checkpoints", "garbage pool",
                                 "a file"])
def test_every_reader_of_a_broken_run_ends_with_a_message_never_an_internal_error(clean_run, tmp_path, how):
    run = broken(clean_run, tmp_path, how)
    for command, args in READERS.items():
        result = runner.invoke(app, args(run, tmp_path))
        said = f"{command} of a run with {how}: exit {result.exit_code}\n{result.output[-2000:]}"
        assert result.exit_code in (0, 1, 64, 78), said  # 64: not a run directory at all
        assert result.exception is None or isinstance(result.exception, SystemExit), said  # no error escaped
        if result.exit_code != 0:
            assert str(run) in result.output or run.name in result.output, said  # names what is wrong


def peak_rss_mb(*args: str) -> float:
    """The peak resident memory of ``platoon ARGS`` in a child of its own (so that this process's does not count)."""
    code = ("import resource, subprocess, sys; p = subprocess.run([sys.executable, '-m', 'platoon', *sys.argv[1:]], "
            "capture_output=True); assert p.returncode == 0, p.stderr[-2000:]; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.slow
def test_a_huge_garbage_log_costs_report_and_calibrate_no_more_memory_than_a_clean_one(clean_run, tmp_path):
    """256 MiB in one line in metrics.jsonl and trace.json (2 GiB measured by hand: docs/run-directory.md)."""
    huge = tmp_path / "huge"
    shutil.copytree(clean_run, huge)
    piece = b"y" * (1 << 24)
    for name in ("metrics.jsonl", "trace.json"):
        with open(huge / name, "ab") as f:
            for _ in range(16):
                f.write(piece)
    for command in (["report", "--out", str(tmp_path / "report")], ["calibrate"]):
        clean = peak_rss_mb(command[0], str(clean_run), *command[1:])
        garbage = peak_rss_mb(command[0], str(huge), *command[1:])
        assert garbage < clean + 64, f"{command[0]}: {garbage:.0f} MB on 512 MiB of garbage, {clean:.0f} MB clean"
