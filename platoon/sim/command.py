"""``platoon simulate``'s body: one run with a progress bar, a resume, or a sweep; it returns what ran.

- One run: the config (``platoon.sim.setup.load_sim_config``), a run directory (``--out``, else
  ``runs/sim-<name>-<n>``, the first that does not exist), a rich progress bar over the steps.
- ``--resume RUN``: the run goes on from its newest readable checkpoint (``--steps`` is its new total); a finished
  run is left as it is, with a line saying so (``RunFinished``).
- ``--sweep KEY=V1,V2,...`` (repeatable): the grid of every combination, each point a run of its own under
  ``<out>/<nn>-<key=value,...>``, run in parallel processes (every point's config is checked first); with
  ``--ray`` (``--ray-address ADDR``), as Ray tasks instead (``platoon.sim.ray_sweep``), to the same directories.
  The sweep's directory is held by its writer lock while the points run.

The tables that follow (``platoon.report``: a run's summary, a sweep's row per point with ratios to the first, and
the sweep's ``sweep.md``) come from ``platoon.report.show_simulated``, which may read runs back through
``platoon.analysis``; this layer may not.

What the command raises is sorted here for the command line's exit codes: ``USAGE_ERRORS`` (64), ``RUNTIME_ERRORS``
(1), a ``ConfigError`` or ``ExtensionError`` (78), a ``FileExistsError`` for an ``--out`` that is taken (64).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import re
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from platoon.config.loader import load_config
from platoon.config.models import RunConfig
from platoon.config.steps import check_plan, run_directory
from platoon.console import make_console, say
from platoon.lifeline import die_with_parent
from platoon.runs.atomic import CorruptFileError
from platoon.runs.checkpoints import CheckpointError
from platoon.runs.resume import ResumeRefused, RunFinished
from platoon.runs.rundir import RunDir
from platoon.runs.writer import WRITER_FILE, RunBusyError, WriterLock
from platoon.sim.calibrate import CalibrationError, calibrate, read_workload
from platoon.sim.ray_sweep import PointLost
from platoon.sim.run import SimRun, UsageError, discarded_unless_stepped, run_point_config
from platoon.sim.runtime import SimulationStalled
from platoon.sim.setup import load_sim_config

USAGE_ERRORS = (UsageError, ResumeRefused, RunBusyError)
"""A request that cannot be carried out as asked: nothing was run (exit 64)."""
RUNTIME_ERRORS = (CheckpointError, CorruptFileError, SimulationStalled, CalibrationError, PointLost)
"""A run that could not start or go on (exit 1)."""


@dataclass(frozen=True)
class Request:
    """What ``platoon simulate`` was asked (the options as given)."""

    config: Path | None = None
    preset: str | None = None
    permit_release: str | None = None
    overrides: tuple[str, ...] = ()
    steps: int | None = None
    seed: int | None = None
    out: Path | None = None
    resume: Path | None = None
    sweep: tuple[str, ...] = ()
    jobs: int | None = None
    workload: Path | None = None
    like: Path | None = None
    ray: bool = False
    ray_address: str | None = None
    similar_by: tuple[str, ...] = ()  # --like: the learning model's similarity columns (calibrate --similar-by)

    def all_overrides(self) -> list[str]:
        extra = []
        if self.permit_release is not None:
            extra.append(f"train.permit_release={self.permit_release}")
        if self.steps is not None:
            extra += [f"train.max_training_steps={self.steps}", "train.num_epochs=null"]
        if self.seed is not None:
            extra.append(f"train.seed={self.seed}")
        return [*self.overrides, *extra]

    def on_ray(self) -> bool:
        """Whether the sweep runs on Ray: ``--ray``, or ``--ray-address`` (which implies it)."""
        return self.ray or self.ray_address is not None


@dataclass(frozen=True)
class Source:
    """Where a simulated run's config comes from (picklable, for a sweep's worker processes): a file or a preset,
    with a workload's ``sim`` block replacing the config's own, or a live run's recorded config (``--like``)."""

    config: Path | None = None
    preset: str | None = None
    sim: dict[str, Any] | None = None
    recorded: dict[str, Any] | None = None

    def load(self, overrides: Sequence[str]) -> RunConfig:
        if self.recorded is not None:
            return load_config(self.config, overrides, data=self.recorded, sections={"sim": self.sim})
        return load_sim_config(self.config, preset=self.preset, overrides=overrides, sim=self.sim)


