"""How many rollouts a second do Ray rollout actors (``rollout_isolation: ray``) run on one node and on two, where
the environment's waits are the bottleneck, and how long does a rollout on a reused actor take from its start to its
first model call?

Each rollout (``waiting_env.WaitingWorkflow``) plays three turns of a model call, which the trainer's service answers
at once, and a tool call that blocks its actor 50-500 ms (lognormal around 100 ms, clipped), as a sandbox's does.
The cluster is Ray's own ``ray.cluster_utils.Cluster`` on this machine, every address on the loopback: one node, then
two, each offering ``--cpus`` logical CPUs, each actor holding one (so a node hosts that many actors). Nodes here
share this machine's cores; the rollouts wait rather than compute, so the figure is the placement's scaling, not
the cores'. Each configuration runs ``--rollouts`` rollouts in groups of 4 after a warm-up that starts every actor,
``--repeats`` times; printed: the median rollouts per second, the two-node to one-node ratio of those medians (goal
at least 1.8), and the median start-to-first-model-call of rollouts on reused actors (goal under 0.05 s; the fork
server's figure in process is 0.03 s), and the median start-up of a new actor (Ray placing it, its process
started, the worker stack and the environments imported and built: paid once per actor). Run: ``python benchmarks/bench_ray_rollouts.py``. Figures:
docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=4, help="logical CPUs a node offers (one actor each)")
    parser.add_argument("--rollouts", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    sys.path.insert(0, HERE)
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])  # Ray's workers import waiting_env by name
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every raylet, GCS and driver on 127.0.0.1
    import ray
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; Ray {ray.__version__}; "
          f"{args.rollouts} rollouts of 3 turns (50-500 ms tool waits), {args.repeats} repeats")
    print(f"{'nodes':>5}{'actors':>8}{'rollouts/s (median)':>21}{'runs':>30}{'reused start->call s':>22}"
          f"{'new actor start-up s':>22}")
    medians = {}
    for nodes in (1, 2):
        rates, reused, startups = _measure(nodes, args.cpus, args.rollouts, args.repeats)
        medians[nodes] = statistics.median(rates)
        print(f"{nodes:>5}{nodes * args.cpus:>8}{medians[nodes]:>21.2f}{', '.join(f'{r:.2f}' for r in rates):>30}"
              f"{statistics.median(reused):>22.4f}{statistics.median(startups):>22.2f}")
    print(f"two nodes / one node: {medians[2] / medians[1]:.2f}x (goal at least 1.8x)")


def _measure(nodes: int, cpus: int, rollouts: int, repeats: int) -> tuple[list[float], list[float], list[float]]:
    import ray
    from ray.cluster_utils import Cluster

    from platoon.config.ray import RayConfig
    from platoon.live.inference.service import FakeModelService
    from platoon.live.rollouts.workflow import GroupRow
    from platoon.live.workers.ray_pool import RayPool

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    cluster.connect()
    try:
        pool = RayPool(RayConfig(address=cluster.address, actor_cpus=1, max_actors=nodes * cpus, start_timeout_seconds=600),
                       permits=nodes * cpus)
        pool.open()
        service = FakeModelService(lambda prompt, seed: [5], logprob=-1.0)
        from waiting_env import WaitingWorkflow

        workflow = WaitingWorkflow(envs={}, service=service)
        workflow.rollout_workers = pool

        async def batch(n: int, tag: int) -> float:
            began = time.perf_counter()
            await asyncio.gather(*[workflow.arun_episode(GroupRow((tag, g), f"t{g}", "e", 4)) for g in range(n // 4)])
            return time.perf_counter() - began

        async def run() -> list[float]:
            await pool.ready()
            await batch(nodes * cpus * 2, 0)  # warm-up: every actor started and used
            rates = []
            for r in range(repeats):
                rates.append(rollouts / await batch(rollouts, r + 1))
            await pool.aclose()
            return rates

        rates = asyncio.run(run())
        return rates, list(pool.reused_startup_s), list(pool.actor_startup_s)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
