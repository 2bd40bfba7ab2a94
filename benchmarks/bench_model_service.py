"""Model-service throughput: dynamic batching vs one request at a time, at 64 concurrent rollouts.

The question: how much does batching the requests of concurrent rollouts into one forward pass buy on the CPU,
for the built-in tiny policy on platoon-number-search? 64 rollouts run at once against a ``BatchingModelService``, first
with ``max_batch=64`` (whatever is queued when the model is free), then with ``max_batch=1`` (one request per
forward pass); when a rollout ends another starts, until ``--rollouts`` have ended. It prints generated tokens and
rollouts per second, by wall clock and by CPU time of the process (``time.process_time``: the machine's cores are
shared, so CPU seconds are the steadier measure), and the ratio.

    .venv/bin/python benchmarks/bench_model_service.py [--rollouts 1024] [--concurrency 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from platoon.live.agent.harness import default_renderer
from platoon.live.envs import NumberSearch
from platoon.live.envs.play import Limits, play_episode
from platoon.live.inference.model import TinyConfig, TinyPolicy
from platoon.live.inference.service import BatchingModelService

DEMO_LIMITS = Limits(max_new_tokens=2, context_window=256)
"""The demo's budgets (``platoon train`` with no config): two tokens a turn, the tiny model's 256 positions."""


async def measure(policy: TinyPolicy, env: NumberSearch, *, max_batch: int, rollouts: int,
                  concurrency: int) -> dict[str, float]:
    service = BatchingModelService(policy, max_batch=max_batch)
    ids = env.task_ids("train")
    started = iter(range(rollouts))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        for i in started:
            t = await play_episode(service, env, env.task(ids[i % len(ids)]), temperature=1.0, seed=i,
                                   limits=DEMO_LIMITS)
            tokens += t.output_tokens

    # Warm the worker thread's kernels up before timing.
    await service.sample([1, 2], max_new_tokens=1, temperature=1.0, seed=0)
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = service.stats()
    await service.aclose()
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu, "mean_batch": stats["mean_batch"],
            "tokens_per_s": tokens / wall, "tokens_per_cpu_s": tokens / cpu, "rollouts_per_cpu_s": rollouts / cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1024, help="rollouts with batching (a quarter without)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: no OpenMP team spinning beside the event loop)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    env = NumberSearch()
    tokenizer = default_renderer([env]).tokenizer
    policy = TinyPolicy(TinyConfig(vocab_size=tokenizer.vocab_size, max_len=256), device="cpu", seed=0,
                        logit_prior=tokenizer.logit_prior())
    batched = asyncio.run(measure(policy, env, max_batch=args.concurrency, rollouts=args.rollouts,
                                  concurrency=args.concurrency))
    single = asyncio.run(measure(policy, env, max_batch=1, rollouts=max(args.concurrency, args.rollouts // 4),
                                 concurrency=args.concurrency))
    print(f"model service, tiny policy ({policy.parameter_count():,} parameters) on platoon-number-search, "
          f"{args.concurrency} concurrent rollouts, {args.threads} torch thread(s), device {policy.device}")
    print(f"{'':>22} {'tokens/s':>10} {'tokens/cpu-s':>13} {'rollouts/cpu-s':>15} {'mean batch':>11}")
    for name, r in (("batched (max 64)", batched), ("one at a time", single)):
        print(f"{name:>22} {r['tokens_per_s']:>10.0f} {r['tokens_per_cpu_s']:>13.0f} "
              f"{r['rollouts_per_cpu_s']:>15.0f} {r['mean_batch']:>11.1f}")
    print(f"batching / one at a time: {batched['tokens_per_s'] / single['tokens_per_s']:.1f}x tokens/s (wall), "
          f"{batched['tokens_per_cpu_s'] / single['tokens_per_cpu_s']:.1f}x tokens per CPU-second")


if __name__ == "__main__":
    main()
