"""Does pass_rate give more informative groups than uniform, and how close does it get to the ceiling?

Three synthetic populations of 1,000 tasks with known pass rates (group size 8): bimodal (most tasks nearly always
fail or nearly always pass, a tenth in between), Beta(0.3, 0.3), and mostly hard (four fifths nearly never pass).
Each run draws 12,000 groups with 64 outstanding: a group settles (its members pass by Bernoulli(p)) in a random
order among those open, and a new one is drawn in its place; the policy version moves on every 64 settles. A group
is informative when it mixes passes and failures (``0 < passes < 8``).

Printed per population: the informative share of uniform and of pass_rate (over all groups, and over the second
half, once pass_rate has evidence), beside uniform's expectation ``mean(1 - p^8 - (1-p)^8)`` and the ceiling: what
an oracle that knows every p gets under pass_rate's cap of 3 draws per task per pool-sized window (the top third of
the tasks, each drawn three times).
"""

from __future__ import annotations

import numpy as np

from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.runtime import Bound, SamplerSet
from platoon.policy.stats import GroupRecord, MemberResult

N_TASKS = 1_000
GROUP = 8
GROUPS = 12_000
OPEN = 64
SEED = 0


def populations(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = N_TASKS
    bimodal = np.concatenate(
        [
            rng.beta(0.5, 12, int(n * 0.45)),
            rng.beta(12, 0.5, int(n * 0.45)),
            rng.uniform(0.2, 0.8, n - 2 * int(n * 0.45)),
        ]
    )
    hard = np.concatenate([rng.beta(0.2, 25, int(n * 0.8)), rng.beta(2, 3, n - int(n * 0.8))])
    return {
        "bimodal": rng.permutation(bimodal),
        "beta(0.3,0.3)": rng.beta(0.3, 0.3, n),
        "mostly hard": rng.permutation(hard),
    }


def informative_chance(p: np.ndarray) -> np.ndarray:
    return 1 - p**GROUP - (1 - p) ** GROUP


def ceiling(p: np.ndarray, cap: int = 3) -> float:
    q = np.sort(informative_chance(p))[::-1]
    return float(q[: int(np.ceil(len(q) / cap))].mean())


def run(sampler: str, rates: np.ndarray) -> tuple[float, float]:
    ids = [f"t{i}" for i in range(len(rates))]
    pool = TaskPool.from_entries([EntrySpec("synthetic", ids, GROUP, 1.0, 0)])
    rec = StatsRecorder.for_pool(pool)
    samplers = SamplerSet(
        pool, run_sampler=sampler, run_options={}, entry_samplers={}, batch_size=OPEN, seed=SEED
    )
    rng = np.random.default_rng(SEED + 1)
    open_: list[tuple[tuple[int, int], Bound, int]] = []
    informative: list[bool] = []
    seq = 0
    version = 0

    def draw() -> None:
        nonlocal seq
        if samplers.run_adaptive:
            bound = samplers.adaptive_decision(
                None, eligible=lambda t: True, view=rec.view(version), step=version, version=version
            )
        else:
            bound = samplers.static_decision(seq)
        key = (1, seq)
        rec.draw(
            *key,
            bound.row.task_id,
            seq,
            version=version,
            sampler=bound.sampler,
            reason=bound.reason,
            score=bound.score,
        )
        open_.append((key, bound, version))
        seq += 1

    while seq < OPEN:
        draw()
    while len(informative) < GROUPS:
        key, bound, drawn_at = open_.pop(int(rng.integers(len(open_))))
        passes = rng.random(GROUP) < rates[bound.row.index]
        members = tuple(
            MemberResult(scored=float(x), valid=True, versions={"main": (drawn_at, drawn_at)}) for x in passes
        )
        mixed = 0 < passes.sum() < GROUP
        rec.settle(
            GroupRecord(
                *key,
                bound.row.task_id,
                entry="synthetic",
                members=members,
                verdict="trained" if mixed else "uniform",
                drawn_at={"main": drawn_at},
            )
        )
        rec.fate(*key, "consumed")
        informative.append(bool(mixed))
        if len(informative) % OPEN == 0:
            version += 1
            rec.flush()
        draw()
    share = np.array(informative)
    return float(share.mean()), float(share[len(share) // 2 :].mean())


def main() -> None:
    print(
        f"informative-group share, {N_TASKS} tasks, group size {GROUP}, {GROUPS} groups, {OPEN} outstanding"
    )
    print(
        f"{'population':>14}  {'uniform':>8}  {'expected':>8}  {'pass_rate':>9}  {'2nd half':>8}  {'ceiling':>7}"
    )
    for name, rates in populations(np.random.default_rng(SEED)).items():
        uniform, _ = run("uniform", rates)
        adaptive, late = run("pass_rate", rates)
        expected = float(informative_chance(rates).mean())
        print(
            f"{name:>14}  {uniform:>8.3f}  {expected:>8.3f}  {adaptive:>9.3f}  {late:>8.3f}  {ceiling(rates):>7.3f}"
        )


if __name__ == "__main__":
    main()
