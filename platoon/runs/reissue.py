"""A policy layer that goes on from a checkpoint it cannot replay exactly: a live run's resume (docs/run-directory.md,
"Resume").

What this module owns: the policy half of a resume by reissue, after ``platoon.runs.resume.decide`` chose the
checkpoint and ``commit_resume`` cut the logs back to it. A simulated run goes on exactly instead (its whole state,
clock and work in flight included, is in its checkpoint: ``platoon.sim.run``); a live run's rollouts ran for real, so
its fresh start goes on from what the checkpoint kept:

- every step done, the end not written: the dispatcher only knows the steps are done (the runtime writes the end);
- the statistics' snapshot, or the newest older checkpoint's whose statistics read, or none; each but the first is
  said (a warning, and ``lock.json``'s ``tasks_state_lost``), and statistics that are not the checkpoint's own get
  its outstanding draws (from its dispatch state, else from the event log up to the checkpoint);
- the dispatcher resumed by reissue (``dispatch_state.resume``: kept groups first; a sampling that changed since the
  checkpoint is said, and recorded in ``lock.json``'s ``sampling_changed``), or, when its state did not read, from
  where the order stood (``dispatch_state.resume_without_state``), its outstanding draws given fate ``lost``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from platoon.policy import PolicyLayer, dispatch_state
from platoon.runs.checkpoints import stats_file_name
from platoon.runs.jsonl import iter_jsonl
from platoon.runs.rundir import RunDir

Log = Callable[[str, str], None]
Draw = tuple[int, int, str, int | None]


class ReissuePoint(Protocol):
    """What a resume by reissue reads of its checkpoint (a live run's ``ResumePoint``)."""

    step: int
    name: str
    start: int
    row: dict
    dispatch: Mapping[str, Any] | None
    snapshot: Mapping[str, Any] | None
    snapshot_from: str | None
    state_lost: Mapping[str, str]

    @property
    def version(self) -> int: ...


def restore_by_reissue(policy: PolicyLayer, rd: RunDir, point: ReissuePoint, *, log: Log) -> str | None:
    """Set the fresh start's ``policy`` layer (its dispatcher, recorder, samplers) going on from ``point`` (see the
    module docstring); what was lost goes to ``log`` and ``lock.json``. Returns what of the checkpoint did not read
    (None: nothing), for the start's event."""
    d = policy.dispatcher
    if point.step >= d.config.steps:  # every step done, the end not written: the runtime writes only the end
        dispatch_state.resume_finished(d, step=point.step)
        return None
    state_lost = _load_statistics(d, rd, point, log)
    if point.dispatch is not None:
        changes = dispatch_state.sampling_changes(d, point.dispatch)
        if changes:
            log("warning", f"the sampling changed since checkpoint {point.name}, so the draws that follow are not "
                           f"the ones the run would have made: {'; '.join(changes)}")
            rd.append_lock_list("sampling_changed", {"start": point.start, "checkpoint": point.name,
                                                     "changes": changes})
        for warning in dispatch_state.resume(d, point.dispatch, step=point.step):
            log("warning", warning)
        return state_lost
    dispatch_file = f"tasks/dispatch-{point.name}.json"
    problem = point.state_lost.get(dispatch_file, f"checkpoint {point.name} holds no dispatcher state")
    log("warning", f"the dispatcher state of checkpoint {point.name} does not read back ({problem}): its "
                   "outstanding draws are lost")
    lost = d.recorder.lose_outstanding()
    if lost:
        log("warning", f"{len(lost)} outstanding draw(s) of checkpoint {point.name} get fate lost")
    for warning in dispatch_state.resume_without_state(d, step=point.step, version=point.version,
                                                       next_position=point.row.get("next_position")):
        log("warning", warning)
    return "; ".join(p for p in (state_lost, problem) if p)


def _load_statistics(d: Any, rd: RunDir, point: ReissuePoint, log: Log) -> str | None:
    """Load the checkpoint's statistics (or an older checkpoint's, or none) into the fresh dispatcher's recorder;
    what was lost goes to the log and lock.json's ``tasks_state_lost``. Returns the problem (None: nothing lost).

    Statistics that are not the checkpoint's own get its outstanding draws (from its dispatch state, else from the
    event log up to the checkpoint), so that the resume's reissues and fates are recorded."""
    state_file = stats_file_name(point.row, point.name)
    problem = point.state_lost.get(state_file)
    loaded = point.snapshot_from
    if problem is None and point.snapshot is None:
        problem = f"checkpoint {point.name} holds no per-task statistics"
    if point.snapshot is not None:
        try:
            d.recorder.load_snapshot(dict(point.snapshot))
        except ValueError as exc:
            problem = f"{problem}; " if problem else ""
            problem += f"the statistics of checkpoint {loaded} do not load ({exc})"
            loaded = None
    if problem is None:
        return None
    log("warning", f"the per-task statistics of checkpoint {point.name} are lost ({problem}); "
                   + (f"they come from checkpoint {loaded}" if loaded else "they start empty"))
    rd.append_lock_list("tasks_state_lost", {"start": point.start, "checkpoint": point.name,
                                             "problem": problem, "loaded": loaded})
    if point.dispatch is not None:
        draws = [(s, q, t, p) for s, q, t, p in point.dispatch.get("outstanding", [])]
    else:
        draws = open_draws(rd, point.row)
    d.recorder.replace_outstanding(draws)
    return problem


def open_draws(rd: RunDir, row: Mapping[str, Any]) -> list[Draw]:
    """The draws ``tasks/events.jsonl`` leaves open at the checkpoint ``row`` (up to the length it recorded): drawn,
    neither given a fate nor reissued, as ``(start, seq, task_id, position)`` in draw order."""
    length = (row.get("logs") or {}).get("tasks/events.jsonl")
    open_: dict[tuple[int, int], tuple[str, int | None]] = {}
    for event in iter_jsonl(rd.events_path, limit=length if isinstance(length, int) else None):
        key = (event.get("start"), event.get("seq"))
        kind = event.get("event")
        if kind == "draw" and isinstance(event.get("task_id"), str):
            if isinstance(event.get("reissues"), list) and len(event["reissues"]) == 2:
                open_.pop(tuple(event["reissues"]), None)
            open_[key] = (event["task_id"], event.get("position"))
        elif kind == "fate":
            open_.pop(key, None)
    return [(s, q, t, p) for (s, q), (t, p) in sorted(open_.items())]


__all__ = ["ReissuePoint", "open_draws", "restore_by_reissue"]
