"""The dispatcher's step metrics: blocked shares, permits and rollouts in flight, batch kinds, the stale and the
short-step warnings; ``step_metrics``, what the dispatcher reports for a step.

Names are the release's: ``train/dispatch/blocked_share/<reason>``, ``rollout_client/permits_held_mean``,
``rollout_client/concurrency_achieved_fraction`` (= rollouts in flight, time-weighted, over the configured
concurrency: under ``permit_release: rollout`` that is ``max_concurrent_rollouts`` itself, so it reads as the permits'
busy share), ``rollout_client/groups_in_flight_{mean,max}``, ``train/batch/<kind>_groups``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from platoon.policy.outputs import SettledGroup
from platoon.policy.task_table import task_metrics
from platoon.policy.timeweighted import BlockedClock, TimeWeighted

if TYPE_CHECKING:  # the dispatcher calls step_metrics with itself; only the type goes the other way
    from platoon.policy.dispatcher import Dispatcher

STALE_WINDOW_STEPS = 10
STALE_SHARE = 0.02
KINDS = ("informative", "all_pass", "all_fail", "uniform_mixed")


class DispatchGauges:
    """Time-weighted gauges of one run; ``read(now=)`` gives the step's metrics and starts a new window."""

    def __init__(self, *, configured: int, now: float = 0.0) -> None:
        self.configured = configured
        self.blocked = BlockedClock(now=now)
        self.permits = TimeWeighted(now=now)
        self.rollouts = TimeWeighted(now=now)
        self.groups = TimeWeighted(now=now)
        self.last_blocked: dict[str, float] = dict.fromkeys(BlockedClock.REASONS, 0.0)

    def permits_changed(self, held: int, *, now: float) -> None:
        self.permits.set(held, now=now)

    def granted(self, rollouts: int, held: int, *, now: float) -> None:
        """``rollouts`` rollouts started and ``held`` permits are held now: ``rollout_started`` for each, then
        ``permits_changed`` (one step up by ``rollouts``: the same mean and peak, at one instant)."""
        if rollouts:
            self.rollouts.add(rollouts, now=now)
        self.permits.set(held, now=now)

    def rollout_started(self, *, now: float) -> None:
        self.rollouts.add(1, now=now)

    def rollout_ended(self, *, now: float) -> None:
        self.rollouts.add(-1, now=now)

    def group_started(self, *, now: float) -> None:
        self.groups.add(1, now=now)

    def group_ended(self, lease: object, *, now: float) -> None:
        self.groups.add(-1, now=now)

    def read(self, *, now: float, groups_in_flight: int) -> dict[str, float]:
        shares = self.blocked.read(now=now)
        self.last_blocked = shares
        permits_mean, _ = self.permits.read(now=now)
        rollouts_mean, rollouts_max = self.rollouts.read(now=now)
        groups_mean, groups_max = self.groups.read(now=now)
        metrics = {f"train/dispatch/blocked_share/{r}": s for r, s in shares.items()}
        metrics.update({
            "rollout_client/permits_held_mean": permits_mean,
            "rollout_client/rollouts_in_flight_mean": rollouts_mean,
            "rollout_client/rollouts_in_flight_max": rollouts_max,
            "rollout_client/rollouts_in_flight_configured": float(self.configured),
            "rollout_client/concurrency_achieved_fraction": rollouts_mean / self.configured,
            "rollout_client/groups_in_flight_mean": groups_mean,
            "rollout_client/groups_in_flight_max": groups_max,
        })
        return metrics

    def state_dict(self) -> dict:
        return {"configured": self.configured, "blocked": self.blocked.state_dict(),
                "permits": self.permits.state_dict(), "rollouts": self.rollouts.state_dict(),
                "groups": self.groups.state_dict(), "last_blocked": dict(self.last_blocked)}

    @classmethod
    def from_state(cls, s: dict) -> DispatchGauges:
        gauges = cls(configured=s["configured"])
        gauges.blocked = BlockedClock.from_state(s["blocked"])
        gauges.permits = TimeWeighted.from_state(s["permits"])
        gauges.rollouts = TimeWeighted.from_state(s["rollouts"])
        gauges.groups = TimeWeighted.from_state(s["groups"])
        gauges.last_blocked = dict(s["last_blocked"])
        return gauges


