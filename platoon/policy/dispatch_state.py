"""The dispatcher's checkpoint state: format 2 (reads format 1 too), exact snapshots, and resume by reissue.

Two ways back from a checkpoint:

- **exact** (``restore_exact``): the snapshot holds everything — running groups and their leases, settled groups not
  yet dequeued, the pending start, gauges. A runtime that can also restore its own work in flight (the simulator,
  whose rollouts are functions of the seed) continues as if nothing happened; a twin restored from a snapshot taken
  at any instant and fed the same remaining events makes the same decisions.
- **reissue** (``resume``): a new process start cannot restore rollouts that were running (the live backend). Settled,
  unconsumed groups (``kept``) are trained first with their original keys; every other outstanding draw, in
  ``(start, seq)`` order, is drawn again as a new draw of this start at its old position (reason ``reissue``),
  before any new position; a draw whose task left the pool is ``lost``.

The format-2 fields (``outstanding``, ``waiting``, ``drawn``, ``tokens``, ``fallback_slots``, ``samplers``, ``kept``)
are written for every checkpoint; ``exact`` holds the rest. Format 1 (0.3.0) has no ``drawn``/``tokens``/
``samplers``: its reissues take the first row of their task and sampler counts are recomputed from the position.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from platoon.policy.dispatch_metrics import DispatchGauges, StaleWatch
from platoon.policy.dispatch_records import BoundDraw, PendingKind, PendingStart, StepPhase
from platoon.policy.fingerprint import fingerprint_changes, sampling_fingerprint
from platoon.policy.outputs import SettledGroup
from platoon.policy.permits import DrawLease
from platoon.policy.samplers.runtime import Token

if TYPE_CHECKING:  # the dispatcher imports this module for its state_dict; only the type goes the other way
    from platoon.policy.dispatcher import Dispatcher

STATE_FORMAT = 2
STATE_FORMATS = (1, 2)


def _label_key(label: str | None) -> str:
    return "" if label is None else label


def state_dict(d: Dispatcher) -> dict[str, Any]:
    """The JSON-safe format-2 state of ``d`` (with the ``exact`` section for exact restores)."""
    pending_token = d.pending.token if d.pending is not None else None
    tokens: dict[str, list[int]] = {}
    if pending_token is not None:
        tokens.setdefault(pending_token.entry, []).append(pending_token.position)
    for entry, queue in d.mixture.tokens.items():
        tokens.setdefault(entry, []).extend(t.position for _, t in queue)
    fallback = [t.position for q in d.mixture.tokens.values() for _, t in q if t.fallback]
    if pending_token is not None and pending_token.fallback:
        fallback.insert(0, pending_token.position)
    kept = [g for g in d.queue if g.kind != "marker"]
    return {
        "format": STATE_FORMAT,
        "start": d.start_number,
        "sampler": d.samplers.run_name,
        "fingerprint": sampling_fingerprint(d),
        "next_position": d.next_position,
        "policy_version": d.next_version,
        "outstanding": [[*dr.key, dr.task_id, dr.position] for dr in d.outstanding.values()],
        "drawn": [[*dr.key, dr.row, dr.sampler] for dr in d.outstanding.values()],
        "waiting": {_label_key(lb): [list(dr.key) for _, dr in q] for lb, q in d.mixture.backlogs.items() if q},
        "tokens": {e: p for e, p in tokens.items() if p},
        "fallback_slots": fallback,
        "samplers": d.samplers.state_dict(),
        "kept": {"groups": [list(g.key) for g in kept]} if kept else None,
        "exact": _exact(d),
    }


def _exact(d: Dispatcher) -> dict[str, Any]:
    pending = None
    if d.pending is not None:
        p = d.pending
        pending = {"kind": p.kind.value, "lease": p.lease.state_dict(),
                   "draw": None if p.draw is None else list(p.draw.key),
                   "token": None if p.token is None else [p.token.position, p.token.entry, p.token.fallback]}
    return {
        "phase": d.phase.value, "step": d.step, "version": d.version, "next_seq": d.next_seq, "now": d.now,
        **d.horizon.state_dict(), **d.mixture.state_dict(),
        "draws": [dr.to_json() for dr in d.outstanding.values()],
        "running": [[list(k), dr.to_json(), lease.state_dict()] for k, (dr, lease) in d.running.items()],
        "queue": [g.to_json() for g in d.queue],
        "step_items": [g.to_json() for g in d.step_items],
        "pending": pending,
        "permits": d.permits.state_dict(),
        "teardowns": [[list(k), [[i, t] for i, t in w.items()]] for k, w in d.teardowns.items()],
        "gauges": d.gauges.state_dict(),
        "stale_watch": d.stale_watch.state_dict(),
        "said": sorted(d.said),
        "skipped_slots": d.skipped_slots,
        "skipped_rows": [[_label_key(lb), n] for lb, n in d.skipped_rows.items()],
    }


def check_format(state: Mapping[str, Any], source: str = "dispatch state") -> int:
    """The state's format; ValueError naming ``source`` when it is not one this release reads."""
    fmt = state.get("format") if isinstance(state, Mapping) else None
    if fmt not in STATE_FORMATS:
        raise ValueError(f"{source}: unknown dispatch state format {fmt!r} (this platoon reads {STATE_FORMATS})")
    return fmt


