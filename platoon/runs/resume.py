"""What a resume checks before it changes anything (docs/run-directory.md, "Resuming a run").

Both ``platoon simulate --resume`` and ``platoon train --resume`` take the run's writer lock, then decide, in this
order and with the run directory untouched until every check has passed:

1. the run is one of this command's (``lock.json``'s ``runtime``): a simulated run goes on with ``simulate``, a live
   one with ``train`` (``ResumeRefused``, exit 64);
2. ``--steps`` is not below the steps its checkpoint has done (``ResumeRefused``, exit 64);
3. the run is not finished: ``lock.json``'s last ``finished`` entry is for the steps its config plans. A finished
   run is left as it is and the command says how to extend it (``RunFinished``, exit 0);
4. the logs hold what the checkpoint recorded: a resume cuts ``metrics.jsonl`` and ``tasks/events.jsonl`` back to
   the lengths its row recorded and writes the rest again, so a log shorter than that (truncated, deleted) would
   end the run with steps missing and draws without a fate (``LogsLost``, exit 1).

An unfinished run whose checkpoint has done every step (killed between its last checkpoint and its end) is resumed
like any other: the runtime writes what is left of its end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from platoon.runs.checkpoints import CheckpointError, read_checkpoint_rows
from platoon.runs.rundir import NEEDED_LOGS, RunDir
from platoon.runs.writer import stale_note

COMMANDS = {"sim": "platoon simulate", "live": "platoon train"}
KINDS = {"sim": "a simulated run", "live": "a live run"}


class ResumeRefused(ValueError):
    """A ``--resume`` that cannot be done as asked (exit 64): the run is the other runtime's, or ``--steps`` is
    below what its checkpoint has done. Nothing was changed."""


class RunFinished(Exception):  # noqa: N818 - an outcome, not an error: the command exits 0 with its message
    """The run is finished (its plan's steps done and its end written); nothing was changed. ``str()`` says how to
    extend it."""


class LogsLost(CheckpointError):
    """A log is shorter than the checkpoint recorded (truncated or deleted): resuming would lose what it lacks."""


def planned_steps(lock: Mapping[str, Any]) -> int | None:
    """The run's planned steps as ``lock.json`` records them (``steps``, written with the config), or None."""
    steps = lock.get("steps")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def check_runtime(lock: Mapping[str, Any], runtime: str, path: Path) -> None:
    """Refuse a run that ``lock.json`` says another runtime wrote (a lock without ``runtime`` passes)."""
    found = lock.get("runtime")
    if isinstance(found, str) and found != runtime and found in COMMANDS:
        raise ResumeRefused(f"{path} is {KINDS[found]} (lock.json: runtime {found}), not {KINDS[runtime]}: go on "
                            f"with it with {COMMANDS[found]} --resume {path}")


def check_steps(steps: int | None, done: int, checkpoint: str) -> None:
    """Refuse a new total below the steps the checkpoint has done."""
    if steps is not None and steps < done:
        raise ResumeRefused(f"--steps {steps}: the checkpoint {checkpoint} has already done {done} steps")


def is_finished(lock: Mapping[str, Any], steps: int | None = None) -> bool:
    """True when the run's last ``finished`` entry is for ``steps`` (default: the planned steps lock.json records)."""
    entries = lock.get("finished")
    target = planned_steps(lock) if steps is None else steps
    if not isinstance(entries, list) or not entries or not isinstance(entries[-1], Mapping):
        return False
    return target is not None and entries[-1].get("steps") == target


def check_finished(lock: Mapping[str, Any], steps: int | None, runtime: str, path: Path) -> None:
    """Raise RunFinished when the run is finished and ``steps`` (the asked total, None: as planned) asks no more."""
    planned = planned_steps(lock)
    if planned is None or (steps is not None and steps != planned) or not is_finished(lock):
        return
    command = COMMANDS.get(runtime, "platoon")
    raise RunFinished(f"{path} is finished: its {planned} steps are done, nothing to resume. To go on, give a new "
                      f"total: {command} --resume {path} --steps N (N > {planned})")


def check_logs(rd: RunDir, row: Mapping[str, Any]) -> None:
    """Raise LogsLost when a log is missing or shorter than the checkpoint ``row`` recorded (a row without ``logs``,
    from platoon 0.4.0 and older, is not checked)."""
    lengths = row.get("logs")
    if not isinstance(lengths, Mapping):
        return
    name = row.get("name", "?")
    for log in NEEDED_LOGS:
        want = lengths.get(log)
        if not isinstance(want, int) or isinstance(want, bool) or want <= 0:
            continue
        path = rd.log_path(log)
        try:
            have = path.stat().st_size
        except FileNotFoundError:
            raise LogsLost(f"{log} is missing, but the resume needs the {want} bytes of it that checkpoint {name} "
                           f"recorded: restore the file to resume the run", path=path) from None
        if have < want:
            raise LogsLost(f"{log} holds {have} bytes, fewer than the {want} that checkpoint {name} recorded (it "
                           "was truncated): the resume needs them; restore the file to resume the run", path=path)


def resume_note(rd: RunDir, row: Mapping[str, Any]) -> str:
    """What a resume from the checkpoint ``row`` starts from, and the steps it runs again: those whose rows
    ``metrics.jsonl`` holds past the length the checkpoint recorded (a killed start wrote them after it)."""
    name, step = row.get("name", "?"), row.get("step", "?")
    note = f"resuming {rd.path} from checkpoint {name} (step {step})"
    length = (row.get("logs") or {}).get("metrics.jsonl")
    if not isinstance(length, int) or isinstance(length, bool):
        return note
    try:
        with open(rd.metrics_path, "rb") as f:
            f.seek(length)
            tail = f.read()
    except OSError:
        return note
    redone = set()
    for line in tail.splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            s = json.loads(line).get("step")
            if isinstance(s, int) and not isinstance(s, bool):
                redone.add(s)
    if redone:
        span = f"step {min(redone)}" if len(redone) == 1 else f"steps {min(redone)}-{max(redone)}"
        note += f"; {span}, done after it, run again (checkpoint.recovery_every sets how often one is saved)"
    return note


def go_on_note(run: Path) -> str | None:
    """What the interrupted run ``run`` has saved and the command that goes on with it; None where it holds no run
    (a new run that failed was removed)."""
    rd = RunDir(run)
    try:
        runtime = rd.read_lock().get("runtime")
        rows = [r for r in read_checkpoint_rows(rd) if isinstance(r.get("step"), int)]
    except (OSError, ValueError):
        return None
    if not rows:
        return f"{run} holds no checkpoint yet: nothing to go on from (start it again)"
    command = {**COMMANDS, "sft": "platoon sft"}.get(str(runtime), "platoon train")
    newest = rows[-1]
    return (f"saved: checkpoint {newest.get('name', '?')} (step {newest['step']}) in {run}; go on with: "
            f"{command} --resume {run}")


def commit_resume(rd: RunDir, lock: Mapping[str, Any], config: Mapping[str, Any], *, runtime: str,
                  steps: int | None, row: Mapping[str, Any], log: Callable[[str, str], None]) -> None:
    """The half of a resume that changes the run, once every check passed and the start is built (both runtimes'):
    say so when the lock was taken from a writer that had died, cut the logs back to the lengths the checkpoint
    ``row`` recorded (what a killed start wrote after it is written again), and record a new total of ``steps``
    in ``lock.json`` (``config``: the run's config as it now plans); it says what it starts from (``resume_note``)."""
    if rd.writer is not None and (note := stale_note(rd.writer)):
        log("info", note)
    log("info", resume_note(rd, row))
    rd.cut_logs(row.get("logs") or {})
    if steps is not None and steps != planned_steps(lock):
        rd.write_lock(dict(config), list(lock.get("components", [])), {"runtime": runtime, "steps": steps})


__all__ = ["COMMANDS", "LogsLost", "ResumeRefused", "RunFinished", "check_finished", "check_logs", "check_runtime",
           "check_steps", "commit_resume", "go_on_note", "is_finished", "planned_steps", "resume_note"]
