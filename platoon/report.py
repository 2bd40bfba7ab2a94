"""``platoon report``: what a run did, in a table and four plots, for any mix of simulated and live runs.

Reads run directories through ``platoon.analysis.load_run`` (their metrics only: nothing here reads the event log,
which grows to hundreds of MB in a long simulated run) and writes, into one directory:

- ``summary.md``: a markdown table with a column per run and a row per quantity of ``summarize``; given a live run
  and then a simulated one (``platoon report LIVE SIM``, its twin: ``platoon simulate --like LIVE``), an ``error``
  column too, the simulated value's relative error against the live one (a share's: the difference);
- ``permits.png`` (are the permits busy?): ``rollout_client/rollouts_in_flight_mean`` over the run's (simulated or
  wall) hours, a line per run, and its capacity (``train.max_concurrent_rollouts``) as a dashed line;
- ``staleness.png`` (how stale were the groups a step took?): how many policy versions behind each trained or stale
  group was, summed over the run (``train/staleness/<k>``; a run that logged none is named in the plot as such);
- ``learning.png`` (does the policy learn?): ``train/sampler/informative_share`` and ``eval/pass@1`` per step, a
  legend on each panel, a run without pass@1 named as such;
- ``blocked.png`` (why could no group start?): the stack of ``train/dispatch/blocked_share/<reason>`` per step, a
  panel per run, each reason in words in a legend below the panels.

``summarize`` is also the summary table of ``platoon simulate`` (``summary_table``) and of its sweeps
(``sweep_table``, ``sweep_markdown``: a row per point, each quantity with its ratio to the first point's;
``show_simulated`` prints them after a simulation and writes the sweep's ``sweep.md``).

This module draws and words; every file it makes goes into the run directory through ``platoon.runs.report_files``
(atomically: a reader never sees half a plot or half a table).

Every quantity is computed from the per-step metrics both runtimes write under the same names (docs/metrics.md), so
a number means the same in a simulated run's column and a live run's. Time is the run's own clock, the ``time``
column (simulated seconds, or wall seconds): a step's length ``dt`` is its ``time`` less the previous step's, and
the run's hours are the sum of its steps' lengths, from the start to the last step's row (a final evaluation row
after it is not counted: it costs a live run wall time and a simulated one none). A resumed start's clock goes on
from its checkpoint's, so ``time`` never drops; in a live run of platoon 0.4.0 or older, whose clock began at 0 at
each resume, a ``time`` below the previous step's begins a new start, so that step's length is its ``time``.
Throughput is per such hour; shares of time are weighted by ``dt``. A row that only one runtime can know
(``ONLY``) reads ``sim only`` or ``live only`` in the other's column of ``summary.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from platoon.analysis import Run, load_run
from platoon.runs.report_files import write_figure, write_text_file

if TYPE_CHECKING:
    from rich.console import Console

    from platoon.sim.command import Outcome

BLOCKED = ("permits", "horizon", "labels", "plan", "sampler")
STEP_COLUMN = "rollout_client/concurrency_achieved_fraction"
"""A metric every training step logs (a row without it, such as a final evaluation's, is not a step)."""

SUMMARY = (
    ("steps", "steps", "{:.0f}"),
    ("hours", "time (h)", "{:.3g}"),
    ("step_seconds_median", "median step time (s)", "{:.3g}"),
    ("rollouts_per_hour", "throughput (rollouts/h)", "{:.0f}"),
    ("groups_per_hour", "throughput (trained groups/h)", "{:.1f}"),
    ("permit_busy_share", "permit busy share", "{:.3f}"),
    ("trainer_idle_share", "trainer idle share", "{:.3f}"),
    ("staleness_mean", "staleness (versions, trained)", "{:.2f}"),
    ("informative_share", "informative share (trained)", "{:.3f}"),
    ("stale_groups", "stale groups", "{:.0f}"),
    ("stale_share", "stale share (of settled groups)", "{:.3f}"),
    ("rejected_groups", "rejected groups", "{:.0f}"),
    ("pass_at_1_first", "pass@1 first", "{:.3f}"),
    ("pass_at_1_last", "pass@1 last", "{:.3f}"),
    ("gpu_hours", "GPU-hours", "{:.1f}"),
)
"""(key of ``summarize``, label, format): the rows of every summary table, in order."""

ONLY = {"gpu_hours": "sim"}
"""Rows only one runtime can know (key -> ``sim`` or ``live``); every other row applies to both."""

SHARES = frozenset({"permit_busy_share", "trainer_idle_share", "informative_share", "stale_share", "pass_at_1_first",
                    "pass_at_1_last"})
"""Rows that are shares (0-1): a twin's error is their difference; every other row's is relative."""


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return pd.to_numeric(frame[name], errors="coerce")
    return pd.Series([math.nan] * len(frame), index=frame.index, dtype="float64")


def step_lengths(times: pd.Series) -> pd.Series:
    """Each step's length on the run's clock: its ``time`` less the previous step's (the first step's: its
    ``time``). A ``time`` below the previous one (only in a live run of platoon 0.4.0 or older, whose clock began at
    0 again at each resume) begins a new start, so that step's length is its ``time``."""
    times = pd.to_numeric(times, errors="coerce")
    dt = times - times.shift(1, fill_value=0.0)
    return dt.where(dt.isna() | (dt >= 0), times)


def step_rows(run: Run) -> pd.DataFrame:
    """The run's training steps: metrics rows that carry a step's dispatch metrics, with ``dt`` (the step's length,
    ``step_lengths``)."""
    m = run.metrics
    if STEP_COLUMN in m.columns:
        m = m[m[STEP_COLUMN].notna()]
    m = m.sort_values("step").copy()
    m["dt"] = step_lengths(_col(m, "time"))
    return m


def _weighted(values: pd.Series, weights: pd.Series) -> float:
    ok = values.notna() & weights.notna() & (weights > 0)
    total = float(weights[ok].sum())
    return float((values[ok] * weights[ok]).sum() / total) if total > 0 else math.nan


def _sum(frame: pd.DataFrame, name: str) -> float:
    """The column's total over the rows; NaN when no row logged it."""
    return float(_col(frame, name).sum(min_count=1)) if len(frame) else math.nan


def summarize(run: Run) -> dict[str, float]:
    """The run's summary (NaN where it logged nothing to say it): see ``SUMMARY`` for the keys and the module
    docstring for the clock."""
    s = step_rows(run)
    m = run.metrics
    seconds = float(s["dt"].sum(min_count=1)) if len(s) else math.nan
    hours = seconds / 3600.0 if seconds > 0 else math.nan
    informative = _col(s, "train/batch/informative_groups")
    kinds = sum(_col(s, f"train/batch/{k}_groups").fillna(0) for k in
                ("informative", "all_pass", "all_fail", "uniform_mixed"))
    trained = float(kinds.sum()) if len(s) else math.nan
    evals = _col(m, "eval/pass@1").dropna()
    rejected = _sum(s, "train/admission/rejected")
    if math.isnan(rejected) and len(s) and not any(c.startswith("train/admission/") for c in s.columns):
        rejected = 0.0  # no group admission rule: nothing is rejected
    return {
        "steps": float(len(s)),
        "hours": hours,
        "rollouts_per_hour": _sum(s, "train/rollouts") / hours,
        "groups_per_hour": trained / hours,
        "permit_busy_share": _weighted(_col(s, "rollout_client/permit_busy_share"), s["dt"]),
        "trainer_idle_share": _weighted(_col(s, "train/trainer_idle_share"), s["dt"]),
        "staleness_mean": _weighted(_col(s, "train/staleness_mean"), kinds) if len(s) else math.nan,
        "informative_share": float(informative.sum()) / trained if trained else math.nan,
        "stale_groups": _sum(s, "train/batch/stale_groups"),
        "stale_share": _sum(s, "train/batch/stale_groups") / (trained + _sum(s, "train/batch/stale_groups"))
        if trained else math.nan,
        "step_seconds_median": float(s["dt"].median()) if len(s) else math.nan,
        "rejected_groups": rejected,
        "pass_at_1_first": float(evals.iloc[0]) if len(evals) else math.nan,
        "pass_at_1_last": float(evals.iloc[-1]) if len(evals) else math.nan,
        "gpu_hours": float(_col(m, "sim/gpu_hours").max()) if "sim/gpu_hours" in m.columns else math.nan,
    }


def fmt(key: str, value: float) -> str:
    """A summary value as its table shows it (``-`` for NaN)."""
    spec = next((f for k, _, f in SUMMARY if k == key), "{:.3g}")
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else spec.format(value)


def cell(key: str, value: float, runtime: str | None) -> str:
    """A summary value as ``summary.md`` shows it: ``fmt``'s, or ``sim only``/``live only`` where the row is one
    runtime's (``ONLY``) and the run, of the other (``runtime``: ``Run.runtime``), has no value for it."""
    only = ONLY.get(key)
    text = fmt(key, value)
    if text == "-" and only is not None and runtime is not None and runtime != only:
        return f"{only} only"
    return text


def twin_error(key: str, live: float, sim: float) -> float:
    """How far a simulated twin's value is from the live run's: the difference for a share (``SHARES``), else the
    relative error ``(sim - live) / live``; NaN where either is missing or the live value is 0."""
    if math.isnan(live) or math.isnan(sim):
        return math.nan
    if key in SHARES:
        return sim - live
    return (sim - live) / live if live else math.nan


def _error_cell(key: str, error: float) -> str:
    if math.isnan(error):
        return "-"
    return f"{error:+.3f}" if key in SHARES else f"{error:+.1%}"


def is_twin(runs: Sequence[Run]) -> bool:
    """Whether ``runs`` are a live run and a simulated one, in that order (``platoon report LIVE SIM``)."""
    return len(runs) == 2 and (runs[0].runtime, runs[1].runtime) == ("live", "sim")


def summary_markdown(runs: Sequence[Run], names: Sequence[str] | None = None) -> str:
    """A markdown table: a row per quantity, a column per run; for a live run and its simulated twin
    (``is_twin``), an ``error`` column too: the sim's relative error (a share's: its difference)."""
    names = list(names) if names is not None else _names(runs)
    sums = [summarize(r) for r in runs]
    twin = is_twin(runs)
    head = names + ["error"] * twin
    lines = ["| | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for key, label, _ in SUMMARY:
        cells = [cell(key, s[key], r.runtime) for s, r in zip(sums, runs, strict=True)]
        if twin:
            cells.append(_error_cell(key, twin_error(key, sums[0][key], sums[1][key])))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _names(runs: Sequence[Run]) -> list[str]:
    names = [r.name for r in runs]
    return [str(r.path) if names.count(r.name) > 1 else r.name for r in runs]


def write_report(runs: Sequence[Run], out: Path) -> list[Path]:
    """Write ``summary.md`` and the four plots of the module docstring into ``out``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    names = _names(runs)
    written = [write_text_file(out / "summary.md", summary_markdown(runs, names))]

    _permits_plot(plt, runs, names, out, written)
    _staleness_plot(plt, runs, names, out, written)
    _learning_plot(plt, runs, names, out, written)
    _blocked_plot(plt, runs, names, out, written)
    return written




def capacity(run: Run) -> int | None:
    """The run's rollout permits (``train.max_concurrent_rollouts``, by default B x G), from its lock; None when the
    lock records no config this release reads."""
    from platoon.config.effective import max_concurrent_rollouts
    from platoon.config.errors import ConfigError
    from platoon.config.loader import config_from_lock

    try:
        return max_concurrent_rollouts(config_from_lock(run.lock, str(run.path / "lock.json")))
    except ConfigError:
        return None


def _permits_plot(plt, runs: Sequence[Run], names: Sequence[str], out: Path, written: list[Path]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    for run, name in zip(runs, names, strict=True):
        s = step_rows(run)
        if "rollout_client/rollouts_in_flight_mean" not in s.columns:
            continue
        (line,) = ax.step(s["dt"].cumsum() / 3600.0, _col(s, "rollout_client/rollouts_in_flight_mean"), where="pre",
                          label=f"{name}: busy (rollouts running)")
        limit = capacity(run)
        if limit is not None:
            ax.axhline(limit, color=line.get_color(), linestyle="--", linewidth=1,
                       label=f"{name}: capacity ({limit} permits)")
    ax.set(xlabel="time since the run began (h)", ylabel="permits busy (mean over each step)",
           title="Are the rollout permits busy?")
    ax.set_ylim(bottom=0)
    _finish(fig, ax, out / "permits.png", written)


def _staleness_plot(plt, runs: Sequence[Run], names: Sequence[str], out: Path, written: list[Path]) -> None:
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(runs))
    missing = []
    for j, (run, name) in enumerate(zip(runs, names, strict=True)):
        s = step_rows(run)
        lags = sorted((int(c.rsplit("/", 1)[1]), float(_col(s, c).sum())) for c in s.columns
                      if c.startswith("train/staleness/"))
        if not lags:
            missing.append(name)
            continue
        ax.bar([k + (j - (len(runs) - 1) / 2) * width for k, _ in lags], [v for _, v in lags], width=width, label=name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # versions are whole numbers
    ax.set(xlabel="policy versions behind when trained (its oldest rollout)", ylabel="groups (whole run)",
           title="How stale were the groups a step took?")
    if missing:
        ax.text(0.98, 0.95, "no staleness logged: " + ", ".join(missing), transform=ax.transAxes, ha="right",
                va="top", fontsize=8)
    _finish(fig, ax, out / "staleness.png", written)


def _learning_plot(plt, runs: Sequence[Run], names: Sequence[str], out: Path, written: list[Path]) -> None:
    from matplotlib.ticker import MaxNLocator

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    without = []
    for run, name in zip(runs, names, strict=True):
        s = step_rows(run)
        top.plot(s["step"], _col(s, "train/sampler/informative_share"), label=name)
        ev = run.metrics[["step"]].assign(v=_col(run.metrics, "eval/pass@1")).dropna()
        if ev.empty:
            without.append(name)
        else:
            bottom.plot(ev["step"], ev["v"], marker="o", label=name)
    top.set(ylabel="informative groups (share)", ylim=(0, 1.02),
            title="Does the policy learn? Groups with signal, and held-out pass@1")
    bottom.set(xlabel="step", ylabel="held-out pass@1", ylim=(0, 1.02))
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    if without:
        bottom.text(0.02, 0.95, "no held-out pass@1 measured: " + ", ".join(without), transform=bottom.transAxes,
                    ha="left", va="top", fontsize=8)
    for ax in (top, bottom):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    _save(fig, out / "learning.png", written)


def _blocked_plot(plt, runs: Sequence[Run], names: Sequence[str], out: Path, written: list[Path]) -> None:
    from matplotlib.ticker import MaxNLocator

    from platoon.policy import BLOCKED_WORDS  # the words the run's own warnings use

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.5 * len(runs) + 1.2), sharex=True, squeeze=False)
    for ax, run, name in zip(axes[:, 0], runs, names, strict=True):
        s = step_rows(run)
        stack = [_col(s, f"train/dispatch/blocked_share/{r}").fillna(0.0) for r in BLOCKED]
        ax.stackplot(s["step"], *stack, labels=[f"{r}: {BLOCKED_WORDS[r]}" for r in BLOCKED])
        ax.set(ylabel="share of the step's time", ylim=(0, 1), title=f"{name}: why could no group start?")
    axes[-1, 0].set_xlabel("step")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)  # below the panels, off the data
    fig.tight_layout(rect=(0, 0.7 / (2.5 * len(runs) + 1.2), 1, 1))
    written.append(write_figure(out / "blocked.png", fig))
    plt.close(fig)


def _finish(fig, ax, path: Path, written: list[Path]) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    _save(fig, path, written)


def _save(fig, path: Path, written: list[Path]) -> None:
    """Lay ``fig`` out, write it to ``path`` (atomically, through ``platoon.runs``) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    written.append(write_figure(path, fig))
    plt.close(fig)


SWEEP_COLUMNS = ("steps", "hours", "rollouts_per_hour", "permit_busy_share", "trainer_idle_share",
                 "staleness_mean", "informative_share", "stale_groups", "rejected_groups", "pass_at_1_last")
"""The quantities of a sweep's table, in order."""


def _label(key: str) -> str:
    return next(label for k, label, _ in SUMMARY if k == key)


def summary_table(path: Path):
    """A rich table of one run's summary (``platoon simulate`` prints it)."""
    from rich.table import Table

    summary = summarize(load_run(path, events=False))
    table = Table(title=f"platoon simulate: {path}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, label, _ in SUMMARY:
        table.add_row(label, fmt(key, summary[key]))
    return table


def _ratio(value: float, first: float) -> float | None:
    if value != value or first != first or first == 0:
        return None
    return value / first


def _sweep_cells(rows: Sequence[dict], i: int) -> list[str]:
    cells = []
    for key in SWEEP_COLUMNS:
        ratio = _ratio(rows[i][key], rows[0][key])
        cells.append(fmt(key, rows[i][key]) + (f" ({ratio:.2f}x)" if i and ratio is not None else ""))
    return cells


def sweep_table(title: str, points: Sequence[Sequence[str]], runs: Sequence[Path]):
    """A rich table of a sweep: a row per point (its overrides), each quantity with its ratio to the first point's."""
    from rich.table import Table

    rows = [summarize(load_run(p, events=False)) for p in runs]
    table = Table(title=title)
    table.add_column("point", no_wrap=True, min_width=max((len(" ".join(p)) for p in points), default=5))
    for key in SWEEP_COLUMNS:
        table.add_column(_label(key), justify="right")
    for i, point in enumerate(points):
        table.add_row(" ".join(point), *_sweep_cells(rows, i))
    return table


def sweep_markdown(points: Sequence[Sequence[str]], runs: Sequence[Path]) -> str:
    """The sweep's table in markdown (``sweep.md``)."""
    rows = [summarize(load_run(p, events=False)) for p in runs]
    lines = ["| point | " + " | ".join(_label(k) for k in SWEEP_COLUMNS) + " |",
             "|---|" + "---:|" * len(SWEEP_COLUMNS)]
    for i, point in enumerate(points):
        lines.append(f"| {' '.join(point)} | " + " | ".join(_sweep_cells(rows, i)) + " |")
    return "\n".join(lines) + "\n"


def show_simulated(outcome: Outcome, console: Console) -> None:
    """What ``platoon simulate`` prints once its runs are done: one run's summary table, or a sweep's table (a row
    per point), whose markdown it also writes into the sweep's directory as ``sweep.md``."""
    if not outcome.points:
        console.print(summary_table(outcome.path))
        return
    console.print(sweep_table(f"platoon simulate --sweep: {outcome.path}", outcome.points, outcome.runs))
    write_text_file(outcome.path / "sweep.md", sweep_markdown(outcome.points, outcome.runs))


def report(paths: Sequence[Path], out: Path | None = None) -> list[Path]:
    """``platoon report``: load each run and write the report into ``out`` (default: the first run's
    ``report/``). A path that is not a run directory (none, or one without ``lock.json``) raises
    FileNotFoundError before anything is written."""
    for p in paths:
        if Path(p).is_dir() and not (Path(p) / "lock.json").is_file():
            raise FileNotFoundError(f"{p}: not a run directory (it holds no lock.json)")
    runs = [load_run(p, events=False) for p in paths]
    return write_report(runs, Path(out) if out is not None else Path(paths[0]) / "report")


__all__ = ["ONLY", "SHARES", "SUMMARY", "SWEEP_COLUMNS", "cell", "fmt", "is_twin", "report", "twin_error", "step_lengths", "step_rows", "summarize",
           "show_simulated", "summary_markdown", "summary_table", "sweep_markdown", "sweep_table", "write_report"]