def source_of(req: Request, console: Console) -> Source:
    """The request's ``Source``: ``--like RUN`` takes the live run's recorded config, with the workload of
    ``--workload FILE`` when given, else the one fitted from the run itself (``platoon.sim.calibrate``);
    ``--workload FILE`` alone replaces CONFIG's sim block with the file's. Raises UsageError, ConfigError,
    CalibrationError."""
    if req.like is not None:
        given = [n for n, v in (("CONFIG", req.config), ("--preset", req.preset)) if v]
        if given:
            raise UsageError(f"--like simulates the run's own config: drop {', '.join(given)}")
        lock = RunDir(req.like).read_lock()
        if req.workload is not None:
            if req.similar_by:
                raise UsageError("--similar-by fits a workload: the --workload file's is used whole, drop one")
            return Source(config=RunDir(req.like).lock_path, sim=read_workload(req.workload), recorded=lock["config"])
        cal = calibrate(req.like, req.similar_by or None)
        for fit in cal.fits:
            console.print(f"[dim]calibrated {fit.key}: {fit.value} ({fit.samples} samples; {fit.quality})[/dim]",
                          highlight=False)
        return Source(config=RunDir(req.like).lock_path, sim=cal.sim, recorded=lock["config"])
    if req.similar_by:
        raise UsageError("--similar-by goes with --like (it names the calibration's similarity columns)")
    if req.workload is not None:
        if req.preset is not None:
            raise UsageError("--workload replaces the config's sim block whole: drop --preset")
        return Source(config=req.config, sim=read_workload(req.workload))
    return Source(config=req.config, preset=req.preset)


@dataclass(frozen=True)
class Outcome:
    """What ran: one run directory (``points`` empty), or a sweep's directory with its points and their runs."""

    path: Path
    points: tuple[tuple[str, ...], ...] = ()
    runs: tuple[Path, ...] = ()


def simulate(req: Request, console: Console | None = None) -> Outcome:
    """Carry out ``req``. Raises UsageError, ConfigError, FileExistsError, RunBusyError, ResumeRefused,
    CheckpointError (LogsLost among them); a new run that fails before its first step leaves no directory behind."""
    console = console or make_console()  # results (the caller prints the summary there)
    notes = make_console(stderr=True)  # progress, infos and warnings: messages go to stderr
    if req.permit_release not in (None, "rollout", "group"):
        raise UsageError(f"--permit-release must be rollout or group, got {req.permit_release!r}")
    if req.resume is not None:
        given = [n for n, v in (("CONFIG", req.config), ("--preset", req.preset), ("overrides", req.overrides),
                                ("--seed", req.seed), ("--out", req.out), ("--sweep", req.sweep),
                                ("--permit-release", req.permit_release), ("--workload", req.workload),
                                ("--like", req.like), ("--similar-by", req.similar_by), ("--ray", req.on_ray())) if v]
        if given:
            raise UsageError(f"--resume goes on with the run's own config: drop {', '.join(given)}")
        _refuse_v040(req.resume)
        try:
            run = SimRun.resume(req.resume, steps=req.steps, log=_logger(notes))
        except RunFinished as done:
            console.print(str(done), highlight=False)
            return Outcome(req.resume)
        _run_with_progress(run, notes, f"resuming {req.resume}")
        return Outcome(req.resume)
    if req.on_ray() and not req.sweep:
        raise UsageError("--ray runs a sweep's points on Ray: give --sweep KEY=V1,V2,...")
    if req.on_ray():
        from platoon.sim.ray_sweep import import_ray

        import_ray()  # without Ray, refused before anything is read or written
    source = source_of(req, notes)
    if req.sweep:
        return sweep(req, source, notes)
    cfg = source.load(req.all_overrides())
    check_plan(cfg, str(source.config) if source.config is not None else "<default>")
    # a live run's recorded log_path names the live run's own directory: its twin goes elsewhere
    out = req.out or (run_directory(cfg) if req.like is None else None) or next_run_dir(Path("runs"), _name(req))
    run = SimRun.create(cfg, out, log=_logger(notes))
    with discarded_unless_stepped(run):
        _run_with_progress(run, notes, f"simulating {out}")
    return Outcome(out)


def _name(req: Request) -> str:
    if req.like is not None:
        return f"sim-like-{req.like.resolve().name}"
    if req.config is not None:
        return f"sim-{req.config.stem}"
    return f"sim-{req.preset or 'long-agentic'}"


def next_run_dir(parent: Path, name: str) -> Path:
    """``parent/<name>-<n>`` for the least ``n >= 1`` that does not exist."""
    for n in itertools.count(1):
        path = parent / f"{name}-{n}"
        if not path.exists():
            return path
    raise AssertionError("unreachable")


def _logger(console: Console):
    def log(level: str, message: str) -> None:
        say(console, level, message)

    return log


def _refuse_v040(path: Path) -> None:
    """A run platoon 0.4.0 wrote has no simulator state to go on from exactly (its rollouts ran for real)."""
    from platoon.runs.v040 import is_v040_run

    if Path(path).is_dir() and is_v040_run(path):
        raise UsageError(f"{path} is a run platoon 0.4.0 wrote: the simulator resumes only its own runs, exactly; go "
                         f"on with it with platoon train --resume {path} --set train.model_name=... (a local "
                         "checkpoint or tiny), or simulate its config (config.resolved.yaml) anew")


