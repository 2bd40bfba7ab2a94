"""Fitting the learning model (``sim.learning``) to a live run's per-task events, for ``platoon calibrate``.

Every settled group of the run (``tasks/events.jsonl``: its task, the version that sampled it, its passes of its
valid members) is one binomial observation. Its logit is modelled, as the simulator's learning model has it
(``platoon.sim.learning``), as

    c[t] + gain x S[t](v) + label_gain x G[L](v) + ability_gain x A(v)

where ``c[t]`` is the task's own starting logit, ``A(v)`` the number of groups the run had trained before version
``v`` (a group sampled at version ``u`` and consumed with verdict ``trained`` counts from ``u + 1``: the run's
staleness bound makes its step at least that late), ``G[L](v)`` the number of those of the task's similarity group
``L`` (``similar_by``, the task columns it is fitted by), and ``S[t](v)`` the task's own, each faded by
``2**(-age / half_life)``. The half-life is chosen from a grid by likelihood (forgetting off included); the rest by
Newton's method on the binomial likelihood with a small ridge on the slopes.

How well it holds is said two ways: the share of the deviance of a model with starting logits alone that the
slopes explain (McFadden's pseudo-R²), and a forecast: fitted on the first two thirds of the versions, the pass
share of each group's settled rollouts over the last third, predicted against measured (mean absolute error).

Nothing here runs the simulator; ``platoon.sim.calibrate`` turns the fit into a ``sim.learning`` block.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

HALF_LIVES = (None, 8.0, 16.0, 32.0, 64.0, 128.0)
"""Forgetting half-lives tried, in policy versions (None: never forgotten)."""
RIDGE = 1e-3
MAX_START_VARIANCE = 0.5
"""A task's starting logit counts toward its group's mean and the spread only when its variance is at most this."""


@dataclass(frozen=True)
class Observation:
    """One settled group: its task, its similarity group, the version that sampled it, passes of valid, and
    whether a step trained it."""

    task: str
    group: str
    version: int
    passes: int
    valid: int
    trained: bool


@dataclass(frozen=True)
class LearningFit:
    """The fitted slopes (logit per trained group), half-life, starting logits by task and their groups' means, and
    how well the fit holds."""

    gain: float
    label_gain: float
    ability_gain: float
    half_life: float | None
    start: dict[str, float]
    group_start: dict[str, float]
    within_sd: float
    pseudo_r2: float
    forecast_error: float | None
    observations: int
    errors: tuple[float, ...] = (0.0, 0.0, 0.0)  # standard errors of gain, label_gain, ability_gain


def observations(events: Sequence[dict], group_of: dict[str, str]) -> list[Observation]:
    """The settled groups of ``events`` (a ``tasks/events.jsonl``), each with its similarity group (``group_of``
    by task id; a task not in it is left out) and whether its fate was ``consumed`` with verdict ``trained``."""
    fates = {(e["start"], e["seq"]): e["fate"] for e in events if e.get("event") == "fate"}
    out = []
    for e in events:
        if e.get("event") != "settle" or e["task_id"] not in group_of or not e.get("valid"):
            continue
        trained = e.get("verdict") == "trained" and fates.get((e["start"], e["seq"])) == "consumed"
        out.append(Observation(e["task_id"], group_of[e["task_id"]], int(e.get("version") or 0),
                               int(e["passes"]), int(e["valid"]), trained))
    return out


def _features(obs: Sequence[Observation], half_life: float | None, grouped: bool = True) -> np.ndarray:
    """Per observation: (S, G, A) as the module doc defines them (G all 0 unless ``grouped``)."""
    by_version: dict[int, list[Observation]] = defaultdict(list)
    for o in obs:
        if o.trained:
            by_version[o.version + 1].append(o)
    effective = sorted(by_version)
    order = sorted(range(len(obs)), key=lambda i: obs[i].version)
    own: dict[str, list[int]] = defaultdict(list)  # each task's trained groups' effective versions so far
    group_count: dict[str, int] = defaultdict(int)
    total, k = 0, 0
    out = np.zeros((len(obs), 3))
    for i in order:
        v = obs[i].version
        while k < len(effective) and effective[k] <= v:
            for o in by_version[effective[k]]:
                own[o.task].append(effective[k])
                group_count[o.group] += 1
                total += 1
            k += 1
        ages = np.array([v - u for u in own[obs[i].task]], dtype=float)
        faded = float(np.power(2.0, -ages / half_life).sum()) if half_life else float(len(ages))
        out[i] = (faded, group_count[obs[i].group] if grouped else 0.0, total)
    return out


def _newton(task_index: np.ndarray, n_tasks: int, x: np.ndarray, passes: np.ndarray, valid: np.ndarray,
            iterations: int = 50) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """Binomial logistic regression with one intercept per task and slopes on ``x``: (intercepts, slopes,
    log-likelihood, the slopes' standard errors, each intercept's information). The intercepts' block of the Hessian is diagonal, which the solve
    uses (Schur complement; its inverse is the slopes' covariance)."""
    k = x.shape[1]
    c, beta = np.zeros(n_tasks), np.zeros(k)
    ll, schur, h_cc = -math.inf, np.eye(k), np.ones(n_tasks)
    for _ in range(iterations):
        eta = c[task_index] + x @ beta
        p = 1.0 / (1.0 + np.exp(-eta))
        w = np.maximum(valid * p * (1.0 - p), 1e-9)
        r = passes - valid * p
        g_c = np.bincount(task_index, r, n_tasks) - RIDGE * c
        g_b = x.T @ r - RIDGE * beta
        h_cc = np.bincount(task_index, w, n_tasks) + RIDGE
        h_cb = np.zeros((n_tasks, k))
        for j in range(k):
            h_cb[:, j] = np.bincount(task_index, w * x[:, j], n_tasks)
        h_bb = (x * w[:, None]).T @ x + RIDGE * np.eye(k)
        schur = h_bb - h_cb.T @ (h_cb / h_cc[:, None])
        d_b = np.linalg.solve(schur, g_b - h_cb.T @ (g_c / h_cc))
        d_c = (g_c - h_cb @ d_b) / h_cc
        c, beta = c + d_c, beta + d_b
        eta = c[task_index] + x @ beta
        new_ll = float(np.sum(passes * eta - valid * np.logaddexp(0.0, eta)))
        if abs(new_ll - ll) < 1e-8 * max(1.0, abs(new_ll)):
            ll = new_ll
            break
        ll = new_ll
    se = np.sqrt(np.maximum(np.diag(np.linalg.inv(schur)), 0.0)) if k else np.zeros(0)
    return c, beta, ll, se, h_cc


def fit_learning(obs: Sequence[Observation]) -> LearningFit:
    """The learning model's slopes, half-life and starting logits for ``obs`` (see the module doc). ValueError
    when there is too little to fit (under 50 groups, or none trained)."""
    if len(obs) < 50 or not any(o.trained for o in obs):
        raise ValueError(f"{len(obs)} settled groups, {sum(o.trained for o in obs)} trained: too few to fit learning")
    tasks = sorted({o.task for o in obs})
    at = {t: i for i, t in enumerate(tasks)}
    task_index = np.array([at[o.task] for o in obs])
    passes = np.array([o.passes for o in obs], dtype=float)
    valid = np.array([o.valid for o in obs], dtype=float)
    grouped = len({o.group for o in obs}) > 1  # one group: its count is every task's, the same feature twice
    best = None
    for half_life in HALF_LIVES:
        x = _features(obs, half_life, grouped) / _scale(obs)
        c, beta, ll, se, info = _newton(task_index, len(tasks), x, passes, valid)
        if best is None or ll > best[3]:
            best = (half_life, c, beta, ll, se, info)
    half_life, c, beta, ll, se, info = best
    _, _, ll0, _, _ = _newton(task_index, len(tasks), np.zeros((len(obs), 0)), passes, valid)
    saturated = float(np.sum(_xlogy(passes, passes / valid) + _xlogy(valid - passes, 1.0 - passes / valid)))
    pseudo_r2 = (ll - ll0) / (saturated - ll0) if saturated > ll0 else 0.0
    slopes, errors = beta / _scale(obs), se / _scale(obs)
    group_start, within_sd = _starts(tasks, c, info, {o.task: o.group for o in obs})
    return LearningFit(float(slopes[0]), float(slopes[1]), float(slopes[2]), half_life,
                       {t: float(v) for t, v in zip(tasks, c, strict=True)}, group_start,
                       within_sd, float(pseudo_r2), _forecast(obs, half_life),
                       len(obs), tuple(float(e) for e in errors))


def _starts(tasks: list[str], c: np.ndarray, info: np.ndarray, group_of: dict[str, str],
            ) -> tuple[dict[str, float], float]:
    """Each group's mean starting logit and the spread of tasks about their group's mean, from the tasks measured
    well enough (an intercept's variance ``1 / info`` at most ``MAX_START_VARIANCE``: a task that only ever failed
    has a start of minus infinity, which the ridge alone holds); the spread less the intercepts' own noise."""
    variance = 1.0 / np.maximum(info, 1e-12)
    good = variance <= MAX_START_VARIANCE
    if not good.any():
        good = np.ones(len(tasks), dtype=bool)
    groups: dict[str, list[float]] = defaultdict(list)
    for t, value, ok in zip(tasks, c, good, strict=True):
        if ok:
            groups[group_of[t]].append(float(value))
    fallback = float(np.mean(c[good]))
    group_start = {g: float(np.mean(groups[g])) if groups[g] else fallback for g in dict.fromkeys(group_of.values())}
    deviation = np.array([c[i] - group_start[group_of[t]] for i, t in enumerate(tasks) if good[i]])
    noise = float(np.mean(variance[good]))
    return group_start, float(math.sqrt(max(float(np.var(deviation)) - noise, 0.0)))


def _scale(obs: Sequence[Observation]) -> np.ndarray:
    """Feature scales (counts of trained groups run to thousands): the fit is on comparable units."""
    trained = max(sum(o.trained for o in obs), 1)
    return np.array([1.0, max(trained / 20.0, 1.0), max(trained / 2.0, 1.0)])


def _xlogy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, a * np.log(np.where(b > 0, b, 1.0)), 0.0)


