"""``number_search``: find a hidden number from higher/lower answers within a limited number of guesses.

A task is a triple (range N, guesses allowed g, target t with 1 <= t <= N). The prompt is ``<bos> N g |``; each
action is one token, a guess; the environment answers ``=`` (found: the episode ends with success), ``>`` (the
target is higher), ``<`` (lower) or ``?`` (not a number in 1..N; the guess is spent). The episode ends when the
target is found or the guesses run out.

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

``show_range: true`` makes each answer also name the range still consistent with the answers (``> lo hi``): an
easier, Markov game, off by default.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

from platoon.config.registry import environment
from platoon.live.envs.base import Outcome, Step, Task

PAD, BOS, SEP, LOWER, HIGHER, FOUND, INVALID = range(7)
SPECIALS = ("<pad>", "<bos>", "|", "<", ">", "=", "?")
FIRST_NUMBER = len(SPECIALS)
SPLITS = ("train", "val")

__all__ = ["NumberSearch", "NumberSearchEpisode", "optimal_success"]


def guarantee(n: int) -> int:
    """``ceil(log2(n + 1))``: the guesses with which binary search always finds a target in 1..n."""
    return max(1, (n).bit_length())


def optimal_success(n: int, guesses: int) -> float:
    """The best policy's chance to win (N=n, g=guesses) over a uniform target: ``min(1, (2**g - 1) / n)``."""
    return min(1.0, (2**guesses - 1) / n)


@environment("platoon-number-search")
class NumberSearch:
    """The built-in environment (see the module's doc). Options are the entry's ``service_kwargs``."""

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
        self.reward = reward
        self.partial_weight = float(partial_weight)
        self.show_range = bool(show_range)
        self.max_range = ranges[-1]
        self.vocab: tuple[str, ...] = SPECIALS + tuple(str(k) for k in range(1, self.max_range + 1))
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
                        max_action_tokens=1,
                    )
                    self._tasks[task.task_id] = task
                    self._splits[split].append(task.task_id)
        self.max_guesses = max_guesses
        self.max_context_tokens = 4 + (4 if self.show_range else 2) * max_guesses

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

    # --- tokens ----------------------------------------------------------------------------------------------

    def number_token(self, k: int) -> int:
        if not 1 <= k <= self.max_range:
            raise ValueError(f"{k} is outside 1..{self.max_range}")
        return FIRST_NUMBER + k - 1

    def token_number(self, token: int) -> int | None:
        """The number a token names, or None for a special token or an id outside the vocabulary."""
        k = token - FIRST_NUMBER + 1
        return k if 1 <= k <= self.max_range else None

    def decode(self, tokens: Sequence[int]) -> str:
        return " ".join(self.vocab[t] if 0 <= t < len(self.vocab) else f"#{t}" for t in tokens)


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
        self.guesses: list[int | None] = []

    def reset(self) -> tuple[int, ...]:
        if self.started:
            raise RuntimeError("reset: the episode has already started")
        self.started = True
        env = self.env
        return (BOS, env.number_token(self.n), env.number_token(int(self.task.columns["guesses"])), SEP)

    def step(self, action: Sequence[int]) -> Step:
        if not self.started:
            raise RuntimeError("step: call reset first")
        if self.done:
            raise RuntimeError("step: the episode is over")
        guess = self.env.token_number(action[0]) if len(action) else None
        if guess is not None and guess > self.n:
            guess = None
        self.guesses.append(guess)
        self.guesses_left -= 1
        if guess is None:
            answer = INVALID
        elif guess == self.target:
            answer = FOUND
            self.found = True
            self.lo = self.hi = guess
        elif guess < self.target:
            answer = HIGHER
            self.lo = max(self.lo, guess + 1)
        else:
            answer = LOWER
            self.hi = min(self.hi, guess - 1)
        self.done = self.found or self.guesses_left <= 0
        info = {"answer": self.env.vocab[answer], "range_left": self.hi - self.lo + 1}
        if self.done:
            return Step(observation=(), reward=self._reward(), done=True, info=info)
        observation = (answer,)
        if self.env.show_range:
            observation += (self.env.number_token(self.lo), self.env.number_token(self.hi))
        return Step(observation=observation, reward=0.0, done=False, info=info)

    def outcome(self) -> Outcome:
        if not self.done:
            raise RuntimeError("outcome: the episode has not ended")
        return Outcome(reward=self._reward(), success=self.found,
                       info={"guesses": len(self.guesses), "range_left": self.hi - self.lo + 1})

    def _reward(self) -> float:
        if self.found:
            return 1.0
        if self.env.reward == "binary":
            return 0.0
        left = self.hi - self.lo + 1
        return self.env.partial_weight * (1.0 - math.log(left) / math.log(self.n))
