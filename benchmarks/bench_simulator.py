"""How fast is platoon's simulator beside SimPy itself, and does its memory stay flat in the number of steps?

1. One workload, two models, in one process: a bare SimPy model (a permit ``Resource``, a process and a timeout per
   rollout, groups of G exponential rollouts queued FIFO) and ``platoon simulate``'s runtime on the same workload
   (``permit_release: rollout``, no staleness bound, a trainer that takes no time, so the permits always bind).
   Prints rollouts per wall second of each and their ratio, as the median of interleaved repeats (the machine is
   shared: only ratios measured side by side mean much). Target: platoon >= 0.5 x bare.
2. ``platoon simulate --preset long-agentic --steps 200``, the command as a user runs it, pinned to one core:
   wall seconds, median of 3. Target: under 60 s.
3. Peak resident memory of a fresh process simulating long-agentic for 100 and for 400 steps (no logs held in
   memory: the ratio should be close to 1).

Run: ``.venv/bin/python benchmarks/bench_simulator.py`` (``--quick`` for a short pass).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from platoon.config.models import RunConfig
from platoon.sim.baseline import bare_rate
from platoon.sim.run import SimRun

QUICK = "--quick" in sys.argv
PERMITS, GROUP, BATCH, MEAN_S = 256, 8, 32, 60.0
ROLLOUTS = 40_000 if QUICK else 160_000
REPEATS = 3
ROOT = Path(__file__).resolve().parents[1]


def bare_simpy(rollouts: int, seed: int) -> float:
    """Rollouts per wall second of the bare model (``platoon.sim.baseline``: simpy is imported only there)."""
    return bare_rate(rollouts, permits=PERMITS, group=GROUP, mean_s=MEAN_S, seed=seed)


def platoon_sim(rollouts: int, seed: int) -> float:
    """Rollouts per wall second of platoon's runtime on the same workload (the run directory written as usual)."""
    steps = rollouts // (BATCH * GROUP)
    # checkpoint and eval at their defaults: the launch and final checkpoints only, no evaluation
    cfg = RunConfig.model_validate(
        {
            "train": {
                "model_name": "tiny",
                "renderer_name": "role_colon",
                "max_training_steps": steps,
                "batch_size": BATCH,
                "max_concurrent_rollouts": PERMITS,
                "max_staleness": None,
                "seed": seed,
            },
            "environments": [{"name": "env", "workflow_config": {"group_size": GROUP}}],
            "sim": {
                "rollout": {"duration": {"dist": "exponential", "mean_s": MEAN_S}},
                "trainer": {"step_s": 0.0, "per_datum_s": 0.0, "publish_s": 0.0},
                "learning": {"enabled": False},
                "population": {"tasks": 512},
            },
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = SimRun.create(cfg, Path(tmp) / "run", log=lambda level, message: None)
        run.run()
        return rollouts / (time.perf_counter() - t0)


def without_task_metrics(rollouts: int, seed: int) -> float:
    """The same, with the dispatcher's per-step ``train/tasks/*`` metrics left out: a diagnostic that shows how much
    of the gap is that one policy-layer computation (``platoon.policy.task_table.task_metrics``, which builds every
    task's statistics at every step)."""
    from platoon.policy import dispatcher

    saved = dispatcher.task_metrics
    dispatcher.task_metrics = lambda store, version: {}
    try:
        return platoon_sim(rollouts, seed)
    finally:
        dispatcher.task_metrics = saved


def one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def cli_wall(steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "platoon",
                "simulate",
                "--preset",
                "long-agentic",
                "--steps",
                str(steps),
                "--out",
                str(Path(tmp) / "run"),
            ],
            check=True,
            cwd=tmp,
            preexec_fn=one_core,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - t0


PEAK = """
import resource, sys, tempfile, tracemalloc
from pathlib import Path
from platoon.sim.run import SimRun
from platoon.sim.setup import load_sim_config
cfg = load_sim_config(None, preset="long-agentic", overrides=[f"train.max_training_steps={sys.argv[1]}"])
tracemalloc.start()
with tempfile.TemporaryDirectory() as tmp:
    SimRun.create(cfg, Path(tmp) / "run", log=lambda level, message: None).run()
print(tracemalloc.get_traced_memory()[1], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak_bytes(steps: int) -> tuple[int, int]:
    """(peak bytes the run allocated, traced by tracemalloc; peak resident bytes of its process)."""
    out = subprocess.run([sys.executable, "-c", PEAK, str(steps)], check=True, capture_output=True, text=True)
    traced, rss = (int(x) for x in out.stdout.split())
    return traced, rss


def main() -> None:
    print(
        f"workload: {PERMITS} permits, groups of {GROUP} exponential rollouts (mean {MEAN_S:g} s), "
        f"{ROLLOUTS} rollouts, {REPEATS} interleaved repeats"
    )
    bare, ours, lean, ratios, lean_ratios = [], [], [], [], []
    for r in range(REPEATS):
        b = bare_simpy(ROLLOUTS, r)
        p = platoon_sim(ROLLOUTS, r)
        q = without_task_metrics(ROLLOUTS, r)
        bare.append(b)
        ours.append(p)
        lean.append(q)
        ratios.append(p / b)
        lean_ratios.append(q / b)
        print(f"  repeat {r}: bare SimPy {b:,.0f} rollouts/s, platoon {p:,.0f} rollouts/s (ratio {p / b:.2f}), "
              f"platoon without train/tasks metrics {q:,.0f} rollouts/s (ratio {q / b:.2f})")
    ratio = statistics.median(ratios)
    print(f"median: bare SimPy {statistics.median(bare):,.0f} rollouts/s, platoon {statistics.median(ours):,.0f} "
          f"rollouts/s, ratio {ratio:.2f} (target >= 0.5: {'ok' if ratio >= 0.5 else 'MISSED'}); without the "
          f"per-step train/tasks metrics {statistics.median(lean):,.0f} rollouts/s, ratio "
          f"{statistics.median(lean_ratios):.2f}")
    print(f"best of each (the least disturbed repeat): ratio {max(ours) / max(bare):.2f}, without the train/tasks "
          f"metrics {max(lean) / max(bare):.2f}")

    steps = 50 if QUICK else 200
    walls = [cli_wall(steps) for _ in range(1 if QUICK else 3)]
    wall = statistics.median(walls)
    print(
        f"platoon simulate --preset long-agentic --steps {steps} on one core: {wall:.1f} s "
        f"(median of {len(walls)}: {', '.join(f'{w:.1f}' for w in walls)}; target < 60 s: "
        f"{'ok' if wall < 60 else 'MISSED'})"
    )

    small, large = (25, 100) if QUICK else (100, 400)
    (t1, r1), (t2, r2) = peak_bytes(small), peak_bytes(large)
    mib = 1 << 20
    print(f"peak memory of the run (tracemalloc), long-agentic: {small} steps {t1 / mib:.1f} MiB, {large} steps "
          f"{t2 / mib:.1f} MiB, ratio {t2 / t1:.2f}; peak resident memory of the process {r1 / mib:.0f} and "
          f"{r2 / mib:.0f} MiB")


if __name__ == "__main__":
    main()
