"""``number_search``: find a hidden number from higher/lower answers within a limited number of guesses.

A text environment (``platoon.live.envs.text``). A task is a triple (range N, guesses allowed g, target t with
1 <= t <= N). The instruction reads ``guess the number from 1 to N in g guesses``; the one tool, ``guess(number)``,
answers ``found`` (the episode ends with success), ``higher`` (the target is higher) or ``lower``; a number outside
1..N, or an argument that is not an integer, is answered ``invalid`` and changes nothing. Each turn spends a guess
(``max_turns`` is g): a turn with a bad call, or with no call at all, spends it as well, so the game is the one it
was when actions were tokens. ``words`` declares every word the game writes (the tiny tokenizer's vocabulary).

Difficulty is graded by N and by how g compares with ``L(N) = ceil(log2(N + 1))``, the guesses with which binary
search always wins: with g guesses the best play wins with probability ``min(1, (2**g - 1) / N)``. The grid holds
every N of ``ranges`` with every ``g = L(N) + offset`` of ``guess_offsets`` (at least 1), so the set spans tasks a
random policy sometimes solves (small N, spare guesses) to tasks that even binary search loses half the time: groups
stay mixed for long, which the adaptive sampler and group admission need.

Splits are ``train`` and ``val`` (its evaluation split) over triples, stratified by (N, g): of each (N, g)'s targets, a seeded
``val_fraction`` (at least one) is held out. (Holding out whole targets does not generalise: a target the policy
never had to find is one it never learns to name.)

Rewards (``reward``): ``partial`` (default) gives 1 for a find and otherwise partial credit for narrowing the range,
``partial_weight * (1 - log(s) / log(N))`` where s is the size of the range still consistent with the answers;
``binary`` gives 1 or 0. Success is always "found". Partial credit keeps a gradient on the hard tasks that a
binary reward leaves all-fail (a prototype's held-out pass@1 stalled at 0.39-0.47 with binary reward on ranges up
to 64, and reached 0.70-0.77 with partial credit).

``show_range: true`` makes each answer also name the range still consistent with the answers (``higher 9 16``): an
easier, Markov game, off by default. ``action_tokens`` is a task's ``max_action_tokens``, the tokens one assistant
message may take: 2 by default, the tiny tokenizer's ``guess 8`` (the turn ends there, closed by the renderer); a
chat model's call in its template's JSON takes a few dozen, so give it ``action_tokens: 64``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

from platoon.config.registry import environment
from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.text import Tool, ToolCall, ToolResult

SPLITS = ("train", "val")
ANSWERS = ("higher", "lower", "found", "invalid")
GUESS = Tool(
    "guess", "Guess the hidden number; the answer says whether it is higher or lower.",
    {"type": "object", "properties": {"number": {"type": "integer", "description": "your guess"}},
     "required": ["number"]},
)
INSTRUCTION = "guess the number from 1 to {n} in {g} guesses"

__all__ = ["GUESS", "NumberSearch", "NumberSearchEpisode", "optimal_success"]


def guarantee(n: int) -> int:
    """``ceil(log2(n + 1))``: the guesses with which binary search always finds a target in 1..n."""
    return max(1, (n).bit_length())


def optimal_success(n: int, guesses: int) -> float:
    """The best policy's chance to win (N=n, g=guesses) over a uniform target: ``min(1, (2**g - 1) / n)``."""
    return min(1.0, (2**guesses - 1) / n)