def restore_exact(d: Dispatcher, state: Mapping[str, Any]) -> None:
    """Make the freshly built ``d`` equal to the dispatcher that wrote ``state`` (the run's statistics are restored
    separately from their snapshot, which was taken at the same instant)."""
    check_format(state)
    if "exact" not in state:
        raise ValueError("dispatch state has no exact section: resume it with resume(), not restore_exact()")
    x = state["exact"]
    d.phase = StepPhase(x["phase"])
    for name in ("step", "version", "next_seq", "now"):
        setattr(d, name, x[name])
    d.horizon.load_state_dict(x)
    d.start_number = state["start"]
    d.next_position = state["next_position"]
    d.samplers.restore(state["samplers"], state["next_position"])
    draws = {tuple(dj[0]): BoundDraw.from_json(dj) for dj in x["draws"]}
    d.outstanding = draws
    leases: dict[tuple[int, int], DrawLease] = {}
    d.running = {}
    for key, dj, lease_state in x["running"]:
        lease = DrawLease.from_state(lease_state)
        leases[lease.key] = lease
        d.running[tuple(key)] = (draws.get(tuple(key)) or BoundDraw.from_json(dj), lease)
    d.queue = deque(SettledGroup.from_json(g) for g in x["queue"])
    d.step_items = [SettledGroup.from_json(g) for g in x["step_items"]]
    d.mixture.load_state_dict(x, draws)
    d.pending = None
    if x["pending"] is not None:
        p = x["pending"]
        lease = DrawLease.from_state(p["lease"])
        leases[lease.key] = lease
        token = None if p["token"] is None else Token(*p["token"])
        d.pending = PendingStart(PendingKind(p["kind"]), lease, draws[tuple(p["draw"])] if p["draw"] is not None else None, token)
    d.permits.load_queue(x["permits"], leases)
    d.teardowns = {tuple(k): {int(i): float(t) for i, t in w} for k, w in x["teardowns"]}
    d.gauges = DispatchGauges.from_state(x["gauges"])
    d.stale_watch = StaleWatch.from_state(x["stale_watch"])
    d.said = set(x["said"])
    d.skipped_slots = x["skipped_slots"]
    d.skipped_rows = {None if lb == "" else lb: int(n) for lb, n in x.get("skipped_rows", [])}


def resume(d: Dispatcher, state: Mapping[str, Any], *, step: int, kept_outputs: bool = True) -> list[str]:
    """Set up the fresh dispatcher ``d`` (a new start) to go on from ``state``, reissuing what was in flight.

    ``step`` is the checkpoint's step (the next step to assemble); the policy version is the state's
    ``policy_version`` (less than ``step`` after steps that trained no group), else ``step``. Returns warnings.
    The statistics must already hold the checkpoint's snapshot (their outstanding draws are moved to new keys).
    """
    fmt = check_format(state)
    warnings: list[str] = []
    d.step = step
    version = state.get("policy_version")
    d.version = version if isinstance(version, int) and not isinstance(version, bool) else step
    d.next_position = int(state.get("next_position", step * d.config.batch_size))
    if fmt >= 2 and "samplers" in state:
        warnings += d.samplers.restore(state["samplers"], d.next_position)
    else:
        warnings += d.samplers.restore(None, d.next_position)
    exact = state.get("exact") or {}
    kept_keys = {tuple(k) for k in (state.get("kept") or {}).get("groups", [])}
    kept_items = [SettledGroup.from_json(g) for g in exact.get("queue", []) if tuple(g["key"]) in kept_keys]
    drawn = {(s, q): (row, sampler) for s, q, row, sampler in state.get("drawn", [])}
    waiting = {tuple(k) for keys in state.get("waiting", {}).values() for k in keys}
    reissue, backlog = [], []
    for s, q, task_id, position in state["outstanding"]:
        key = (s, q)
        if key in {g.key for g in kept_items} and kept_outputs:
            continue
        (backlog if key in waiting else reissue).append((key, task_id, position))
    for item in kept_items if kept_outputs else []:
        if d.pool.first_index(item.task_id) is not None:
            d.outstanding[item.key] = BoundDraw(item.key, d.pool.first_index(item.task_id), item.task_id, item.entry,
                                            d.pool.rows[d.pool.first_index(item.task_id)].label, item.position,
                                            item.record.group_size, (item.record.drawn_at or {}).get("main", 0),
                                            item.record.sampler, item.record.reason, item.record.score)
            d.queue.append(item)
            d.horizon.reserved()
        else:
            d.recorder.fate(*item.key, "lost", task_id=item.task_id)
    for key, task_id, position in sorted(reissue) + backlog:
        row_index = _find_row(d, task_id, drawn.get(key, (None, None))[0])
        if row_index is None:
            d.recorder.fate(*key, "lost", task_id=task_id)
            continue
        sampler = drawn.get(key, (None, None))[1] or d.samplers.run_name
        _reissue(d, key, row_index, position, sampler)
    warnings += _restore_tokens(d, state.get("tokens", {}), set(state.get("fallback_slots", [])))
    return warnings


