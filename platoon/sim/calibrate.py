"""``platoon calibrate RUN``: the simulator's workload (the ``sim`` block) fitted from a live run's trace and logs.

A simulated run calibrates too, recovering the workload it was simulated with (what the tests check the fits by).

What is fitted, each from ``trace.json``'s spans (docs/run-directory.md, "trace.json") and how well it holds:

- ``rollout.turns``: the model calls of passing and of failing rollouts (``rollout`` spans' ``turns`` and
  ``passed``), as empirical distributions. Turns change as the policy learns because passing rollouts take fewer
  turns and the pass share grows: the fit's check is how well ``pass share x passing mean + (1 - pass share) x
  failing mean`` predicts the mean turns of each third of the run;
- ``rollout.env_step_s``: the environment step after each model call (``env_step`` spans), plus the rest of a
  rollout's time that no span covers, spread over its turns (the event loop's own time between calls), empirical;
- ``rollout.first_call_s``: start-ups (``startup`` spans), empirical; none when every one took under a millisecond;
- ``service``: one batched forward pass of n sequences takes ``base_s + per_sequence_s x n`` (``batch`` spans,
  least squares; R-squared and the median relative error say how well), ``handoff_s`` the median time between one
  batch's end and the next one's start (the live service's own time between batches), ``max_batch`` the run's
  ``model.max_batch``. Under ``train.inference.engine: vllm`` the servers batch out of sight: a request at a server
  with c requests in flight on average takes ``base_s + per_sequence_s x c`` (``model_call`` spans, their
  ``concurrency``; least squares, calls that a weight update paused left out), ``pause_s`` the median ``pause``
  span, ``max_batch`` the launch's ``--max-num-seqs`` when it sets one;
- ``trainer``: a step's work ``step_s + per_datum_s x datums`` and ``service_slowdown`` k, the model service's
  slowing of it (``train`` spans and the time ``o`` of each that ``batch`` spans overlap: processor sharing makes a
  step last ``W + o x k / (1 + k)``, least squares with every term at least 0, R-squared and the median relative
  error say how well; no overlap, as under ``max_staleness: 0``, fits k = 0), ``publish_s`` and ``eval_s``
  (medians of ``publish`` and ``eval`` spans, which are not slowed: they hold their contention as measured);
- ``population`` and ``learning``: for a run of one environment with settled groups enough, the learning model
  (``platoon.sim.fit_learning``) from ``tasks/events.jsonl``: the gain of a task's own skill per trained group and
  its half-life, the change of the other tasks of its similarity group (``similar_by``: the task columns given, else
  the run's ``train.label_by``, else no groups) and of every task, each task's starting logit, whose means by group
  and spread become the difficulties; how well it holds: pseudo-R² and a forecast of the last third. Otherwise the
  run's pass share held fixed: each entry's tasks (``tasks/pool.json``'s count) get difficulties whose mean pass
  rate is the traced rollouts' pass share and whose spread gives the traced groups' share of mixed outcomes
  (passes and failures), and learning is off.

Empirical distributions keep at most ``MAX_VALUES`` evenly spaced quantiles of what was measured, so a workload file
stays small however long the run was.

``calibrate_to`` is the command's body: the workload's text to print, or the fits' table, its notes and the file
written with ``-o``.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from platoon.config.bounds import MAX_SLOWDOWN
from platoon.config.errors import ConfigError
from platoon.config.loader import config_from_lock
from platoon.config.problems import describe_errors
from platoon.config.sim import SimConfig
from platoon.config.yaml_loader import load_yaml
from platoon.console import make_console
from platoon.runs.atomic import write_atomic
from platoon.runs.rundir import RunDir
from platoon.runs.trace import SERVICE, TRAINER, read_trace, track_names
from platoon.sim.fit_learning import fit_run, learning_sections

MAX_VALUES = 512
WEAK_R2 = 0.5
"""Below this R-squared the trainer's fit says its slowdown is weakly identified (a note beside the fits)."""
MIN_STARTUP_S = 1e-3
_GAUSS_HERMITE = np.polynomial.hermite_e.hermegauss(40)


class CalibrationError(ValueError):
    """A run that cannot be calibrated (no trace, too few spans): the message says what is missing."""


@dataclass(frozen=True)
class Fit:
    """One fitted quantity: the sim key it sets, its value in short, the samples it rests on and how well it holds."""

    key: str
    value: str
    samples: int
    quality: str


