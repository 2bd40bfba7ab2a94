"""What a resume says it starts from: the checkpoint, its step, and the steps a killed start had done past it."""

from __future__ import annotations

import json
from pathlib import Path

from platoon.runs import RunDir
from platoon.runs.resume import resume_note


def _run(tmp_path: Path, steps: list[int]) -> RunDir:
    rd = RunDir(tmp_path)
    rd.metrics_path.write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
    return rd


def _row(rd: RunDir, rows_kept: int, step: int) -> dict:
    kept = "".join(rd.metrics_path.read_text().splitlines(keepends=True)[:rows_kept])
    return {"name": f"{step:06d}", "step": step, "logs": {"metrics.jsonl": len(kept.encode())}}


def test_a_resume_names_its_checkpoint_and_the_steps_it_runs_again(tmp_path: Path) -> None:
    rd = _run(tmp_path, [0, 1, 2, 3, 4, 5])
    assert resume_note(rd, _row(rd, 3, 3)) == (
        f"resuming {tmp_path} from checkpoint 000003 (step 3); steps 3-5, done after it, run again "
        "(checkpoint.recovery_every sets how often one is saved)")
    assert resume_note(rd, _row(rd, 5, 5)).endswith("(step 5); step 5, done after it, run again "
                                                   "(checkpoint.recovery_every sets how often one is saved)")
    assert resume_note(rd, _row(rd, 6, 6)) == f"resuming {tmp_path} from checkpoint 000006 (step 6)"
    assert resume_note(rd, {"name": "000002", "step": 2}) == f"resuming {tmp_path} from checkpoint 000002 (step 2)"