class StaleWatch:
    """Warns once per start when more than 2% of the groups the last 10 steps consumed went stale."""

    def __init__(self) -> None:
        self.window: deque[tuple[int, int, dict[str, float]]] = deque(maxlen=STALE_WINDOW_STEPS)
        self.warned = False

    def note_step(self, consumed: int, stale: int, blocked: dict[str, float], k: int | None) -> str | None:
        self.window.append((consumed, stale, dict(blocked)))
        if self.warned or k is None or len(self.window) < STALE_WINDOW_STEPS:
            return None
        groups = sum(c for c, _, _ in self.window)
        stale_total = sum(s for _, s, _ in self.window)
        if groups == 0 or stale_total / groups <= STALE_SHARE:
            return None
        self.warned = True
        mean = {r: sum(b.get(r, 0.0) for _, _, b in self.window) / len(self.window) for r in BlockedClock.REASONS}
        top = max(mean, key=lambda r: mean[r])
        held = (f"what held the dispatcher back most was {top} ({mean[top]:.0%} of the time)"
                if mean[top] > 0 else "nothing held the dispatcher back")
        if mean["horizon"] < 0.05:
            fix = (f"the horizon had room, so train.max_staleness: {k + 1} changes only the stale filter and keeps "
                   "these groups")
        else:
            fix = (f"the horizon held rollouts back, so a larger train.max_staleness also lets them run further "
                   "ahead, which can make more of them stale, not fewer: compare before you change it, e.g. "
                   f"platoon simulate --like RUN --sweep train.max_staleness={k},{k + 1},{k + 2}")
        return (f"{stale_total / groups:.1%} of the groups the last {STALE_WINDOW_STEPS} steps consumed went stale "
                f"({stale_total} of {groups}); {held}; {fix}. A stale filter per datum, which would drop only a "
                f"group's stale datums, is planned; until then dropping long groups biases what trains toward short "
                f"rollouts.")

    def state_dict(self) -> dict:
        return {"window": [[c, s, b] for c, s, b in self.window], "warned": self.warned}

    @classmethod
    def from_state(cls, s: dict) -> StaleWatch:
        watch = cls()
        watch.window.extend((c, st, dict(b)) for c, st, b in s["window"])
        watch.warned = s["warned"]
        return watch


def short_step_warning(items: Sequence[SettledGroup], *, step: int, admitted: int, counted: int, batch_size: int,
                       version: int) -> tuple[str, str] | None:
    """Under an admission rule, a step that admitted fewer than ``batch_size`` groups: ``("empty", message)`` when
    it admitted none (it takes no optimizer update and the version stays), ``("short", message)`` otherwise; None
    for a full step. The message counts the step's rejected, stale and failed groups and says what to change: the
    environment when more failed than were rejected, else the cap or the sampler."""
    if admitted >= batch_size:
        return None
    rejected = sum(g.kind == "marker" and g.output is not None for g in items)
    failed = sum((g.kind == "marker" and g.output is None) or g.kind == "failed" for g in items)
    stale = sum(g.kind == "stale" for g in items)
    counts = f"{rejected} rejected, {stale} stale, {failed} failed"
    if failed > rejected:
        advice = "more of them failed than were rejected: look at the environment, whose workflow raised"
    else:
        advice = ("raise train.refill.max_groups_per_step, or draw the tasks likely to mix passes and failures with "
                  "train.task_sampler: pass_rate")
    if admitted == 0:
        return "empty", (f"step {step} admitted none of the {counted} groups it counted ({counts}): it takes no "
                         f"optimizer update, and the policy version stays {version}; {advice}")
    return "short", (f"step {step} admitted {admitted} of {batch_size} groups before it counted its cap of {counted} "
                     f"({counts}): it trains on fewer groups than train.batch_size; {advice}")