@environment("platoon-number-search")
class NumberSearch:
    """The built-in environment (see the module's doc). Options are the entry's ``service_kwargs``."""

    speaks_text = True
    eval_split = "val"
    """The split an entry evaluates on when its ``eval_dataset_kwargs.split_name`` is null."""

    def __init__(
        self,
        *,
        ranges: Sequence[int] = (4, 8, 12, 16, 24),
        guess_offsets: Sequence[int] = (-1, 0, 1, 2),
        val_fraction: float = 0.25,
        split_seed: int = 0,
        reward: Literal["partial", "binary"] = "partial",
        partial_weight: float = 0.5,
        show_range: bool = False,
        action_tokens: int = 2,
    ) -> None:
        ranges = sorted({int(n) for n in ranges})
        if not ranges or ranges[0] < 2:
            raise ValueError(f"ranges must be integers of at least 2, got {ranges!r}")
        if not guess_offsets:
            raise ValueError("guess_offsets must not be empty")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction!r}")
        if reward not in ("partial", "binary"):
            raise ValueError(f"reward must be 'partial' or 'binary', got {reward!r}")
        if not 0.0 <= partial_weight < 1.0:
            raise ValueError(f"partial_weight must lie in [0, 1), got {partial_weight!r}")
        if int(action_tokens) < 1:
            raise ValueError(f"action_tokens must be at least 1, got {action_tokens!r}")
        self.reward = reward
        self.partial_weight = float(partial_weight)
        self.show_range = bool(show_range)
        self.max_range = ranges[-1]
        self._tasks: dict[str, Task] = {}
        self._splits: dict[str, list[str]] = {s: [] for s in SPLITS}
        max_guesses = 1
        for n in ranges:
            for g in sorted({max(1, guarantee(n) + int(o)) for o in guess_offsets}):
                max_guesses = max(max_guesses, g)
                targets = list(range(1, n + 1))
                # A generator per (N, g) so that adding a range or an offset leaves the other splits as they were.
                random.Random(f"number_search:{split_seed}:{n}:{g}").shuffle(targets)
                held = set(targets[: max(1, round(val_fraction * n))])
                for t in range(1, n + 1):
                    split = "val" if t in held else "train"
                    task = Task(
                        task_id=f"n{n}-g{g}-t{t}",
                        split=split,
                        columns={"range": n, "guesses": g, "target": t, "offset": g - guarantee(n),
                                 "optimal": optimal_success(n, g)},
                        max_turns=g,
                        max_action_tokens=int(action_tokens),
                    )
                    self._tasks[task.task_id] = task
                    self._splits[split].append(task.task_id)
        self.max_guesses = max_guesses
        self.words: tuple[str, ...] = tuple(dict.fromkeys([
            *INSTRUCTION.replace("{n}", "").replace("{g}", "").split(), GUESS.name, *GUESS.parameters["properties"],
            *ANSWERS, *(str(k) for k in range(1, max(self.max_range, max_guesses) + 1)),
        ]))
        """Every word the game writes, for a word-level tokenizer (``platoon.live.agent.tokenizer``)."""

    # --- tasks -----------------------------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        """The split's task ids, by range, then guesses, then target."""
        if split not in self._splits:
            raise KeyError(f"number_search has no split {split!r}; its splits are {', '.join(SPLITS)}")
        return list(self._splits[split])

    def task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"number_search has no task {task_id!r} (ids read n<range>-g<guesses>-t<target>)") from None

    def episode(self, task: Task) -> NumberSearchEpisode:
        return NumberSearchEpisode(self, task)

    def demonstration(self, task_id: str) -> list[ToolCall]:
        """Binary search's play of ``task_id``, a guess a turn (``platoon sft`` trains on it, docs/warm-start.md):
        the middle of the range still open, until the target is found or the guesses run out (then it fails, and
        ``platoon sft`` leaves it out)."""
        columns = self.task(task_id).columns
        lo, hi, target = 1, int(columns["range"]), int(columns["target"])
        turns: list[ToolCall] = []
        while len(turns) < int(columns["guesses"]):
            guess = (lo + hi) // 2
            turns.append(ToolCall(GUESS.name, {"number": guess}))
            if guess == target:
                break
            lo, hi = (guess + 1, hi) if guess < target else (lo, guess - 1)
        return turns

class NumberSearchEpisode:
    """One game: the range still consistent with the answers, the guesses left, found or not."""

    def __init__(self, env: NumberSearch, task: Task) -> None:
        self.env = env
        self.task = task
        self.n = int(task.columns["range"])
        self.target = int(task.columns["target"])
        self.guesses_left = int(task.columns["guesses"])
        self.lo, self.hi = 1, self.n
        self.found = False
        self.done = False
        self.started = False
        self.guesses: list[int] = []

    tools = (GUESS,)

    def reset(self) -> str:
        if self.started:
            raise RuntimeError("reset: the episode has already started")
        self.started = True
        return INSTRUCTION.format(n=self.n, g=int(self.task.columns["guesses"]))

    def call(self, call: ToolCall) -> ToolResult:
        if not self.started:
            raise RuntimeError("call: call reset first")
        if self.done:
            raise RuntimeError("call: the episode is over")
        guess = call.arguments.get("number") if call.name == GUESS.name else None
        if isinstance(guess, bool) or not isinstance(guess, int) or not 1 <= guess <= self.n:
            return ToolResult(self._answer("invalid"), content={"answer": "invalid"}, error=True)
        self.guesses.append(guess)
        self.guesses_left -= 1
        if guess == self.target:
            answer = "found"
            self.found = True
            self.lo = self.hi = guess
        elif guess < self.target:
            answer = "higher"
            self.lo = max(self.lo, guess + 1)
        else:
            answer = "lower"
            self.hi = min(self.hi, guess - 1)
        self.done = self.found or self.guesses_left <= 0
        return ToolResult(self._answer(answer), content={"answer": answer, "range_left": self.hi - self.lo + 1},
                          done=self.done)

    def _answer(self, answer: str) -> str:
        return f"{answer} {self.lo} {self.hi}" if self.env.show_range and answer != "found" else answer

    def outcome(self) -> Outcome:
        """The grade so far: the episode ends when the target is found or the turns (guesses) run out."""
        if not self.started:
            raise RuntimeError("outcome: the episode has not started")
        return Outcome(reward=self._reward(), success=self.found,
                       info={"guesses": len(self.guesses), "range_left": self.hi - self.lo + 1})

    def _reward(self) -> float:
        if self.found:
            return 1.0
        if self.env.reward == "binary":
            return 0.0
        left = self.hi - self.lo + 1
        return self.env.partial_weight * (1.0 - math.log(left) / math.log(self.n))