def _forecast(obs: Sequence[Observation], half_life: float | None) -> float | None:
    """Mean absolute error of each group's pass share over the last third of the versions, from a fit on the
    first two thirds (groups with rollouts in both parts); None when a part is empty."""
    last = max(o.version for o in obs)
    cut = last * 2 // 3
    early = [o for o in obs if o.version <= cut]
    if not early or not any(o.trained for o in early) or len(early) == len(obs):
        return None
    tasks = sorted({o.task for o in early})
    at = {t: i for i, t in enumerate(tasks)}
    x_all = _features(obs, half_life, len({o.group for o in obs}) > 1) / _scale(early)
    mask = np.array([o.version <= cut for o in obs])
    c, beta, _, _, _ = _newton(np.array([at[o.task] for o in early]), len(tasks), x_all[mask],
                         np.array([o.passes for o in early], dtype=float), np.array([o.valid for o in early], dtype=float))
    predicted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    measured: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for o, row in zip(obs, x_all, strict=True):
        if o.version <= cut or o.task not in at:
            continue
        p = 1.0 / (1.0 + math.exp(-(c[at[o.task]] + float(row @ beta))))
        predicted[o.group][0] += p * o.valid
        predicted[o.group][1] += o.valid
        measured[o.group][0] += o.passes
        measured[o.group][1] += o.valid
    errors = [abs(predicted[g][0] / predicted[g][1] - measured[g][0] / measured[g][1]) for g in measured]
    return float(np.mean(errors)) if errors else None


