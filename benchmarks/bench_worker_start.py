"""How long does a rollout worker take from its start to its first model call, and what does it hold of its own,
when its fork server preloaded what its environment imports (``worker_start_method: forkserver``) against a fresh
interpreter that imports it all itself (``exec``)?

The environment (``heavy_env.py``) imports pandas, matplotlib and, when installed, transformers as it opens (about
1,800 modules beyond the worker's stack, which itself imports torch). For 32, 128 and 256 workers started at once
(each rollout in a worker of its own, ``platoon.live.workers.WorkerPool``), every worker measures, just before its
first model call, the seconds since its process was created (``/proc/self/stat``, 10 ms resolution) and its unique
set size (USS, ``/proc/self/smaps_rollup``), and counts the files it opened (Python's ``open`` audit events from
its entry point); the model service holds every first call until all N have made theirs, so that all N are alive at
once. Printed: medians (and the 90th percentile of the start-up), the seconds from the trainer's request to the first
model call (the fork server forks one worker at a time, so the last of N waits for N - 1 forks), and the fork
server's one-time cost (its start: screening, its own interpreter's imports; its resident and proportional memory).

``exec`` workers each import everything at once on this machine's cores and hold ~400 MB each, so ``--exec-max``
(default 32) caps the counts it runs; the rest are printed as skipped. Run: ``python benchmarks/bench_worker_start.py``
(``--counts 32 128 256 --exec-max 32``). Figures: docs/rollout-workers.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[32, 128, 256])
    parser.add_argument("--exec-max", type=int, default=32, help="the largest count exec runs (memory and cores)")
    args = parser.parse_args()

    import asyncio
    import tempfile

    sys.path.insert(0, HERE)
    from heavy_env import HeavyEnv, ProbeWorkflow

    from platoon.live.workers import EnvSpec, WorkerPool, preload_plan

    specs = {"heavy": EnvSpec("heavy_env:HeavyEnv", {}, None, ("train",))}
    env = HeavyEnv()
    plan = preload_plan(specs, {"heavy": env})
    print(f"transformers {'imported' if 'transformers' in sys.modules else 'not installed: not imported'} by the "
          f"environment; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    scratch = tempfile.mkdtemp(prefix="bench-worker-start-")
    began = time.perf_counter()
    server = WorkerPool(method="forkserver", plan=plan, env_specs=specs, scratch=_path(scratch))
    asyncio.run(server.ready())
    pid = server._opening.result()
    print(f"fork server: started, screened and imported in {time.perf_counter() - began:.1f} s; "
          f"{_memory(pid)}; {[m for level, m in server.messages if level == 'info'][0]}")
    print(f"{'method':<11}{'workers':>8}{'start->agent s':>15}{'p90 s':>8}{'CPU s':>8}{'request->agent s':>18}"
          f"{'USS MB':>8}{'files opened':>14}{'wall s':>8}")
    for method in ("forkserver", "exec"):
        for n in args.counts:
            if method == "exec" and n > args.exec_max:
                print(f"{method:<11}{n:>8}   skipped (--exec-max {args.exec_max}: ~400 MB and all the imports each)")
                continue
            pool = WorkerPool(method=method, plan=plan, env_specs=specs, scratch=_path(scratch), audit_opens=True)
            row = asyncio.run(_wave(pool, ProbeWorkflow, env, n))
            print(f"{method:<11}{n:>8}{row['start']:>15.3f}{row['start_p90']:>8.3f}{row['cpu']:>8.3f}"
                  f"{row['request']:>18.3f}"
                  f"{row['uss_mb']:>8.1f}{row['opens']:>14.0f}{row['wall']:>8.1f}", flush=True)


async def _wave(pool, workflow_cls, env, n: int) -> dict[str, float]:
    """Start ``n`` workers at once; the medians of what they measured."""
    import asyncio
    import statistics

    from platoon.live.inference.service import Sample
    from platoon.live.rollouts.workflow import GroupRow

    class Service:
        version = 0

        def __init__(self) -> None:
            self.measured: list[tuple[int, float, int, float]] = []
            self.all_in = asyncio.Event()

        async def measure(self, pid: int, seconds: float, uss: int, cpu_s: float) -> None:
            self.measured.append((pid, seconds, uss, cpu_s))
            if len(self.measured) >= n:
                self.all_in.set()

        async def sample(self, prompt, *, max_new_tokens, temperature, seed=None, stop=None):
            await self.all_in.wait()  # every worker alive at once until all have reached their agent
            return Sample((1,), (-1.0,), 0)

    service = Service()
    workflow = workflow_cls({"heavy": env}, service)
    await pool.ready()
    began = time.perf_counter()
    try:
        await asyncio.gather(*(pool.run(workflow, GroupRow((1, i), "t0", "heavy", 1, member=0)) for i in range(n)))
    finally:
        await pool.aclose()
    wall = time.perf_counter() - began
    starts = sorted(m[1] for m in service.measured)
    return {"start": statistics.median(starts), "start_p90": starts[int(0.9 * (len(starts) - 1))],
            "cpu": statistics.median(m[3] for m in service.measured),
            "request": statistics.median(pool.startup_s), "uss_mb": statistics.median(m[2] for m in
                                                                                       service.measured) / 2**20,
            "opens": statistics.median(pool.opens), "wall": wall}


def _memory(pid: int) -> str:
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
                fields[parts[0][:-1]] = int(parts[1]) / 1024
    return (f"it holds {fields['Rss']:.0f} MB resident ({fields['Pss']:.0f} MB proportional, "
            f"{fields['Private_Clean'] + fields['Private_Dirty']:.0f} MB its own)")


def _path(p: str):
    from pathlib import Path

    return Path(p)


if __name__ == "__main__":
    main()