@dataclass
class Calibration:
    """The fitted ``sim`` block, the fits it came from, and notes on what was not fitted."""

    sim: dict[str, Any]
    fits: list[Fit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Rollout:
    turns: int
    passed: bool
    seconds: float
    covered: float
    third: int
    group: tuple


def calibrate(run: Path, similar_by: Sequence[str] | None = None) -> Calibration:
    """Fit the workload of the live run at ``run`` (module docstring); ``similar_by``: the task columns that name
    the learning model's similarity groups (None: the run's ``train.label_by``, else no groups). Raises
    CalibrationError."""
    rd = RunDir(run)
    if not rd.lock_path.is_file():
        raise CalibrationError(f"{run}: not a run directory (it holds no lock.json)")
    lock = rd.read_lock()
    if lock.get("runtime") not in ("live", "sim"):
        raise CalibrationError(f"{run}: a run of no known runtime ({lock.get('runtime')!r}); calibrate fits a live "
                               "run's workload (or recovers a simulated run's own)")
    events = [e for e in read_trace(rd.trace_path) if e.get("ph") == "X"]
    if not events:
        raise CalibrationError(f"{rd.trace_path}: no spans (a run with trace.enabled: false, or of an older "
                               "platoon); train with the trace on to calibrate")
    cfg = config_from_lock(lock, str(rd.lock_path))
    cal = Calibration(sim={})
    names = track_names(read_trace(rd.trace_path))
    by_name: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_name[e["name"]].append(e)
    rollouts = _rollouts(events, names)
    _fit_turns(cal, rollouts)
    _fit_env_steps(cal, by_name["env_step"], rollouts)
    _fit_startups(cal, by_name["startup"])
    if cfg.train.inference.engine == "vllm":
        _fit_servers(cal, by_name["model_call"], by_name["pause"], cfg.train.inference)
    else:
        _fit_service(cal, by_name["batch"], cfg.model.max_batch)
    _fit_trainer(cal, by_name)
    if "pause_s" in cal.sim["service"]:  # the pause is the publish's last part: rounding must not make it longer
        cal.sim["service"]["pause_s"] = min(cal.sim["service"]["pause_s"], cal.sim["trainer"]["publish_s"])
    _fit_population(cal, rollouts, rd, cfg)
    fit_learning_block(cal, rd, cfg, similar_by)
    return cal


# --- the rollouts ------------------------------------------------------------------------------------------------


def _seconds(e: dict) -> float:
    return float(e.get("dur", 0)) / 1e6


def _rollouts(events: list[dict], names: dict[int, str]) -> list[_Rollout]:
    """Each traced rollout that ended ``ok`` with its turns, outcome, length and the time its child spans cover."""
    lanes: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if names.get(e.get("tid"), "").startswith("rollout lane"):
            lanes[e["tid"]].append(e)
    whole = [e for lane in lanes.values() for e in lane if e["name"] == "rollout"]
    if not whole:
        raise CalibrationError("the trace holds no rollout spans (trace.group_every past every drawn group?)")
    end = max(e["ts"] + e["dur"] for e in whole)
    begin = min(e["ts"] for e in whole)
    out = []
    for lane in lanes.values():
        lane.sort(key=lambda e: (e["ts"], e["name"] != "rollout"))
        for i, e in enumerate(lane):
            args = e.get("args") or {}
            if e["name"] != "rollout" or args.get("status") != "ok" or not isinstance(args.get("turns"), int):
                continue
            stop = e["ts"] + e["dur"]
            children = [c for c in lane[i + 1:] if c["ts"] < stop and c["name"] in
                        ("startup", "model_call", "env_step", "teardown")]
            covered = sum(_seconds(c) for c in children)
            third = min(2, int(3 * (e["ts"] - begin) / max(1, end - begin)))
            out.append(_Rollout(args["turns"], bool(args.get("passed")), _seconds(e), covered, third,
                                tuple(args.get("group") or ())))
    if not out:
        raise CalibrationError("the trace holds no rollout that ended ok")
    return out


def _quantiles(values: Sequence[float], *, integers: bool = False) -> list[float]:
    arr = np.sort(np.asarray(values, dtype=float))
    if len(arr) > MAX_VALUES:
        arr = np.quantile(arr, np.linspace(0.0, 1.0, MAX_VALUES))
    return [int(round(v)) for v in arr] if integers else [round(float(v), 6) for v in arr]


def _fit_turns(cal: Calibration, rollouts: list[_Rollout]) -> None:
    passing = [r.turns for r in rollouts if r.passed]
    failing = [r.turns for r in rollouts if not r.passed]
    turns: dict[str, Any] = {"passing": _quantiles(passing or failing, integers=True),
                             "failing": _quantiles(failing or passing, integers=True)}
    cal.sim.setdefault("rollout", {})["turns"] = turns
    mean_pass = float(np.mean(passing)) if passing else math.nan
    mean_fail = float(np.mean(failing)) if failing else math.nan
    errors = []
    for third in range(3):
        part = [r for r in rollouts if r.third == third]
        if not part or not passing or not failing:
            continue
        share = sum(r.passed for r in part) / len(part)
        predicted = share * mean_pass + (1 - share) * mean_fail
        observed = float(np.mean([r.turns for r in part]))
        errors.append(f"{observed:.2f} vs {predicted:.2f}")
    quality = ("mean turns by third of the run, measured vs predicted from its pass share: " + ", ".join(errors)
               if errors else "one outcome only: turns do not follow learning")
    cal.fits.append(Fit("rollout.turns", f"passing mean {mean_pass:.2f}, failing mean {mean_fail:.2f}",
                        len(rollouts), quality))


def _fit_env_steps(cal: Calibration, steps: list[dict], rollouts: list[_Rollout]) -> None:
    seconds = [_seconds(e) for e in steps]
    turns = sum(r.turns for r in rollouts)
    # the rest of each rollout's time, which no child span covers: the event loop's own work between calls
    residual = max(0.0, sum(r.seconds - r.covered for r in rollouts)) / turns if turns else 0.0
    values = [s + residual for s in seconds] or [residual]
    cal.sim["rollout"]["env_step_s"] = {"dist": "empirical", "values": _quantiles(values)}
    cal.fits.append(Fit("rollout.env_step_s", f"median {np.median(values):.4g} s (uncovered time per turn "
                        f"{residual:.4g} s included)", len(seconds), f"p90 {np.quantile(values, 0.9):.4g} s"))


def _fit_startups(cal: Calibration, spans: list[dict]) -> None:
    seconds = [_seconds(e) for e in spans]
    if not seconds or max(seconds) < MIN_STARTUP_S:
        cal.sim["rollout"]["first_call_s"] = None
        cal.fits.append(Fit("rollout.first_call_s", "none", len(seconds), "every start-up under 1 ms"))
        return
    cal.sim["rollout"]["first_call_s"] = {"dist": "empirical", "values": _quantiles(seconds)}
    cal.fits.append(Fit("rollout.first_call_s", f"median {np.median(seconds):.4g} s", len(seconds),
                        f"p90 {np.quantile(seconds, 0.9):.4g} s"))


def nonneg_fit(y: Sequence[float], *xs: Sequence[float], intercept: bool = True) -> tuple[list[float], float, float]:
    """Least squares ``y = c0 + c1 x1 + c2 x2 + ...`` with every ``c >= 0`` (``intercept`` False: ``c0 = 0``):
    ``([c0, c1, ...], r_squared, median relative error)``. Exact non-negative least squares for the few terms a fit here has: the best, by squared error,
    of the unconstrained fits of each subset of the terms whose coefficients all come out non-negative (the
    constrained optimum is one of them). A variable that never varies cannot be told from the fixed part: its
    coefficient is 0."""
    ys = np.asarray(y, dtype=float)
    cols = [np.ones_like(ys)] + [np.asarray(x, dtype=float) for x in xs]
    usable = [0] * intercept + [i for i in range(1, len(cols)) if len(ys) >= 2 and (np.ptp(cols[i]) > 0 or not intercept)]
    best, best_sse = np.zeros(len(cols)), float(np.sum(ys ** 2))  # no term at all: predict 0
    tie = 1e-12 * best_sse  # a better fit must beat rounding
    for size in range(1, len(usable) + 1):  # fewer terms first: a tie keeps the simpler fit
        for subset in itertools.combinations(usable, size):
            a = np.column_stack([cols[i] for i in subset])
            if np.linalg.matrix_rank(a) < size:
                continue
            coef = np.linalg.lstsq(a, ys, rcond=None)[0]
            sse = float(np.sum((ys - a @ coef) ** 2))
            if np.all(coef >= 0) and sse < best_sse - tie:
                best, best_sse = np.zeros(len(cols)), sse
                best[list(subset)] = coef
    predicted = sum(c * col for c, col in zip(best, cols, strict=True))
    total = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 - float(np.sum((ys - predicted) ** 2)) / total if total > 0 else 1.0
    ok = ys > 0
    rel = float(np.median(np.abs(predicted[ok] - ys[ok]) / ys[ok])) if ok.any() else math.nan
    return [float(c) for c in best], r2, rel


def linear_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float, float]:
    """Least squares ``y = a + b x`` with ``a, b >= 0`` (``nonneg_fit``): ``(a, b, r_squared, median relative
    error)``."""
    (a, b), r2, rel = nonneg_fit(y, x)
    return a, b, r2, rel


