"""A simulated run and its run directory: create, step metrics, checkpoints, exact resume.

The directory is the live backend's (``platoon.runs``): ``lock.json``, ``metrics.jsonl`` (a row per step),
``tasks/events.jsonl``, ``checkpoints.jsonl`` and ``checkpoints/<step>/`` with ``tasks/dispatch-<step>.json`` (the
dispatcher's format-2 state with its exact section), ``tasks/state-<step>.npz`` (the statistics' snapshot, columnar; ``.json`` from an older release) and
``sim-<step>.json`` (the runtime's timers, groups in flight, model service, trainer, learner, trace lanes) and
``driver-<step>.json`` (start slots, members, the step window), and ``trace.json`` (``platoon.runs.trace``: spans on
simulated time; ``trace`` in the config). A step's row is the driver's (docs/metrics.md), with the ``sim/...``
metrics only the simulator knows and ``eval/pass@1`` at step 0 under ``eval.at_start`` and every ``eval.every`` steps
(the policy the step trained on); a run that learns and evaluates ends with a row ``{"step": steps, "eval/pass@1":
...}`` for the final policy.

Checkpoints are taken at launch (``000000``) and right after a step's metrics (every ``checkpoint.every`` steps, kept
for good, every ``checkpoint.recovery_every``, the newest ``checkpoint.keep_recovery`` kept, and after the last),
named by the steps done. Each records the lengths of ``metrics.jsonl``, ``tasks/events.jsonl`` and ``trace.json``
then (the trace flushed first); ``resume`` cuts the logs back to them (what a killed run wrote after its checkpoint
is written again, identically, by the replay) and restores the dispatcher, the statistics and the runtime exactly, so
a run killed anywhere and resumed ends byte-identical to one that never stopped (wall-clock fields aside: lock.json's
``created``, a checkpoint row's ``time``), its trace too unless ``trace.max_events`` cut it (the cap counts one run
start's spans). The dispatch, driver and simulator files are one exact state: when one of them does not read, the
whole checkpoint is passed over for an older one, whose replay is exact too.

A run holds its directory's writer lock from ``create`` or ``resume`` to ``close``. ``resume`` takes both runtimes'
path (``platoon.runs.resume``): it decides before it changes anything (a live run, too few steps: ``ResumeRefused``;
a finished run: ``RunFinished``; a truncated log: ``LogsLost``; a checkpoint without this release's exact state:
``ResumeError``, each leaving the directory as it was), and what is its own is the exact restore of the driver, the
dispatcher, the statistics and the runtime (its clock, work in flight, learning model). A run that reaches its end
records it in ``lock.json`` (``finished``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from platoon.components import build_policy
from platoon.config.models import RunConfig
from platoon.config.resolve import resolve_components
from platoon.config.steps import check_plan
from platoon.policy import DRIVER_STATE_FORMAT
from platoon.runs import LoadedCheckpoint, RunDir, load_latest_checkpoint
from platoon.runs.checkpoints import stats_file_name
from platoon.runs.resume import ResumeRefused, commit, decide, released_on_failure
from platoon.runs.session import RunSession, python_log
from platoon.runs.timing import measured_call
from platoon.runs.trackers import open_trackers
from platoon.sim.runtime import STATE_FORMAT, SimRuntime
from platoon.sim.setup import build_tasks

_log = python_log("platoon.sim")
Logger = Callable[[str, str], None]


class UsageError(ValueError):
    """A command line that does not make sense (exit 64)."""


class ResumeError(ResumeRefused):
    """A run that cannot be resumed as asked (not a simulated run, fewer steps than it has done): exit 64."""


class SimRun:
    """A simulated run writing ``path`` (see the module docstring). Use ``create`` or ``resume``, then ``run``."""

    def __init__(self, cfg: RunConfig, rd: RunDir, runtime: SimRuntime, *, log: Logger | None = None,
                 group: str | None = None) -> None:
        self.cfg, self.path, self.rt = cfg, rd.path, runtime
        self.rd = rd
        self.driver = runtime.driver
        self.log = log or _log
        t = cfg.trace
        trace = self.rd.trace_writer(group_every=t.group_every, max_events=t.max_events, enabled=t.enabled)
        self.on_step: Callable[[int, float], None] | None = None
        self.session = RunSession(rd, log=self.log, keep=cfg.checkpoint.keep_recovery, trace=trace,
                                  on_row=self._on_row,
                                  trackers=open_trackers(rd, cfg.stats, runtime="sim", log=self.log, group=group))
        runtime.attach(self.session)

    # ------------------------------------------------------------------------------------------ starting
    @classmethod
    def create(cls, cfg: RunConfig, path: Path, *, log: Logger | None = None, group: str | None = None) -> SimRun:
        """A new run of ``cfg`` in the new (or empty) directory ``path`` (``group``: its sweep's name, for its
        trackers). ConfigError for a config the simulator cannot build; FileExistsError when ``path`` holds
        something."""
        check_plan(cfg)
        records = resolve_components(cfg)
        tasks = build_tasks(cfg)
        policy = build_policy(cfg, tasks.pool, start=1, measure=measured_call)
        with RunDir.create(path).undone_on_failure() as rd:
            rd.write_lock(cfg.model_dump(mode="json"), [r.to_json() for r in records],
                          {"runtime": "sim", "steps": policy.driver.steps})
            rd.write_pool([(row.task_id, row.entry, row.label) for row in tasks.pool.rows])  # for platoon tasks show
            run = cls(cfg, rd, SimRuntime(cfg, tasks, policy), log=log, group=group)
            run.rt.begin()  # the driver's launch save first: a run killed before its first step resumes there
        return run

    @classmethod
    def resume(cls, path: Path, *, steps: int | None = None, log: Logger | None = None) -> SimRun:
        """Go on from ``path``'s newest checkpoint that reads back, exactly; ``steps`` is the run's new total (at
        least the steps the checkpoint has done). Takes the writer lock (RunBusyError), decides
        (``platoon.runs.resume.decide``: ``ResumeRefused``, ``RunFinished``, ``LogsLost``, CheckpointError: the
        directory is left as it was), then cuts the logs back to the checkpoint's lengths."""
        path = Path(path)
        with released_on_failure(RunDir.claim(path)) as rd:
            return cls._resume(rd, path, steps, log or _log)

    @classmethod
    def _resume(cls, rd: RunDir, path: Path, steps: int | None, log: Logger) -> SimRun:
        decided = decide(rd, path, runtime="sim", steps=steps, locate=load_latest_checkpoint, check=_exact_state,
                         log=log)
        cfg, ckpt = decided.cfg, decided.point
        for note in ckpt.passed_over:
            log("warning", note)
        name = ckpt.name
        sim_state, dispatch, driver_state = (ckpt.files[f"sim-{name}.json"], ckpt.files[f"tasks/dispatch-{name}.json"],
                                             ckpt.files[f"driver-{name}.json"])
        tasks = build_tasks(cfg)
        policy = build_policy(cfg, tasks.pool, start=dispatch["start"], measure=measured_call)
        policy.dispatcher.load_state_dict(dispatch)
        policy.driver.load_state_dict(driver_state)
        snapshot = ckpt.files.get(stats_file_name(ckpt.row, name))
        if isinstance(snapshot, dict):
            policy.recorder.load_snapshot(snapshot)
            policy.recorder.next_seq = int(snapshot.get("next_seq", policy.recorder.next_seq))
        rt = SimRuntime(cfg, tasks, policy, now=sim_state["now"])
        rt.load_state_dict(sim_state)
        # decided and built: from here on the resume changes the run
        commit(rd, decided, runtime="sim", log=log)
        run = cls(cfg, rd, rt, log=log)
        rt.resume()
        return run

    # --------------------------------------------------------------------------------------------- running
    def run(self, until: float | None = None) -> bool:
        """Simulate to the end of the plan (True), or to simulated time ``until`` (False)."""
        try:
            return self.rt.run(until)
        finally:
            if self.rt.done or until is None:
                self.close()

    def close(self) -> None:
        """Close the logs and give the writer lock back (the run cannot be run further)."""
        self.session.close()
        self.rd.release()

    def _on_row(self, row: dict) -> None:
        if self.on_step is not None and "train/rollouts" in row:  # a step's row, not the final evaluation's
            self.on_step(row["step"], row["time"])