def fit_run(rd: Any, cfg: Any, similar_by: Sequence[str] | None) -> tuple[LearningFit, list[str] | None] | str:
    """The fit of run directory ``rd`` (config ``cfg``), with the similarity groups its task columns
    ``similar_by`` name (None: ``train.label_by``'s, else one group); a sentence saying why not, where it cannot be
    fitted (several environments, a task that lacks a column, too few groups)."""
    from platoon.config.errors import ConfigError
    from platoon.sim.learning import group_names
    from platoon.sim.setup import environment_tasks

    if len(cfg.environments) != 1:
        return "learning is fitted for a run of one environment"
    columns = list(similar_by) if similar_by else ([cfg.train.label_by] if cfg.train.label_by else None)
    try:
        ids, data = environment_tasks(cfg.environments[0])
        groups = group_names(data, columns) if columns else [""] * len(ids)
    except (ConfigError, ValueError) as exc:
        return f"learning not fitted: {exc}"
    try:
        return fit_learning(observations(rd.read_events(), dict(zip(ids, groups, strict=True)))), columns
    except ValueError as exc:
        return f"learning not fitted: {exc}"


def learning_sections(fit: LearningFit, columns: list[str] | None, tasks: int) -> tuple[dict, dict, list[str]]:
    """The ``population`` and ``learning`` blocks of a fit, and notes on what the simulator's keys could not hold.
    The simulator's ability moves by ``gain x transfer`` per trained group: ``transfer`` is the fitted every-task
    change over the own-task gain, within its bounds [0, 1]."""
    notes = []
    gain = max(fit.gain, 1e-12)  # the caller keeps a fit whose own-task gain is not above 0 out
    transfer = min(max(fit.ability_gain / gain, 0.0), 1.0)
    if transfer != fit.ability_gain / gain:
        notes.append(f"the fitted every-task change {fit.ability_gain:.4g} a group is outside [0, {gain:.4g}] "
                     f"(transfer {fit.ability_gain / gain:.4g} clipped to {transfer:g})")
    population = {"tasks": tasks, "difficulty_mean": round(-float(np.mean(list(fit.group_start.values()))), 4),
                  "difficulty_sd": round(fit.within_sd, 4)}
    learning: dict[str, Any] = {"enabled": True, "gain": round(gain, 6), "transfer": round(transfer, 6),
                                "forget_half_life": fit.half_life}
    if columns:
        learning.update(similar_by=columns, label_gain=round(fit.label_gain, 6),
                        label_difficulty={g: round(-v, 4) for g, v in sorted(fit.group_start.items())})
    return population, learning, notes


__all__ = ["HALF_LIVES", "LearningFit", "Observation", "fit_learning", "fit_run", "learning_sections",
           "observations"]