def _fit_service(cal: Calibration, batches: list[dict], max_batch: int) -> None:
    if not batches:
        raise CalibrationError(f"the trace holds no '{SERVICE}' batch spans")
    sizes = [float((e.get("args") or {}).get("size", 1)) for e in batches]
    a, b, r2, rel = linear_fit(sizes, [_seconds(e) for e in batches])
    ordered = sorted(batches, key=lambda e: e["ts"])
    gaps = [max(0.0, (y["ts"] - x["ts"] - x["dur"]) / 1e6) for x, y in zip(ordered, ordered[1:], strict=False)]
    handoff = float(np.median(gaps)) if gaps else 0.0
    cal.sim["service"] = {"base_s": round(a, 9), "per_sequence_s": round(b, 9), "max_batch": max_batch,
                          "handoff_s": round(handoff, 9)}
    cal.fits.append(Fit("service", f"{a * 1e3:.3g} ms + {b * 1e3:.3g} ms x sequences (batches of "
                        f"{min(sizes):.0f}-{max(sizes):.0f}), hand-off {handoff * 1e3:.3g} ms", len(batches),
                        _fit_quality(sizes, r2, rel)))


def _fit_servers(cal: Calibration, calls: list[dict], pauses: list[dict], inference: Any) -> None:
    """The vLLM servers' timing from the client's side (module docstring)."""
    measured = [e for e in calls if "concurrency" in (e.get("args") or {})]
    if not measured:
        raise CalibrationError("the trace holds no model_call span with its server's concurrency (a run of an "
                               "older platoon, or no traced rollout)")
    clear = [e for e, paused in zip(measured, covered_s(measured, pauses), strict=True) if paused <= 0]
    used = clear or measured
    load = [float(e["args"]["concurrency"]) for e in used]
    seqs = _max_num_seqs(inference.launch.args if inference.launch is not None else [])
    if seqs is not None and max(load) > seqs:
        # past the cap the requests take turns: c in flight take c / m rounds of base_s + per_sequence_s x m
        rounds = np.maximum(1.0, np.asarray(load) / seqs)
        (_, a, b), r2, rel = nonneg_fit([_seconds(e) for e in used], rounds, rounds * np.minimum(load, seqs),
                                        intercept=False)
    else:
        a, b, r2, rel = linear_fit(load, [_seconds(e) for e in used])
    pause = float(np.median([_seconds(e) for e in pauses])) if pauses else 0.0
    cal.sim["service"] = {"base_s": round(a, 9), "per_sequence_s": round(b, 9), "pause_s": round(pause, 6)}
    if seqs is not None:
        cal.sim["service"]["max_batch"] = seqs
    else:
        cal.notes.append("max_batch (the requests a server runs at once) is not in the trace: the simulator's default "
                         "stands; set sim.service.max_batch to the servers' --max-num-seqs")
    cal.fits.append(Fit("service", f"{a * 1e3:.4g} ms + {b * 1e3:.4g} ms x requests in flight at the server "
                        f"({min(load):.1f}-{max(load):.1f}), pause {pause * 1e3:.3g} ms at each publish",
                        len(used), _fit_quality(load, r2, rel)))


