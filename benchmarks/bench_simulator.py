"""How fast is platoon's simulator beside SimPy itself, and does its memory stay flat in the number of steps?

1. ``platoon simulate --preset P`` as users run it (``SimRun.create`` then ``run``: its logs, trace and checkpoints
   at the preset's default cadence) against an honest bare SimPy model of the same rollouts
   (``platoon.sim.baseline``: a permit ``Resource`` of the preset's ``max_concurrent_rollouts``, groups of its
   group size, one exponential timeout per rollout, groups fed as permits free, not all queued at once), in one
   process, as rollouts per wall second after start-up (the run's creation, with its launch checkpoint, is not
   timed; the bare model simulates as many rollouts as the run granted permits). For ``math`` (1024 permits,
   groups of 16) and ``long-agentic`` (256 permits, groups of 8: the issue's workload; the presets' own values,
   checked before the runs): the medians of interleaved repeats and their ratio (the machine is shared: only ratios
   measured side by side mean much). Target: platoon >= 0.5 x bare on both. The same ratio per CPU second is
   printed beside it: on a loaded machine it is the steadier figure (it leaves out the waits for a core, and the
   run's fsyncs).
2. ``platoon simulate --preset long-agentic --steps 200``, the command as a user runs it, pinned to one core:
   wall seconds, median of 3. Target: under 60 s.
3. Peak resident memory of a fresh process simulating long-agentic for 100 and for 400 steps (no logs held in
   memory: the ratio should be close to 1).

Run: ``.venv/bin/python benchmarks/bench_simulator.py`` (``--quick`` for a short pass, ``--ratios`` for part 1
only, ``--repeats N`` for N interleaved repeats of part 1 instead of 3: on a loaded machine, more).
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
from platoon.sim.setup import load_sim_config

QUICK = "--quick" in sys.argv
RATIOS_ONLY = "--ratios" in sys.argv
PRESETS = {"math": 30 if QUICK else 100, "long-agentic": 50 if QUICK else 200}  # steps: the presets' own in full
REPEATS = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 3
ROOT = Path(__file__).resolve().parents[1]


def preset_config(preset: str, steps: int) -> RunConfig:
    return load_sim_config(None, preset=preset, overrides=[f"train.max_training_steps={steps}"])


def platoon_rate(cfg: RunConfig) -> tuple[float, float, int]:
    """(rollouts per wall second and per CPU second of ``cfg``'s simulated run after start-up, rollouts it
    started)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = SimRun.create(cfg, Path(tmp) / "run", log=lambda level, message: None)
        t0, c0 = time.perf_counter(), time.process_time()
        run.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return run.rt.rollouts / wall, run.rt.rollouts / cpu, run.rt.rollouts


def bare_simpy(cfg: RunConfig, rollouts: int, seed: int) -> tuple[float, float]:
    """Rollouts per wall second and per CPU second of the bare model of ``cfg``'s rollouts (exponential, of the
    preset's typical duration: the draw's cost, not its shape, is what counts here)."""
    d = cfg.sim.rollout.duration
    mean_s = getattr(d, "mean_s", None) or getattr(d, "median_s", None) or 60.0
    c0 = time.process_time()
    rate = bare_rate(rollouts, permits=cfg.train.max_concurrent_rollouts,
                     group=cfg.train.workflow_config.group_size, mean_s=mean_s, seed=seed)
    return rate, -(-rollouts // cfg.train.workflow_config.group_size) * cfg.train.workflow_config.group_size / (
        time.process_time() - c0)


PERMITS = {"math": 1024, "long-agentic": 256}  # the workloads the target is set for (issue 40)


def ratios() -> dict[str, float]:
    """Part 1: prints each repeat and the medians; returns each preset's median ratio."""
    configs = {p: preset_config(p, steps) for p, steps in PRESETS.items()}
    for preset, cfg in configs.items():
        if cfg.train.max_concurrent_rollouts != PERMITS[preset]:
            raise SystemExit(f"{preset} runs at {cfg.train.max_concurrent_rollouts} permits, not the "
                             f"{PERMITS[preset]} its target is set for")
    seen: dict[str, dict[str, list[float]]] = {p: {"bare": [], "platoon": [], "ratio": [], "cpu_ratio": []}
                                               for p in PRESETS}
    for r in range(REPEATS):
        for preset, cfg in configs.items():
            p, p_cpu, n = platoon_rate(cfg)
            b, b_cpu = bare_simpy(cfg, n, r)
            for k, v in (("bare", b), ("platoon", p), ("ratio", p / b), ("cpu_ratio", p_cpu / b_cpu)):
                seen[preset][k].append(v)
            print(f"  repeat {r} {preset}: {n} rollouts, bare SimPy {b:,.0f} rollouts/s, platoon {p:,.0f} "
                  f"rollouts/s (ratio {p / b:.3f}; per CPU second {p_cpu / b_cpu:.3f})", flush=True)
    out = {}
    for preset, s in seen.items():
        ratio = statistics.median(s["ratio"])
        out[preset] = ratio
        print(f"{preset} ({PRESETS[preset]} steps), median of {REPEATS}: bare SimPy "
              f"{statistics.median(s['bare']):,.0f} rollouts/s, platoon {statistics.median(s['platoon']):,.0f} "
              f"rollouts/s, ratio {ratio:.3f} (target >= 0.5: {'ok' if ratio >= 0.5 else 'MISSED'}); per CPU "
              f"second {statistics.median(s['cpu_ratio']):.3f} (a loaded machine's wall clock counts the waits "
              "for a core; the run's fsyncs are not CPU time)")
    return out


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
    ratios()
    if RATIOS_ONLY:
        return

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
