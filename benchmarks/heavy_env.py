"""An environment whose module imports pandas, matplotlib and, when installed, transformers as it opens (about 1,800
modules beyond the worker's stack): ``bench_worker_start.py``'s stand-in for an environment played by an agent
harness that imports thousands of modules. Its one task ends after one model call.

``ProbeWorkflow`` runs in each rollout worker: just before its first model call it measures the worker's start-up
(from the process's creation, ``/proc/self/stat``, to now), the CPU time it spent so far (``time.process_time``: a
figure a loaded machine does not stretch), its own memory (USS, from ``/proc/self/smaps_rollup``) and reports them to the bench's service (``measure``), then makes the call.
"""

from __future__ import annotations

import os
import time

import matplotlib
import matplotlib.pyplot  # noqa: F401
import pandas  # noqa: F401

from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.text import Tool, ToolCall, ToolResult
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout

try:
    from transformers import AutoTokenizer, LlamaForCausalLM  # noqa: F401
except ImportError:  # not installed: the environment is lighter, and the benchmark says so
    pass

matplotlib.use("Agg")


class HeavyEnv:
    """A text environment of one tool; an episode ends after its one turn, graded a success."""

    speaks_text = True

    def task_ids(self, split: str) -> list[str]:
        return [f"t{i}" for i in range(4)]

    def task(self, task_id: str) -> Task:
        return Task(task_id, "train", {}, max_turns=1, max_action_tokens=1)

    def episode(self, task: Task) -> HeavyEpisode:
        return HeavyEpisode()


class HeavyEpisode:
    tools = (Tool("done", "End the episode.", terminal=True),)

    def reset(self) -> str:
        return "go"

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult("ok", done=True)

    def outcome(self) -> Outcome:
        return Outcome(1.0, True)


def uss_bytes() -> int:
    """This process's unique set size: its private pages (``/proc/self/smaps_rollup``)."""
    total = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:", "Private_Hugetlb:")):
                total += int(line.split()[1]) * 1024
    return total


def seconds_since_created() -> float:
    """Seconds since this process was created (``starttime`` of ``/proc/self/stat``, 1/CLK_TCK resolution)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")


class ProbeWorkflow(GroupRolloutWorkflow):
    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        env = self.envs[row.entry]
        env.task(row.env_task_id)
        seconds, cpu_s = seconds_since_created(), time.process_time()  # before reading smaps, which takes a while
        await self.service.measure(os.getpid(), seconds, uss_bytes(), cpu_s)
        return await super().arun_episode_single(row)