def _max_num_seqs(args: Sequence[str]) -> int | None:
    """The ``--max-num-seqs`` of a vLLM server's arguments, when they set one."""
    for i, arg in enumerate(args):
        value = (arg.split("=", 1)[1] if arg.startswith("--max-num-seqs=")
                 else args[i + 1] if arg == "--max-num-seqs" and i + 1 < len(args) else None)
        if value is not None and value.isdigit():
            return int(value)
    return None


def _fit_quality(x: Sequence[float], r2: float, rel: float) -> str:
    if np.ptp(np.asarray(x, dtype=float)) == 0:
        return f"one size only: its mean (median error {rel:.1%})"
    return f"R^2 {r2:.3f}, median error {rel:.1%}"


def covered_s(spans: list[dict], by: list[dict]) -> np.ndarray:
    """Seconds of each of ``spans`` that the union of the spans ``by`` covers."""
    if not spans or not by:
        return np.zeros(len(spans))
    union: list[list[int]] = []
    for e in sorted(by, key=lambda e: e["ts"]):
        if union and e["ts"] <= union[-1][1]:
            union[-1][1] = max(union[-1][1], e["ts"] + e["dur"])
        else:
            union.append([e["ts"], e["ts"] + e["dur"]])
    starts, ends = (np.array(c, dtype=float) for c in zip(*union, strict=True))
    before = np.concatenate([[0.0], np.cumsum(ends - starts)])  # covered time before each interval

    def upto(t: np.ndarray) -> np.ndarray:  # covered time before t
        j = np.searchsorted(starts, t, side="right") - 1  # the last interval starting at or before t
        k = np.maximum(j, 0)
        return np.where(j >= 0, before[k] + np.clip(t - starts[k], 0.0, ends[k] - starts[k]), 0.0)

    ts = np.array([e["ts"] for e in spans], dtype=float)
    return (upto(ts + np.array([e["dur"] for e in spans], dtype=float)) - upto(ts)) / 1e6