def batch_kind_metrics(items: Sequence[SettledGroup], threshold: Callable[[str | None], float]) -> dict[str, float]:
    """``train/batch/<kind>_groups`` over the groups a step consumed, run-wide and per entry, plus stale groups."""
    prefixes = {"train/batch/"}
    prefixes.update(f"train/batch/environment/{g.entry.replace('/', '--')}/" for g in items if g.entry)
    metrics = {f"{p}{k}_groups": 0.0 for p in sorted(prefixes) for k in (*KINDS, "stale")}
    for g in items:
        if g.kind == "marker":
            continue
        keys = ["train/batch/"] + ([f"train/batch/environment/{g.entry.replace('/', '--')}/"] if g.entry else [])
        kind = "stale" if g.kind == "stale" else g.record.kind(threshold(g.entry))
        if kind is None:
            continue
        for p in keys:
            metrics[f"{p}{kind}_groups"] += 1.0
    return metrics


def censoring_metrics(items: Sequence[SettledGroup], threshold: Callable[[str | None], float]) -> dict[str, float]:
    """What a straggler policy censors, over the groups a step dequeued that have members (stale and rejected
    included), run-wide (``train/batch/censoring/``) and per entry: ``censored_share`` (members cut as stragglers
    over all members), ``mixed_groups``, and over mixed groups ``slowest_pass_rate`` (did each group's slowest
    valid member pass?) against ``others_pass_rate`` (the other valid members' passes over their count). A gap
    between the two says that cutting stragglers biases what trains."""
    acc: dict[str, list[float]] = {}
    for g in items:
        members = g.record.members
        if not members:
            continue
        t = threshold(g.entry)
        prefixes = ["train/batch/censoring/"]
        if g.entry:
            prefixes.append(f"train/batch/environment/{g.entry.replace('/', '--')}/censoring/")
        cut = sum(m.disposition == "straggler_killed" for m in members)
        valid = [m for m in members if m.valid and m.scored is not None]
        passed = [m.passes(t) for m in valid]
        timed = [m for m in valid if m.seconds is not None]
        mixed = 0 < sum(passed) < len(passed) and timed
        for p in prefixes:
            a = acc.setdefault(p, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # cut, members, mixed, slowest, others p, others n
            a[0] += cut
            a[1] += len(members)
            if mixed:
                slowest = max(timed, key=lambda m: m.seconds)
                others = [m for m in valid if m is not slowest]
                a[2] += 1
                a[3] += slowest.passes(t)
                a[4] += sum(m.passes(t) for m in others)
                a[5] += len(others)
    out: dict[str, float] = {}
    for p, (cut, n, mixed, slowest, others_p, others_n) in acc.items():
        out[f"{p}censored_share"] = cut / n if n else 0.0
        out[f"{p}mixed_groups"] = mixed
        if mixed:
            out[f"{p}slowest_pass_rate"] = slowest / mixed
            out[f"{p}others_pass_rate"] = others_p / others_n if others_n else 0.0
    return out


def step_metrics(d: Dispatcher, now: float) -> dict[str, float]:
    """The metrics of the step ``d`` just committed: its gauges' window, the batch kinds, the samplers' and the
    tasks', admission's; the skipped slots and rows are counted since the last step (read resets them)."""
    metrics = d.gauges.read(now=now, groups_in_flight=len(d.running))
    metrics.update(batch_kind_metrics(d.step_items, d.threshold))
    if d.config.straggler_policy:
        metrics.update(censoring_metrics(d.step_items, d.threshold))
    metrics["train/sampler/skipped_slots"] = float(d.skipped_slots)
    d.skipped_slots = 0
    metrics.update(d.mixture.row_metrics(d.skipped_rows))
    d.skipped_rows = {}
    for entry, queue in d.mixture.tokens.items():
        waiting = len(queue) + (d.pending is not None and d.pending.token is not None
                                and d.pending.token.entry == entry)
        metrics[f"train/sampler/environment/{entry.replace('/', '--')}/tokens"] = float(waiting)
    view = d.recorder.view(d.version)
    metrics.update(d.samplers.metrics(view))
    if not d.recorder.stopped:
        metrics.update(task_metrics(d.recorder.store, d.version))
    if d.admission is not None:
        draws = metrics.get("train/sampler/draws")
        metrics.update(d.admission.metrics(draws=draws))
        metrics["train/admission/counted"] = float(d.horizon.step_counted)
        metrics["train/admission/short"] = float(d.horizon.step_admitted < d.config.batch_size)
    metrics["train/dispatch/groups_in_flight"] = float(len(d.running))
    metrics["train/policy_version"] = float(d.version)
    return metrics
