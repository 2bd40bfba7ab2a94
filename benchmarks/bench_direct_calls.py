"""What does a rollout worker's model call cost the trainer when the worker posts it to the vLLM server itself
(``platoon.live.inference.direct``), against the trainer relaying it (the worker sends the prompt to the trainer,
which posts it and sends the completion back)?

The trainer is one process: its CPU is the dispatch policy's, the model service's and (in a live run) the
optimizer's, so every millisecond a model call costs it is taken from them. Rollouts run in worker processes
(``rollout_isolation: process``; a Ray actor's calls take the same path), ``--rollouts`` at once, each of
``--turns`` calls whose prompt starts at ``--prompt`` token ids and grows by each call's ``--new`` ids, as an
agent's context does. The servers are the tests' fake vLLM (``tests/live/fake_vllm.py``: it answers a completion
from the ids it is sent, after ``--delay`` seconds) on real ports, in a process of their own, so that the trainer's
CPU time (``time.process_time``: all its threads) is the trainer's alone. Each mode runs ``--repeats`` times after
a warm-up; printed: the trainer's CPU milliseconds per model call (median), the wall seconds, and the relay's to the
direct's ratio of those medians. Run: ``python benchmarks/bench_direct_calls.py``. Figures: docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = [str(ROOT / "tests" / "live"), str(ROOT / "tests" / "policy"), str(ROOT / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=8192, help="token ids of the first prompt")
    parser.add_argument("--new", type=int, default=256, help="token ids each call samples")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds a fake server takes per completion")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    sys.path[:0] = HARNESS
    os.environ["PYTHONPATH"] = os.pathsep.join([*HARNESS, *sys.path])  # workers import the harness by name
    ctx = multiprocessing.get_context("spawn")
    urls_in, urls_out = ctx.Pipe()
    servers = ctx.Process(target=_serve, args=(urls_out, 2, args.delay), daemon=True)
    servers.start()
    urls = urls_in.recv()
    calls = args.rollouts * args.turns
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.rollouts} rollouts x {args.turns} "
          f"calls, prompts from {args.prompt} ids, {args.new} new ids a call, 2 fake servers; {args.repeats} repeats")
    print(f"{'mode':>8}{'trainer CPU ms/call (median)':>30}{'runs':>26}{'wall s (median)':>17}")
    medians = {}
    try:
        for mode in ("relay", "direct"):
            cpu, wall = [], []
            for r in range(args.repeats + 1):
                spent, took = asyncio.run(_measure(urls, mode, args))
                if r:  # the first is a warm-up
                    cpu.append(spent / calls * 1000)
                    wall.append(took)
            medians[mode] = statistics.median(cpu)
            print(f"{mode:>8}{medians[mode]:>30.2f}{', '.join(f'{c:.2f}' for c in cpu):>26}"
                  f"{statistics.median(wall):>17.2f}")
    finally:
        servers.terminate()
    print(f"relay / direct, trainer CPU per call: {medians['relay'] / medians['direct']:.2f}x")


def _serve(conn, n: int, delay_s: float) -> None:
    sys.path[:0] = HARNESS
    from fake_vllm_http import ServedCluster

    with ServedCluster(n, delay_s=delay_s) as cluster:
        conn.send(cluster.urls)
        while True:
            time.sleep(3600)


async def _measure(urls: list[str], mode: str, args: argparse.Namespace) -> tuple[float, float]:
    from workers_harness import SamplingEpisode

    from platoon.live.inference.vllm import VLLMService
    from platoon.live.inference.weights import WeightStore
    from platoon.live.rollouts.workflow import _FirstCall
    from platoon.live.workers import WorkerPool

    class Relayed(VLLMService):
        direct_target = None  # the workers send their calls to the trainer, which posts them

    with tempfile.TemporaryDirectory() as scratch:
        kind = Relayed if mode == "relay" else VLLMService
        service = kind(urls, served_name="the-model", weights=WeightStore(Path(scratch) / "w", Path(scratch)))
        pool = WorkerPool(method="exec", scratch=Path(scratch) / "scratch")
        episodes = [SamplingEpisode(args.turns, first=1 + k, prompt_len=args.prompt, new_tokens=args.new)
                    for k in range(args.rollouts)]
        cpu, began = time.process_time(), time.perf_counter()
        try:
            await asyncio.gather(*(pool.run_job(e, {}, _FirstCall(service, on_first_call=lambda: None),
                                                warn=print, first_call=lambda: None) for e in episodes))
            return time.process_time() - cpu, time.perf_counter() - began
        finally:
            await pool.aclose()
            await service.aclose()


if __name__ == "__main__":
    main()