def _fit_trainer(cal: Calibration, by_name: dict[str, list[dict]]) -> None:
    """A step's time, ``W + o x k / (1 + k)`` for a step of work ``W = step_s + per_datum_s x datums`` that the
    model service's batches overlap for ``o`` seconds (it does ``o / (1 + k)`` of its work meanwhile): least squares
    in ``(step_s, per_datum_s, c = k / (1 + k))``, each at least 0, then ``k = c / (1 - c)``."""
    train = by_name["train"]
    if not train:
        raise CalibrationError(f"the trace holds no '{TRAINER}' train spans")
    datums = [float((e.get("args") or {}).get("datums", 0)) for e in train]
    seconds = [_seconds(e) for e in train]
    overlap = covered_s(train, by_name["batch"])
    (a, b, c), r2, rel = nonneg_fit(seconds, datums, overlap)
    slowdown = min(MAX_SLOWDOWN, c / (1.0 - c)) if c < 1 else MAX_SLOWDOWN
    share = float(overlap.sum()) / sum(seconds) if sum(seconds) > 0 else 0.0
    publish = float(np.median([_seconds(e) for e in by_name["publish"]])) if by_name["publish"] else 0.0
    evals = float(np.median([_seconds(e) for e in by_name["eval"]])) if by_name["eval"] else 0.0
    cal.sim["trainer"] = {"step_s": round(a, 6), "per_datum_s": round(b, 9), "publish_s": round(publish, 6),
                          "eval_s": round(evals, 6), "service_slowdown": round(slowdown, 6)}
    sharing = (f"service_slowdown {slowdown:.3g} (batches ran beside {share:.0%} of training)" if share > 0 else
               "service_slowdown 0 (no batch ran beside training: not measured)")
    cal.fits.append(Fit("trainer", f"{a:.3g} s + {b * 1e3:.3g} ms x datums, {sharing}; publish {publish:.3g} s, "
                        f"eval {evals:.3g} s", len(train), _trainer_quality(datums, overlap, r2, rel)))
    if 0 < slowdown and r2 < WEAK_R2:
        cal.notes.append(f"the trainer's own time and service_slowdown trade off (R^2 {r2:.2f}): the fit holds at "
                         "this run's concurrency; calibrate on a run whose steps train both alone and beside batches "
                         "to predict others (docs/fidelity.md)")


def _trainer_quality(datums: Sequence[float], overlap: np.ndarray, r2: float, rel: float) -> str:
    if np.ptp(np.asarray(datums, dtype=float)) > 0 or np.ptp(overlap) > 0:
        quality = f"R^2 {r2:.3f}, median error {rel:.1%}"
    else:
        quality = f"steps alike: their mean (median error {rel:.1%})"
    if np.ptp(np.asarray(datums, dtype=float)) == 0:
        quality += f"; every step trained {datums[0]:.0f} datums: step_s holds their time, per_datum_s is 0"
    return quality


