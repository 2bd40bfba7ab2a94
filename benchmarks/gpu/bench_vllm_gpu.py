"""``platoon train`` with rollouts from a vLLM server on one GPU and the trainer on another: the figures of a real
deployment (rollouts per second, median weight sync, paused share, mismatch), read from the run's own metrics.

On a machine with two GPUs, vLLM in an environment of its own, and a small chat model in a local directory:

    .venv/bin/python benchmarks/gpu/bench_vllm_gpu.py --model /models/Qwen2.5-0.5B-Instruct \\
        --python /opt/vllm/bin/python --trainer-gpu 0 --vllm-gpu 1 [--steps 20]

It writes a config (platoon-number-search with the model's chat template; ``train.inference`` launching one server
with ``CUDA_VISIBLE_DEVICES`` set to ``--vllm-gpu``; ``model.device: cuda`` with the trainer's GPU made the only one it
sees), runs ``platoon train`` on it, and prints the run's medians. ``--dry-run`` does the same on the CPU with a tiny
random Llama built here and vLLM's CPU build (``make vllm-env``), two steps: what this machine can check of it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path: Path, args: argparse.Namespace, model: Path) -> Path:
    server_env = {"VLLM_CPU_KVCACHE_SPACE": "1"} if args.dry_run else {"CUDA_VISIBLE_DEVICES": str(args.vllm_gpu)}
    server_args = ["--max-model-len", str(args.max_model_len)]
    server_args += ["--dtype", "float32"] if args.dry_run else ["--gpu-memory-utilization", "0.85"]
    path.write_text(yaml.safe_dump({
        "environments": [{"name": "ns", "env": "platoon-number-search", "workflow_config": {"group_size": 8}}],
        "train": {"model_name": str(model), "renderer_name": "chat_template", "max_training_steps": args.steps,
                  "batch_size": args.batch_size, "optimizer": {"learning_rate": 1e-6},
                  "workflow_config": {"rollout_config": {"inference_params": {"max_completion_tokens": 64}}},
                  "inference": {"engine": "vllm", "launch": {"python": args.python, "port": free_port(),
                                                              "args": server_args, "env": server_env,
                                                              "start_timeout_seconds": 1800}}},
        "model": {"device": "cpu" if args.dry_run else "cuda"},
        "eval": {"every": 0},
    }))
    return path


def tiny_model(path: Path) -> Path:
    """The tests' tiny random Llama that vLLM's CPU build serves, with its tokenizer (trained in place: nothing is
    downloaded)."""
    sys.path[:0] = [str(ROOT / "tests" / "live"), str(ROOT / "tests" / "policy"), str(ROOT / "tests")]
    from hf_kit import save_vllm_chat_model

    return save_vllm_chat_model(path, context=2048)


def report(run: Path) -> dict[str, float]:
    rows = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "trainer/datums" in r]
    steps = [b["time"] - a["time"] for a, b in zip(rows, rows[1:], strict=False)]
    out = {
        "steps": float(len(rows)),
        "step_s_median": statistics.median(steps) if steps else float("nan"),
        "rollouts_per_s (median)": statistics.median(r["train/rollouts_per_hour"] / 3600 for r in rows),
    }
    for key in ("inference/weight_sync_s", "inference/paused_share", "trainer/mismatch/kl",
                "trainer/mismatch/is_ratio_mean"):
        values = [r[key] for r in rows if key in r]
        out[key + " (median)"] = statistics.median(values) if values else float("nan")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a local Hugging Face chat model directory")
    parser.add_argument("--python", default=str(ROOT / ".vllm-env" / "bin" / "python"))
    parser.add_argument("--trainer-gpu", type=int, default=0)
    parser.add_argument("--vllm-gpu", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--dry-run", action="store_true", help="on the CPU: a tiny model, vLLM's CPU build, 2 steps")
    args = parser.parse_args()
    if args.dry_run:
        args.steps, args.batch_size, args.max_model_len = 2, 2, 2048
    elif args.model is None:
        parser.error("--model is required (or --dry-run)")
    with tempfile.TemporaryDirectory(prefix="platoon-gpu-bench-") as tmp:
        scratch = Path(tmp)
        model = tiny_model(scratch / "model") if args.dry_run else args.model
        config = write_config(scratch / "run.yaml", args, model)
        env = {**os.environ}
        if not args.dry_run:
            env["CUDA_VISIBLE_DEVICES"] = str(args.trainer_gpu)  # the trainer's; the server's is its own setting
        run = scratch / "run"
        subprocess.run([sys.executable, "-m", "platoon", "train", str(config), "--out", str(run)], env=env, check=True)
        for key, value in report(run).items():
            print(f"{key}: {value:.4g}")


if __name__ == "__main__":
    main()
