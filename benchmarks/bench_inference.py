"""Rollouts through a real vLLM server (vLLM's CPU build) against the built-in batching service, on the same model.

The question: what does sampling from a vLLM server cost or buy against the trainer's own forward pass, and what does
a weight sync cost? A tiny random Llama (hidden 128, 2 layers, head dimension 64, a byte-level BPE tokenizer) is
built in a temporary directory; one vLLM server is launched on it (``platoon.live.inference.launch``). Then
``--concurrency`` completions at a time, ``--requests`` in all (a prompt of 64 ids, ``--tokens`` new ones each, the
rollouts of a group of single-turn episodes), run first through ``BatchingModelService`` over the Hugging Face model
(``max_batch`` 64, in process: the best version of the alternative), then through ``VLLMService``; completions per
second and the ratio, by wall clock. Then ``--syncs`` weight syncs with requests in flight (``in_flight: abort``):
the median ``weight_sync_s`` and the share of the time paused.

    .venv/bin/python benchmarks/bench_inference.py [--python .vllm-env/bin/python] [--requests 256]

It needs the vLLM environment (``make vllm-env``); without it, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_model(path: Path) -> Path:
    """The tests' tiny random Llama that vLLM's CPU build serves, with its tokenizer (trained in place: nothing is
    downloaded)."""
    sys.path[:0] = [str(ROOT / "tests" / "live"), str(ROOT / "tests" / "policy"), str(ROOT / "tests")]
    from hf_kit import save_vllm_chat_model

    return save_vllm_chat_model(path, context=1024)


async def completions(service, *, requests: int, concurrency: int, tokens: int) -> float:
    """Completions per second, ``concurrency`` in flight at a time."""
    todo = iter(range(requests))

    async def one_at_a_time() -> None:
        for i in todo:
            await service.sample([(i * 7 + j) % 300 + 10 for j in range(64)], max_new_tokens=tokens, temperature=1.0,
                                 seed=i)

    began = time.perf_counter()
    await asyncio.gather(*(one_at_a_time() for _ in range(concurrency)))
    return requests / (time.perf_counter() - began)


async def syncs(service, state, *, n: int, concurrency: int, tokens: int) -> tuple[float, float]:
    """The median weight sync's seconds and the share of the time paused, with requests in flight."""
    stop = False

    async def load() -> None:
        i = 0
        while not stop:
            await service.sample([11, 12, 13], max_new_tokens=tokens, temperature=1.0, seed=i)
            i += 1

    loaders = [asyncio.ensure_future(load()) for _ in range(concurrency)]
    service.step_metrics()
    times, paused = [], []
    for version in range(1, n + 1):
        await asyncio.sleep(1.0)
        await service.publish(state, version)
        m = service.step_metrics()
        times.append(m["inference/weight_sync_s"])
        paused.append(m["inference/paused_share"])
    stop = True
    await asyncio.gather(*loaders)
    return statistics.median(times), statistics.median(paused)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run(args: argparse.Namespace, model_dir: Path, scratch: Path) -> None:
    from platoon.config.inference import LaunchConfig
    from platoon.live.inference.hf import HFPolicy
    from platoon.live.inference.launch import Launched
    from platoon.live.inference.service import BatchingModelService
    from platoon.live.inference.vllm import VLLMService
    from platoon.live.inference.weights import WeightStore

    policy = HFPolicy.from_pretrained(model_dir, device="cpu")
    builtin = BatchingModelService(policy, max_batch=64)
    await builtin.sample([1, 2], max_new_tokens=1, temperature=1.0, seed=0)  # warm up
    base = await completions(builtin, requests=args.requests, concurrency=args.concurrency, tokens=args.tokens)
    await builtin.aclose()
    print(f"builtin batching service: {base:.1f} completions/s")

    spec = LaunchConfig(python=args.python, port=free_port(), args=["--max-model-len", "1024", "--dtype", "float32"],
                        env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    launched = Launched.start(spec, model_dir, "bench", scratch / "logs")
    try:
        took = await launched.wait_healthy(1800)
        print(f"vLLM server up in {took:.0f} s")
        service = VLLMService(launched.urls, served_name="bench", weights=WeightStore(scratch / "weights", model_dir))
        await service.sample([1, 2], max_new_tokens=1, temperature=1.0, seed=0)
        served = await completions(service, requests=args.requests, concurrency=args.concurrency, tokens=args.tokens)
        print(f"vLLM-cpu server: {served:.1f} completions/s, {served / base:.2f}x the builtin service")
        sync_s, paused = await syncs(service, policy.state_dict(), n=args.syncs, concurrency=args.concurrency,
                                     tokens=args.tokens)
        print(f"weight sync (write + pause + reload + resume), median of {args.syncs}: {sync_s * 1000:.0f} ms; "
              f"paused share of a 1 s step: {paused:.3f}")
        await service.aclose()
    finally:
        launched.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".vllm-env" / "bin" / "python"))
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--syncs", type=int, default=9)
    args = parser.parse_args()
    if not Path(args.python).is_file():
        print(f"no vLLM environment at {args.python} (make vllm-env): nothing measured")
        return
    with tempfile.TemporaryDirectory(prefix="platoon-bench-inference-") as tmp:
        scratch = Path(tmp)
        asyncio.run(run(args, build_model(scratch / "model"), scratch))


if __name__ == "__main__":
    main()