def _run_with_progress(run: SimRun, console: Console, what: str) -> None:
    total = run.driver.steps
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("sim {task.fields[sim]}"), TimeElapsedColumn(), console=console,
                  transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task(what, total=total, completed=run.driver.steps_done, sim="0:00:00")
        run.on_step = lambda step, now: progress.update(task, completed=step + 1, sim=_hms(now))
        try:
            run.run()
        finally:
            run.close()


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


# ------------------------------------------------------------------------------------------------------- sweeps
_SPLIT = re.compile(r",(?![^\[\]{}]*[\]}])")


def parse_sweep(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``KEY=V1,V2`` items as ``(key, [value texts])``; commas inside ``[...]`` or ``{...}`` do not split."""
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise UsageError(f"--sweep {item!r}: expected KEY=V1,V2,...")
        axes.append((key.strip(), [v.strip() for v in _SPLIT.split(values) if v.strip()]))
    return axes


def grid(axes: Sequence[tuple[str, list[str]]]) -> list[list[str]]:
    """Every combination, the first axis varying slowest; each point a list of ``key=value`` overrides."""
    return [[f"{k}={v}" for (k, _), v in zip(axes, values, strict=True)]
            for values in itertools.product(*(vals for _, vals in axes))]


def _point_name(point: Sequence[str]) -> str:
    """``train.permit_release=group`` -> ``permit_release=group`` (joined by commas, odd characters as ``_``)."""
    parts = []
    for p in point:
        key, _, value = p.partition("=")
        parts.append(f"{key.rsplit('.', 1)[-1]}={value}")
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", ",".join(parts))


def _run_point(source: Source, overrides: list[str], out: str) -> list[str]:
    """One point of a sweep, in a worker process (no progress bar); returns its warnings for the parent to print."""
    return run_point_config(source.load(overrides), Path(out))


def sweep(req: Request, source: Source, console: Console) -> Outcome:
    """Run ``req``'s sweep, its progress and its points' warnings on ``console`` (stderr, under ``simulate``)."""
    axes = parse_sweep(req.sweep)
    points = grid(axes)
    base = req.all_overrides()
    cfgs = [source.load([*base, *point]) for point in points]  # every point's config is checked before any runs
    out = req.out or next_run_dir(Path("runs"), _name(req).replace("sim-", "sweep-"))
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a directory")
    with _ray_connection(req):  # Ray is reached first: a cluster that cannot be reached leaves no directory
        out.mkdir(parents=True, exist_ok=True)
        with WriterLock.acquire(out):  # taken before the directory is looked at: two sweeps cannot both find it empty
            if any(p.name != WRITER_FILE for p in out.iterdir()):
                raise FileExistsError(f"{out}: the sweep directory exists and is not empty")
            dirs = [out / f"{i:02d}-{_point_name(p)}" for i, p in enumerate(points)]
            if req.on_ray():
                from platoon.sim.ray_sweep import ray_points

                finished = ray_points(cfgs, dirs, address=req.ray_address, jobs=req.jobs)
            else:
                finished = _pool_points(source, [[*base, *p] for p in points], dirs, req.jobs)
            with contextlib.closing(finished):  # an interrupted sweep ends its pool or its Ray tasks now
                _follow(finished, len(points), console)
    return Outcome(out, tuple(tuple(p) for p in points), tuple(dirs))


def _ray_connection(req: Request) -> contextlib.AbstractContextManager[None]:
    """Ray connected for the sweep's whole life with ``--ray`` (``platoon.sim.ray_sweep.connected``), else nothing."""
    if not req.on_ray():
        return contextlib.nullcontext()
    from platoon.sim.ray_sweep import connected, import_ray

    return connected(import_ray(), req.ray_address)


def _pool_points(source: Source, overrides: list[list[str]], dirs: list[Path],
                 jobs: int | None) -> Generator[tuple[Path, list[str]], None, None]:
    """The points in a process pool (``jobs`` processes, default one a CPU); ``(dir, warnings)`` as each finishes.
    Each pool process ends with this one, however this one ends (``platoon.lifeline``)."""
    context = multiprocessing.get_context()
    parent = os.getpid() if context.get_start_method() in ("fork", "spawn") else None  # forkserver: its server's
    with ProcessPoolExecutor(max_workers=jobs or min(len(dirs), os.cpu_count() or 1), mp_context=context,
                             initializer=die_with_parent, initargs=(parent,)) as pool:
        futures = {pool.submit(_run_point, source, o, str(d)): d for o, d in zip(overrides, dirs, strict=True)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _follow(finished: Iterator[tuple[Path, list[str]]], total: int, console: Console) -> None:
    """A progress bar over the points as they finish, each point's warnings printed under its name."""
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("points", total=total)
        for path, warnings in finished:
            for message in warnings:
                console.print(f"[yellow]warning: {path.name}: {message}[/yellow]", highlight=False)
            progress.advance(task)


__all__ = ["RUNTIME_ERRORS", "USAGE_ERRORS", "Outcome", "Request", "UsageError", "grid", "next_run_dir", "parse_sweep", "simulate", "sweep"]