def mean_pass_rate(mu: float, sd: float) -> float:
    """``E[sigmoid(mu + sd Z)]``, Z standard normal (Gauss-Hermite quadrature)."""
    nodes, weights = _GAUSS_HERMITE
    return float(np.sum(weights / (1.0 + np.exp(-(mu + sd * nodes)))) / math.sqrt(2 * math.pi))


def mixed_share(mu: float, sd: float, group_size: int) -> float:
    """The chance that a group of ``group_size`` rollouts of a task drawn from the population mixes passes and
    failures: ``1 - E[p^G] - E[(1 - p)^G]``, ``p = sigmoid(mu + sd Z)``."""
    nodes, weights = _GAUSS_HERMITE
    p = 1.0 / (1.0 + np.exp(-(mu + sd * nodes)))
    return float(1.0 - np.sum(weights * (p ** group_size + (1 - p) ** group_size)) / math.sqrt(2 * math.pi))


def spread_for(share: float, mixed: float, group_size: int) -> float:
    """The population's spread (a logit's sd) at which groups mix outcomes ``mixed`` of the time, its mean difficulty
    keeping the pass ``share`` (``difficulty_for``): a wider spread puts more tasks at always or never."""
    lo, hi = 0.0, 10.0
    for _ in range(60):  # the mixed share falls as the spread grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mixed_share(-difficulty_for(share, mid), mid, group_size) > mixed else (lo, mid)
    return round((lo + hi) / 2, 4)


def difficulty_for(share: float, sd: float) -> float:
    """The population's mean difficulty (a logit) whose tasks pass ``share`` of the time at ability 0."""
    share = min(max(share, 1e-4), 1 - 1e-4)
    lo, hi = -40.0, 40.0
    for _ in range(100):  # mean_pass_rate(-d) falls as d grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_pass_rate(-mid, sd) > share else (lo, mid)
    return round((lo + hi) / 2, 6)


def _fit_population(cal: Calibration, rollouts: list[_Rollout], rd: RunDir, cfg: Any) -> None:
    share = sum(r.passed for r in rollouts) / len(rollouts)
    pool = rd.read_pool() or []
    counts = defaultdict(int)
    for _, entry, _ in pool:
        counts[entry] += 1
    tasks = max(counts.values()) if counts else cfg.sim.population.tasks
    groups: dict[tuple, list[bool]] = defaultdict(list)
    for r in rollouts:
        groups[r.group].append(r.passed)
    whole = [g for g in groups.values() if len(g) > 1]
    size = round(float(np.median([len(g) for g in whole]))) if whole else 0
    if size > 1:
        mixed = sum(0 < sum(g) < len(g) for g in whole) / len(whole)
        sd = spread_for(share, mixed, size)
        spread = f"spread {sd} (groups of {size} mixed {mixed:.3f} of the time; the fit gives " \
                 f"{mixed_share(-difficulty_for(share, sd), sd, size):.3f})"
    else:
        sd = cfg.sim.population.difficulty_sd
        spread = f"spread {sd} (the default: no whole group traced)"
    cal.sim["population"] = {"tasks": tasks, "difficulty_mean": difficulty_for(share, sd), "difficulty_sd": sd}
    cal.sim["learning"] = {"enabled": False}
    cal.fits.append(Fit("population", f"pass share {share:.3f} held fixed, {spread}; {tasks} tasks an entry",
                        len(rollouts), "learning not fitted: the pass share is the run's mean throughout"))
    if len(counts) > 1 and len(set(counts.values())) > 1:
        cal.notes.append(f"entries list {dict(counts)} tasks; the workload gives each the largest count, {tasks}")


