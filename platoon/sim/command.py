"""``platoon simulate``'s body: one run with a progress bar and a summary table, a resume, or a sweep.

- One run: the config (``platoon.sim.setup.load_sim_config``), a run directory (``--out``, else
  ``runs/sim-<name>-<n>``, the first that does not exist), a rich progress bar over the steps, the summary table
  of ``platoon.report.summarize``.
- ``--resume RUN``: the run goes on from its newest readable checkpoint (``--steps`` is its new total).
- ``--sweep KEY=V1,V2,...`` (repeatable): the grid of every combination, each point a run of its own under
  ``<out>/<key=value,...>``, run in parallel processes; one table with a row per point and, for each quantity,
  its ratio to the first point's.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from platoon.analysis import load_run
from platoon.report import SUMMARY, fmt, summarize
from platoon.sim.run import SimRun
from platoon.sim.setup import load_sim_config

SWEEP_COLUMNS = ("steps", "simulated_hours", "rollouts_per_hour", "permit_busy_share", "trainer_idle_share",
                 "staleness_mean", "informative_share", "stale_groups", "rejected_groups", "pass_at_1_last")


class UsageError(ValueError):
    """A command line that does not make sense (exit 64)."""


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

    def all_overrides(self) -> list[str]:
        extra = []
        if self.permit_release is not None:
            extra.append(f"train.permit_release={self.permit_release}")
        if self.steps is not None:
            extra.append(f"train.steps={self.steps}")
        if self.seed is not None:
            extra.append(f"train.seed={self.seed}")
        return [*self.overrides, *extra]


def simulate(req: Request, console: Console | None = None) -> Path:
    """Carry out ``req``; returns the run (or sweep) directory. Raises UsageError, ConfigError, FileExistsError."""
    console = console or Console()
    if req.permit_release not in (None, "rollout", "group"):
        raise UsageError(f"--permit-release must be rollout or group, got {req.permit_release!r}")
    if req.resume is not None:
        given = [n for n, v in (("CONFIG", req.config), ("--preset", req.preset), ("--set", req.overrides),
                                ("--seed", req.seed), ("--out", req.out), ("--sweep", req.sweep),
                                ("--permit-release", req.permit_release)) if v]
        if given:
            raise UsageError(f"--resume goes on with the run's own config: drop {', '.join(given)}")
        run = SimRun.resume(req.resume, steps=req.steps, log=_logger(console))
        _run_with_progress(run, console, f"resuming {req.resume}")
        _print_summary(req.resume, console)
        return req.resume
    if req.sweep:
        return sweep(req, console)
    cfg = load_sim_config(req.config, preset=req.preset, overrides=req.all_overrides())
    out = req.out or next_run_dir(Path("runs"), _name(req))
    run = SimRun.create(cfg, out, log=_logger(console))
    _run_with_progress(run, console, f"simulating {out}")
    _print_summary(out, console)
    return out


def _name(req: Request) -> str:
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
        style = "yellow" if level == "warning" else "dim"
        console.print(f"[{style}]{level}: {message}[/{style}]", highlight=False)

    return log


def _run_with_progress(run: SimRun, console: Console, what: str) -> None:
    total = run.cfg.train.steps
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("sim {task.fields[sim]}"), TimeElapsedColumn(), console=console,
                  transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task(what, total=total, completed=run.d.step, sim="0:00:00")
        run.on_step = lambda step, now: progress.update(task, completed=step + 1, sim=_hms(now))
        run.run()


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _print_summary(path: Path, console: Console) -> None:
    summary = summarize(load_run(path))
    table = Table(title=f"platoon simulate: {path}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, label, _ in SUMMARY:
        table.add_row(label, fmt(key, summary[key]))
    console.print(table)


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


def _run_point(config: Path | None, preset: str | None, overrides: list[str], out: str) -> str:
    """One point of a sweep, in a worker process (no progress bar, warnings to the point's own log)."""
    cfg = load_sim_config(config, preset=preset, overrides=overrides)
    lines: list[str] = []
    run = SimRun.create(cfg, Path(out), log=lambda level, message: lines.append(f"{level}: {message}"))
    run.run()
    (Path(out) / "simulate.log").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


def sweep(req: Request, console: Console) -> Path:
    axes = parse_sweep(req.sweep)
    points = grid(axes)
    base = req.all_overrides()
    for point in points:  # every point's config is checked before any runs
        load_sim_config(req.config, preset=req.preset, overrides=[*base, *point])
    out = req.out or next_run_dir(Path("runs"), _name(req).replace("sim-", "sweep-"))
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: the sweep directory exists and is not empty")
    dirs = [out / f"{i:02d}-{_point_name(p)}" for i, p in enumerate(points)]
    jobs = req.jobs or min(len(points), os.cpu_count() or 1)
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("points", total=len(points))
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_run_point, req.config, req.preset, [*base, *p], str(d))
                       for p, d in zip(points, dirs, strict=True)]
            for future in as_completed(futures):
                future.result()
                progress.advance(task)
    rows = [summarize(load_run(d)) for d in dirs]
    table = Table(title=f"platoon simulate --sweep: {out}")
    table.add_column("point")
    for key in SWEEP_COLUMNS:
        table.add_column(next(label for k, label, _ in SUMMARY if k == key), justify="right")
    first = rows[0]
    for point, row in zip(points, rows, strict=True):
        cells = []
        for key in SWEEP_COLUMNS:
            cell = fmt(key, row[key])
            ratio = _ratio(row[key], first[key])
            if row is not first and ratio is not None:
                cell += f" ({ratio:.2f}x)"
            cells.append(cell)
        table.add_row(" ".join(point), *cells)
    console.print(table)
    (out / "sweep.md").write_text(_sweep_markdown(points, rows), encoding="utf-8")
    return out


def _ratio(value: float, first: float) -> float | None:
    if value != value or first != first or first == 0:
        return None
    return value / first


def _sweep_markdown(points: list[list[str]], rows: list[dict]) -> str:
    labels = [next(label for k, label, _ in SUMMARY if k == key) for key in SWEEP_COLUMNS]
    lines = ["| point | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for point, row in zip(points, rows, strict=True):
        cells = []
        for key in SWEEP_COLUMNS:
            ratio = _ratio(row[key], rows[0][key])
            cells.append(fmt(key, row[key]) + (f" ({ratio:.2f}x)" if row is not rows[0] and ratio is not None else ""))
        lines.append(f"| {' '.join(point)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["Request", "UsageError", "grid", "next_run_dir", "parse_sweep", "simulate", "sweep"]
