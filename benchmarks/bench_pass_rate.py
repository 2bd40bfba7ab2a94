"""How long does one pass_rate decision take at pool sizes 10,000, 100,000 and 1,000,000?

Targets: well under 1 ms at 10k, at most 5 ms at 1M. A decision is what the dispatcher pays for
``SamplerSet.adaptive_decision`` (eligibility per label class, the sampler's ``next``, accepting the answer), over a
pool of four entries with two labels each, settled groups for up to 50,000 tasks (a decision's cost does not depend
on how many: the evidence lives in dense arrays), 256 draws outstanding, and a label at its limit every other
decision. Printed: the median and 90th percentile of the whole decision, and of ``next``
alone, after a warm-up.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from platoon.components import sampler_set
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.stats import GroupRecord, MemberResult
from platoon.runs.timing import measured_call

SIZES = (10_000, 100_000, 1_000_000)
DECISIONS = 201
WARMUP = 20
OUTSTANDING = 256
SEEN = 50_000


def build(n: int) -> tuple[TaskPool, StatsRecorder]:
    per = n // 4
    pool = TaskPool.from_entries(
        [
            EntrySpec(
                f"env{e}", [f"e{e}-t{i}" for i in range(per)], 8, 1.0, e, label=["even", "odd"] * (per // 2)
            )
            for e in range(4)
        ]
    )
    rec = StatsRecorder.for_pool(pool)
    store = rec.peek_store()
    rng = np.random.default_rng(0)
    rates = rng.beta(0.5, 0.5, size=len(pool))
    seen = rng.choice(len(pool), size=min(len(pool) // 2, SEEN), replace=False)
    # Settle one group per seen task straight into the store (bulk setup: no events, no held records).
    for seq, i in enumerate(np.sort(seen).tolist()):
        row = pool.rows[i]
        passes = int(rng.binomial(8, rates[i]))
        members = tuple(
            MemberResult(scored=float(k < passes), valid=True, versions={"main": (0, 0)}) for k in range(8)
        )
        store.settle(
            GroupRecord(
                1,
                seq,
                row.task_id,
                entry=row.entry,
                members=members,
                verdict="trained" if 0 < passes < 8 else "uniform",
                drawn_at={"main": 0},
            )
        )
    for k, i in enumerate(rng.choice(len(pool), size=OUTSTANDING, replace=False).tolist()):
        store.draw(2, k, pool.rows[i].task_id, k)
    return pool, rec


def bench(n: int) -> tuple[float, float, float, float]:
    t0 = time.perf_counter()
    pool, rec = build(n)
    samplers = sampler_set(
        pool,
        run_sampler="pass_rate",
        run_options={},
        entry_samplers={},
        batch_size=64,
        seed=0,
        measure=measured_call,
    )
    setup_s = time.perf_counter() - t0
    whole, inner = [], []
    sampler = samplers.sampler()
    original = sampler.next

    def timed_next(ctx):
        t = time.perf_counter()
        try:
            return original(ctx)
        finally:
            inner.append(time.perf_counter() - t)

    sampler.next = timed_next
    for d in range(WARMUP + DECISIONS):
        blocked = "odd" if d % 2 else None

        def eligible(task_id: str, blocked=blocked) -> bool:
            return pool.rows[pool.first_index(task_id)].label != blocked

        view = rec.view(1)
        t = time.perf_counter()
        samplers.adaptive_decision(None, eligible=eligible, view=view, step=0, version=1)
        whole.append(time.perf_counter() - t)
    whole, inner = whole[WARMUP:], inner[WARMUP:]
    ms = 1000.0
    print(f"  (setup of {n:,} tasks: {setup_s:.1f} s)")
    return (
        statistics.median(whole) * ms,
        float(np.percentile(whole, 90)) * ms,
        statistics.median(inner) * ms,
        float(np.percentile(inner, 90)) * ms,
    )


def main() -> None:
    print("pass_rate decision time (ms), explore 0.2, candidates 4096, cap 3 per window")
    rows = []
    for n in SIZES:
        rows.append((n, *bench(n)))
    print(f"{'pool':>10}  {'decision p50':>12}  {'decision p90':>12}  {'next p50':>9}  {'next p90':>9}")
    for n, med, p90, inner_med, inner_p90 in rows:
        print(f"{n:>10,}  {med:>12.3f}  {p90:>12.3f}  {inner_med:>9.3f}  {inner_p90:>9.3f}")


if __name__ == "__main__":
    main()