def fit_learning_block(cal: Calibration, rd: RunDir, cfg: Any, similar_by: Sequence[str] | None) -> None:
    """Replace the fixed pass share by the learning model fitted from the run's settled groups, where it can be."""
    fitted = fit_run(rd, cfg, similar_by)
    if isinstance(fitted, str):
        cal.notes.append(fitted)
        return
    fit, columns = fitted
    if fit.gain <= 0:  # the simulator's gain cannot be negative, and at 0 its ability could not move either
        cal.notes.append(f"learning fitted but not used: a trained group's own task {fit.gain:+.4g} logit, every "
                         f"task {fit.ability_gain:+.4g} (pseudo-R² {fit.pseudo_r2:.3f}); the pass share stays fixed. "
                         "A uniform run trains its tasks at about the same rate, and a task trained more often is one "
                         "that stayed mixed: a run whose draws differ between tasks separates the two better")
        return
    population, learning, notes = learning_sections(fit, columns, cal.sim["population"]["tasks"])
    cal.sim["population"], cal.sim["learning"] = population, learning
    cal.fits = [f for f in cal.fits if f.key != "population"]
    forget = f"half-life {fit.half_life:g} versions" if fit.half_life else "never forgotten"
    group = f", the rest of its {'/'.join(columns)} group {fit.label_gain:+.4g}" if columns else ""
    forecast = f"; last third forecast from the first two, per group: mean error {fit.forecast_error:.3f}" \
        if fit.forecast_error is not None else ""
    cal.fits.append(Fit("learning", f"a trained group: its task {fit.gain:+.4g} logit ({forget}){group}, every "
                                    f"task {fit.ability_gain:+.4g}; start spread {fit.within_sd:.3f}",
                        fit.observations, f"pseudo-R² {fit.pseudo_r2:.3f}{forecast}"))
    cal.notes += notes


# --- the workload file -------------------------------------------------------------------------------------------


def workload_text(cal: Calibration, run: Path) -> str:
    """The workload file of ``cal`` (YAML: a ``sim`` block, with what it was fitted from in comments), for
    ``platoon simulate CONFIG --workload FILE``."""
    lines = [f"# fitted by platoon calibrate from {run}", "#"]
    lines += [f"# {f.key}: {f.value} ({f.samples} samples; {f.quality})" for f in cal.fits]
    lines += [f"# note: {n}" for n in cal.notes]
    return "\n".join(lines) + "\n" + yaml.safe_dump({"sim": cal.sim}, sort_keys=False, default_flow_style=None,
                                                     width=110)


def calibrate_to(run: Path, out: Path | None, console: Console | None = None,
                 similar_by: Sequence[str] | None = None) -> str:
    """``platoon calibrate RUN [-o OUT]``: fit ``run``'s workload. Without ``out``, the workload file's text, to
    print; with it, the fits' table and notes printed on ``console``, the file written to ``out`` atomically (through
    ``platoon.runs``), and the line that names it. Raises CalibrationError, ConfigError."""
    cal = calibrate(run, similar_by)
    text = workload_text(cal, run)
    if out is None:
        return text
    console = console or make_console()
    console.print(fits_table(cal, run))
    for note in cal.notes:
        console.print(f"note: {note}", highlight=False)
    write_atomic(out, text)
    return f"workload: {out} (platoon simulate CONFIG --workload {out})\n"


def fits_table(cal: Calibration, run: Path) -> Table:
    """The fits of ``cal`` as a rich table: each sim key, its fitted value, its samples and how well it holds."""
    table = Table(title=f"platoon calibrate: {run}")
    for column in ("sim key", "fitted", "samples", "how well it holds"):
        table.add_column(column, justify="right" if column == "samples" else "left")
    for fit in cal.fits:
        table.add_row(fit.key, fit.value, str(fit.samples), fit.quality)
    return table


def read_workload(path: Path) -> dict[str, Any]:
    """The ``sim`` block of the workload file at ``path``, checked as a config's ``sim`` is; raises one ConfigError
    naming the file with every problem."""
    try:
        data = load_yaml(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"--workload: cannot read it: {exc.strerror or exc}"], str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"--workload: not YAML: {exc}"], str(path)) from None
    sim = data.get("sim") if isinstance(data, dict) else None
    if not isinstance(sim, dict) or set(data) != {"sim"}:
        raise ConfigError(["--workload: a workload file holds one mapping, sim (as platoon calibrate writes it)"],
                          str(path))
    try:
        SimConfig.model_validate(sim)
    except ValidationError as exc:
        raise ConfigError([str(p) for p in describe_errors(exc, root=SimConfig, data=sim, prefix="sim")],
                          str(path)) from None
    return sim


__all__ = ["MAX_VALUES", "Calibration", "CalibrationError", "Fit", "calibrate", "calibrate_to", "covered_s",
           "difficulty_for", "fits_table", "linear_fit", "mean_pass_rate", "mixed_share", "nonneg_fit", "read_workload", "spread_for",
           "workload_text"]