def resume_without_state(d: Dispatcher, *, step: int, version: int, next_position: object = None) -> list[str]:
    """Set up the fresh dispatcher ``d`` to go on at ``step`` (policy ``version``) when its checkpoint's dispatch
    state did not read: the order draws on from ``next_position`` (a checkpoint row's, under a group admission rule),
    else from ``step x batch_size``; the samplers start where that position puts them. Returns warnings."""
    d.step, d.version = step, version
    d.next_position = next_position if isinstance(next_position, int) else step * d.config.batch_size
    return d.samplers.restore(None, d.next_position)


def resume_finished(d: Dispatcher, *, step: int) -> None:
    """The fresh dispatcher ``d`` of a start whose checkpoint has done every step (``step``): only the end is left."""
    d.step = d.version = step


def _restore_tokens(d: Dispatcher, tokens: Mapping[str, list[int]], fallback: set[int]) -> list[str]:
    """The slots that waited for an entry's adaptive sampler: re-queued in order while it is adaptive; drawn at once
    by its sampler if that is static now (a fallback slot's draw is the run's fallback), the draws waiting for their
    label's room before any new position; dropped (``slot_skipped``) when the entry has no sampler any more (the
    run's sampler no longer hands slots, ``no_slots``, or the entry left the run, ``entry_left``)."""
    warnings: list[str] = []
    for entry, positions in tokens.items():
        has_rows = bool(d.pool.by_entry(entry))
        if has_rows and d.samplers.entry_sampler_name(entry) is not None:
            if d.samplers.entry_adaptive(entry):
                for pos in positions:
                    d.mixture.park_token(Token(pos, entry, pos in fallback), bounded=False)
                continue
            bounds = d.samplers.restore_static_tokens(entry, positions, {p for p in positions if p in fallback})
            for bound, pos in zip(bounds, positions, strict=True):
                d.mixture.park_draw(d.bind(bound, pos), bounded=False)
            continue
        why = "no_slots" if has_rows else "entry_left"
        for pos in positions:
            d.emit({"event": "slot_skipped", "start": d.start_number, "position": pos, "entry": entry, "why": why})
        reason = ("the run's task sampler no longer hands it slots" if has_rows
                  else "it is no longer an environment of the run")
        warnings.append(f"dropped {len(positions)} slot(s) of environment {entry} at resume: {reason}")
    return warnings


def sampling_changes(d: Dispatcher, state: Mapping[str, Any]) -> list[str]:
    """What changed, in what decides draws, between the run that wrote ``state`` and ``d`` (one line each)."""
    return fingerprint_changes(state.get("fingerprint"), sampling_fingerprint(d))


def _find_row(d: Dispatcher, task_id: str, saved_index: int | None) -> int | None:
    """The saved pool row if it still holds the task, else the first row with that task id, else None."""
    rows = d.pool.rows
    if saved_index is not None and 0 <= saved_index < len(rows) and rows[saved_index].task_id == task_id:
        return saved_index
    return d.pool.first_index(task_id)


def _reissue(d: Dispatcher, old_key: tuple[int, int], row_index: int, position: int, sampler: str) -> None:
    row = d.pool.rows[row_index]
    key = (d.start_number, d.next_seq)
    d.next_seq += 1
    draw = BoundDraw(key, row.index, row.task_id, row.entry, row.label, position, row.group_size, d.version,
                 sampler, "reissue", None)
    d.outstanding[key] = draw
    d.recorder.reissue(old_key, key, version=d.version, sampler=sampler, reason="reissue")
    d.samplers.note_reissue(sampler)
    d.mixture.park_draw(draw, bounded=False)