def _exact_state(ckpt: LoadedCheckpoint) -> None:
    """A simulated run goes on exactly: its checkpoint must hold the simulator's, the driver's and the dispatcher's
    state, in the formats of this release (ResumeError, exit 64)."""
    name = ckpt.name
    sim_state = ckpt.files.get(f"sim-{name}.json")
    dispatch = ckpt.files.get(f"tasks/dispatch-{name}.json")
    driver_state = ckpt.files.get(f"driver-{name}.json")
    if not (isinstance(sim_state, dict) and isinstance(dispatch, dict) and isinstance(driver_state, dict)):
        raise ResumeError(f"{ckpt.path}: not a simulator checkpoint of this release (no sim-{name}.json, "
                          f"driver-{name}.json or dispatch state)")
    if driver_state.get("format") != DRIVER_STATE_FORMAT or sim_state.get("format") != STATE_FORMAT:
        raise ResumeError(f"{ckpt.path}: written by an earlier release of platoon (driver state format "
                          f"{driver_state.get('format')!r}, simulator state format {sim_state.get('format')!r}; "
                          f"this release writes {DRIVER_STATE_FORMAT} and {STATE_FORMAT}): a simulated run goes "
                          "on exactly only in the release that began it; simulate it again with this one")


@contextlib.contextmanager
def discarded_unless_stepped(run: SimRun) -> Iterator[None]:
    """Remove the new run's directory when what runs inside fails before the run's first step is done (a run
    killed, or interrupted, keeps it: its launch checkpoint resumes)."""
    try:
        yield
    except Exception:
        if run.driver.steps_done == 0:
            run.rd.discard()
        raise


def run_point_config(cfg: RunConfig, out: Path) -> list[str]:
    """A sweep point's run of ``cfg`` into the new directory ``out``, with no progress bar; returns its warnings
    (the sweep prints them, named by point). A point that fails before its first step leaves no directory."""
    lines: list[str] = []
    run = SimRun.create(cfg, out, log=lambda level, message: lines.append(message) if level == "warning"
                        else None, group=out.parent.name)
    with discarded_unless_stepped(run):
        try:
            run.run()
        finally:
            run.close()
    return lines


__all__ = ["ResumeError", "SimRun", "UsageError", "discarded_unless_stepped", "run_point_config"]
