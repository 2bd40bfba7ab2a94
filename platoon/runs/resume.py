"""One resume path for both runtimes (docs/run-directory.md, "Resuming a run"): what a resume checks before it changes
anything, the order it checks it in, and what it then changes.

Both ``platoon simulate --resume`` and ``platoon train --resume`` take the run's writer lock (``released_on_failure``:
given back if the resume fails), then decide (``decide``), in this order and with the run directory untouched until
every check has passed:

1. the run is one of this command's (``lock.json``'s ``runtime``): a simulated run goes on with ``simulate``, a live
   one with ``train`` (``ResumeRefused``, exit 64);
2. the checkpoint to go on from is the runtime's to choose (its ``locate``: the newest that reads back, each newer
   one passed over named with its file and problem; none: ``CheckpointError``, exit 1);
3. ``--steps`` is not below the steps its checkpoint has done (``ResumeRefused``, exit 64);
4. the run is not finished: ``lock.json``'s last ``finished`` entry is for the steps its config plans. A finished
   run is left as it is, its trackers caught up, and the command says how to extend it (``RunFinished``, exit 0);
5. the checkpoint holds what the runtime needs (its ``check``: a live run's trainer state, a simulated run's exact
   state);
6. the logs hold what the checkpoint recorded: a resume cuts ``metrics.jsonl`` and ``tasks/events.jsonl`` back to
   the lengths its row recorded and writes the rest again, so a log shorter than that (truncated, deleted) would
   end the run with steps missing and draws without a fate (``LogsLost``, exit 1).

Each runtime then builds its start from the checkpoint (what is its own: a live run's trainer and model state, a
simulated run's clock, work in flight and learning model), and only then changes the run (``commit_resume``): a note
when the lock was taken from a writer that had died, what the resume starts from and the steps a killed start did
after it (``resume_note``), the logs cut back, a new total of steps in ``lock.json``. A policy layer that cannot go on
exactly (a live run's: its rollouts ran for real) goes on by reissue (``restore_by_reissue``).

An unfinished run whose checkpoint has done every step (killed between its last checkpoint and its end) is resumed
like any other: the runtime writes what is left of its end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from platoon.config.loader import config_from_lock
from platoon.config.models import RunConfig
from platoon.config.steps import with_steps
from platoon.runs.checkpoints import CheckpointError, read_checkpoint_rows
from platoon.runs.rundir import NEEDED_LOGS, RunDir
from platoon.runs.trackers import catch_up
from platoon.runs.writer import stale_note

Log = Callable[[str, str], None]

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


class Checkpoint(Protocol):
    """What ``decide`` reads of the checkpoint a runtime's ``locate`` chose: its name, the steps it has done, its
    row in ``checkpoints.jsonl``."""

    @property
    def name(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def row(self) -> Mapping[str, Any]: ...


P = TypeVar("P", bound=Checkpoint)


@dataclass(frozen=True)
class Decided(Generic[P]):
    """A resume that passed every check: the run's ``lock.json``, its config (with the new total of ``steps``, when
    given) and the checkpoint it goes on from. Nothing was written yet."""

    lock: dict[str, Any]
    cfg: RunConfig
    point: P
    steps: int | None


@contextlib.contextmanager
def released_on_failure(rd: RunDir) -> Iterator[RunDir]:
    """Around a resume of the run ``rd`` claimed: a failure (or an interruption) gives its writer lock back."""
    try:
        yield rd
    except BaseException:
        rd.release()
        raise


def decide(rd: RunDir, path: Path, *, runtime: str, steps: int | None, locate: Callable[[RunDir], P],
           check: Callable[[P], None] | None = None, log: Log) -> Decided[P]:
    """The checks of a resume of the run ``rd`` (claimed) by ``runtime``, in the module docstring's order, before
    anything is written: CorruptFileError (lock.json), ResumeRefused, ConfigError, what ``locate`` and ``check``
    raise, RunFinished (the trackers caught up first), LogsLost."""
    lock = rd.read_lock()
    check_runtime(lock, runtime, path)
    cfg = config_from_lock(lock, str(rd.lock_path))
    point = locate(rd)
    check_steps(steps, point.step, point.name)
    try:
        check_finished(lock, steps, runtime, path)
    except RunFinished:
        catch_up(rd, cfg.stats, runtime=runtime, log=log)
        raise
    if check is not None:
        check(point)
    check_logs(rd, point.row)
    return Decided(lock, cfg if steps is None else with_steps(cfg, steps), point, steps)


def commit(rd: RunDir, decided: Decided[Any], *, runtime: str, log: Log) -> None:
    """``commit_resume`` of a decided resume: from here on it changes the run."""
    commit_resume(rd, decided.lock, decided.cfg.model_dump(mode="json"), runtime=runtime, steps=decided.steps,
                  row=decided.point.row, log=log)


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


__all__ = ["COMMANDS", "Checkpoint", "Decided", "LogsLost", "ResumeRefused", "RunFinished", "check_finished", "check_logs",
           "check_runtime", "check_steps", "commit", "commit_resume", "decide", "go_on_note", "is_finished",
           "planned_steps", "released_on_failure", "resume_note"]
