"""An environment that goes wrong on purpose (tests/live/test_env_faults.py), as ``fault_env:Faulty``.

``mode`` picks the fault: ``raise`` (every tool call raises), ``down`` (every episode's reset raises while the
``FAULT_ENV_DOWN`` file exists: a server that is down, then up again), ``hang`` (a tool call blocks for hours),
``hang_async`` (a tool call awaits for hours), ``big`` (a tool returns 10 MB), ``unicode`` (a tool returns a lone
surrogate, NUL, bidi and escape characters), ``none`` (a tool returns None), ``nan`` (the grade is NaN), ``dup`` (a task id listed twice),
``ctor`` (the constructor raises); ``n`` is the number of tasks, ``ctor_s`` seconds the constructor sleeps.
Otherwise calling ``say`` with ``red`` wins the episode."""

from __future__ import annotations

import asyncio
import os
import time

from platoon.environments import Outcome, Task, Tool, ToolResult

SAY = Tool("say", "Say a word.", {"type": "object", "properties": {"word": {"type": "string"}},
                                  "required": ["word"]})
HOURS = 10_000.0


class Faulty:
    speaks_text = True
    eval_split = "val"
    words = ("say", "red", "blue")

    def __init__(self, mode: str = "ok", n: int = 4, ctor_s: float = 0.0, down_file: str = "") -> None:
        if mode == "ctor":
            raise ConnectionError("cannot reach the game server")
        time.sleep(ctor_s)
        self.mode, self.n, self.down_file = mode, n, down_file

    def task_ids(self, split: str) -> list[str]:
        ids = [f"t{i}" for i in range(self.n)]
        if self.mode == "dup":
            ids.append("t1")
        return ids if split == "train" else ids[:2]

    def task(self, task_id: str) -> Task:
        return Task(task_id, "train", max_turns=3, max_action_tokens=4)

    def episode(self, task: Task) -> Episode:
        return Episode(self.mode, task.task_id, self.down_file)


class Episode:
    tools = (SAY,)

    def __init__(self, mode: str, task_id: str, down_file: str) -> None:
        self.mode, self.task_id, self.down_file, self.calls = mode, task_id, down_file, 0

    def reset(self) -> str:
        if self.mode == "down" and os.path.exists(self.down_file):
            raise ConnectionError(f"no game for {self.task_id}: the server is down")
        return "say red"

    def call(self, call):
        self.calls += 1
        if self.mode == "raise":
            raise ValueError("the game server said 500")
        if self.mode == "hang":
            time.sleep(HOURS)
        if self.mode == "hang_async":
            return self._later()
        if self.mode == "big":
            return ToolResult("x" * 10_000_000)
        if self.mode == "unicode":
            return ToolResult("\ud800 \x00 \u202e \ufdfd \U0001f9ea \r\n\x1b[31m")
        if self.mode == "none":
            return None
        return ToolResult("ok", done=call.arguments.get("word") == "red")

    async def _later(self) -> ToolResult:
        await asyncio.sleep(HOURS)
        return ToolResult("late")

    def outcome(self) -> Outcome:
        if self.mode == "nan":
            return Outcome(float("nan"), False)
        won = self.calls > 0
        return Outcome(1.0 if won else 0.0, won)
