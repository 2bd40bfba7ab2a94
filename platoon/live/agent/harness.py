"""The tool-calling harness: how a model plays a text environment, one turn at a time.

A turn renders the conversation (the first turn ``renderer.prompt``; later ones extend the context), samples a
completion, parses it, runs its tool calls in order (``acall``) and appends their results:

```
context = renderer.prompt([user: instruction], tools)
loop:   completion = sample(context, budget, stop=renderer.stop_sequences)
        message = parse(completion); run each call -> tool messages (no call -> a user nudge, NUDGE)
        context += completion + renderer.extend(messages, new messages, tools, closed=...)
```

Rules it keeps:
- **A turn's datum is exact**: a turn records the context it saw (ids as they were rendered and sampled) and the
  sampled ids with their log-probabilities; the next context is that context, the sampled ids as sampled, then the
  renderer's ids for what came after. Nothing sampled is ever decoded and encoded again, so a rollout's turns
  extend one another and make one datum (``platoon.live.training.datums``) whose masked ids and log-probabilities
  are the sampled;
- **a completion with no tool call** costs its turn and gets a short user message, ``NUDGE`` (or, when it meant a
  call that did not parse, the renderer's ``call_error``: what could not be read and how a call is written), and the
  episode goes on (ending it instead would leave a model that has not yet learnt the call syntax no reward to learn from; a
  game that spends a move on a bad answer, as number_search does, reads the same);
- **budgets**: a turn may take ``min(task.max_action_tokens, max_new_tokens)`` tokens (``max_new_tokens``:
  ``rollout_config.inference_params.max_completion_tokens``) and no more than the context window leaves; an episode
  takes at most ``task.max_turns`` turns (and ``rollout_config.max_steps`` when set);
- **the episode ends** after a terminal tool's call, a result that says ``done`` (calls after it in the same
  message are not run), its last turn, or when the context window has no room for another token (the window:
  ``train.context_window_length``, else the model's). It ends cleanly either way: the environment grades it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from platoon.live.agent.messages import Message
from platoon.live.agent.renderer import Renderer, ends_with_stop, parse_completion
from platoon.live.agent.role_colon import RoleColonRenderer
from platoon.live.agent.tokenizer import TinyTokenizer
from platoon.live.envs.base import Task
from platoon.live.envs.deadline import blocking_deadline
from platoon.live.envs.text import ToolCall, ToolResult, acall
from platoon.live.inference.model import derive_seed
from platoon.live.rollouts import rollout_trace
from platoon.live.training.datums import Trajectory, Turn

__all__ = ["NUDGE", "Limits", "TextRollout", "default_renderer", "play_text_batch", "play_text_episode",
           "tiny_tokenizer"]

NUDGE = "call a tool"
"""The user message that answers a completion with no tool call."""
MAX_TOOL_CALLS = 32
"""The tool calls one turn runs at most, by default (``Limits.max_tool_calls``)."""
MAX_RESULT_CHARS = 65_536
"""The characters of a tool's result the model sees, by default (``Limits.max_result_chars``): a tool that returns
megabytes (a whole file, a web page) costs the context, the tokenizer and the trainer no more than this."""


def model_text(text: str, limit: int) -> str:
    """``text`` as the model sees it: at most ``limit`` characters (then a line that says how many were cut), lone
    surrogates replaced."""
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters cut: a tool result keeps {limit}]"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@contextmanager
def noted(note: str) -> Iterator[None]:
    """An exception of the environment's, raised in the block, carries ``note`` (where it was raised): the warning of
    its failed group says it."""
    try:
        yield
    except Exception as exc:
        exc.add_note(note)
        raise


def tiny_tokenizer(envs: Iterable[Any]) -> TinyTokenizer:
    """The tiny model's tokenizer for ``envs``: the harness's words (``NUDGE``'s), then each environment's declared
    ``words`` (an optional attribute), in order."""
    words = list(NUDGE.split())
    for env in envs:
        words += list(getattr(env, "words", ()))
    return TinyTokenizer(words)


def default_renderer(envs: Iterable[Any]) -> Renderer:
    """``role_colon`` over ``tiny_tokenizer(envs)``: what the tiny model speaks (``train.renderer_name: role_colon``)."""
    return RoleColonRenderer(tiny_tokenizer(envs))


@dataclass(frozen=True)
class Limits:
    """A rollout's budgets beyond its task's own: ``max_new_tokens`` caps each turn, ``max_turns`` the turns,
    ``context_window`` the context (None: no cap of that kind); ``max_tool_calls`` the tool calls one turn runs (a
    completion that makes more runs the first ones, and each of the others is answered with an error the model sees,
    so that a model that writes thousands of calls costs the environment no more than this a turn); ``step_timeout``
    the seconds one tool call may take (``rollout_config.step_timeout``; None: no limit); ``max_result_chars`` the
    characters of one tool result the model sees (the rest is cut, and the cut says so)."""

    max_new_tokens: int | None = None
    max_turns: int | None = None
    context_window: int | None = None
    max_tool_calls: int = MAX_TOOL_CALLS
    step_timeout: float | None = None
    max_result_chars: int = MAX_RESULT_CHARS


class TextRollout:
    """One episode's agent loop as steps a driver takes (``play_text_episode``, ``play_text_batch``): ``budget()``,
    then ``take(sample)``, then each call of ``calls`` answered (``answer``) until it says stop, then ``close()``."""

    def __init__(self, env: Any, task: Task, renderer: Renderer, limits: Limits = Limits()) -> None:
        self.task = task
        self.renderer = renderer
        self.source = f"{type(env).__module__}:{type(env).__qualname__}"  # the environment, as a config names it
        with noted(f"raised by {self.source} setting up an episode of task {task.task_id}"):
            self.episode = env.episode(task)
            instruction = self.episode.reset()
        self.tools = tuple(self.episode.tools)
        self._terminal = {t.name for t in self.tools if t.terminal}
        self.messages: list[Message] = [Message("user", instruction)]
        self.context: list[int] = list(renderer.prompt(self.messages, self.tools))
        self.turns: list[Turn] = []
        self.calls: tuple[ToolCall, ...] = ()
        self.ended: str | None = None
        self.max_turns = task.max_turns if limits.max_turns is None else min(task.max_turns, limits.max_turns)
        cap = limits.max_new_tokens
        self._per_turn = task.max_action_tokens if cap is None else min(task.max_action_tokens, cap)
        self._window = limits.context_window
        self._max_calls = limits.max_tool_calls
        self.step_timeout = limits.step_timeout
        self._max_chars = limits.max_result_chars
        self._beyond: tuple[ToolCall, ...] = ()  # the turn's calls past the bound: answered, not run
        self._new: list[Message] = []
        self._closed = True

    def budget(self) -> int | None:
        """Tokens the next turn may take; None once the episode has ended (or the context has no room left)."""
        if self.ended is None and len(self.turns) >= self.max_turns:
            self.ended = "turns"
        if self.ended is None and self._window is not None and len(self.context) >= self._window:
            self.ended = "context"
        if self.ended is not None:
            return None
        return self._per_turn if self._window is None else min(self._per_turn, self._window - len(self.context))

    def take(self, tokens: Sequence[int], logprobs: Sequence[float], version: int) -> tuple[ToolCall, ...]:
        """Record a turn's completion and parse it; the calls it makes (``calls``: none gets a nudge)."""
        self.turns.append(Turn(tuple(self.context), tuple(tokens), tuple(logprobs), version))
        self._closed = ends_with_stop(tokens, self.renderer.stop_sequences)
        message = parse_completion(self.renderer, tokens, self.tools)
        self.messages.append(message)
        cap = self._max_calls
        self.calls, self._beyond = tuple(message.tool_calls[:cap]), tuple(message.tool_calls[cap:])
        self._new = [] if self.calls else [Message("user", message.call_error or NUDGE)]
        return self.calls

    def answer(self, call: ToolCall, result: ToolResult) -> bool:
        """Append a call's result; False when the episode has ended (run no further call). A result that is not a
        ``ToolResult`` of text raises ``TypeError`` naming the tool; its text is cut to ``max_result_chars``, and a
        lone surrogate (which no encoding can write) becomes U+FFFD."""
        if not isinstance(result, ToolResult) or not isinstance(result.text, str):
            what = type(result).__name__ if not isinstance(result, ToolResult) else f"text of {type(result.text).__name__}"
            raise TypeError(f"tool {call.name!r} of {self.source} returned {what}, not a ToolResult with text")
        text = model_text(result.text, self._max_chars)
        self._new.append(Message("tool", text, tool_call_id=call.id, name=call.name))
        if result.done or call.name in self._terminal:
            self.ended = "done"
        return self.ended is None

    def close(self) -> None:
        """Finish the turn: unless the episode has ended, the next context is this one, the completion as sampled,
        and the renderer's ids for the new messages and the next generation prompt."""
        if self.ended is not None:
            return
        self._new += [Message("tool", f"not run: a turn runs at most {self._max_calls} tool calls, and this was call "
                                      f"{self._max_calls + 1 + i} of its turn", tool_call_id=call.id, name=call.name)
                      for i, call in enumerate(self._beyond)]
        last = self.turns[-1]
        self.context = (list(last.prompt) + list(last.tokens)
                        + list(self.renderer.extend(self.messages, self._new, self.tools, closed=self._closed)))
        self.messages += self._new
        self._new = []

    def trajectory(self, seconds: float | None = None) -> Trajectory:
        """The finished rollout, graded by the environment."""
        with noted(f"raised by {self.source} grading task {self.task.task_id}"):
            outcome = self.episode.outcome()
        return Trajectory(self.task.task_id, tuple(self.turns), outcome.reward, outcome.success, seconds)


async def play_text_episode(service: Any, env: Any, task: Task, renderer: Renderer, *, temperature: float,
                            seed: int, limits: Limits = Limits()) -> Trajectory:
    """One rollout of ``task`` against a ``ModelService``; turn t samples with seed ``derive_seed(seed, t)``. A
    traced rollout's tool calls are ``env_step`` spans (``platoon.live.rollouts.rollout_trace``). An environment's
    exception propagates; cancellation propagates at the awaits."""
    started = time.monotonic()
    rollout = TextRollout(env, task, renderer, limits)
    trace = rollout_trace.current()
    while (budget := rollout.budget()) is not None:
        sample = await service.sample(rollout.context, max_new_tokens=budget, temperature=temperature,
                                      seed=derive_seed(seed, len(rollout.turns)), stop=renderer.stop_sequences)
        for call in rollout.take(sample.tokens, sample.logprobs, sample.version):
            began = trace.clock() if trace is not None else 0.0
            with noted(f"raised by tool {call.name!r} of {rollout.source}"):
                result = await acall(rollout.episode, call, timeout=rollout.step_timeout)
            if trace is not None:
                trace.env_step(began)
            if not rollout.answer(call, result):
                break
        rollout.close()
    return rollout.trajectory(time.monotonic() - started)


def play_text_batch(policy: Any, env: Any, tasks: Sequence[Task], renderer: Renderer, *, temperature: float,
                    seeds: Sequence[int], version: int = 0, limits: Limits = Limits()) -> list[Trajectory]:
    """One rollout per task, all at once: each round samples every open episode's next turn in one call of
    ``policy.sample``, with the seeds ``play_text_episode`` would use (so each rollout samples the same tokens
    either way). For evaluation; an environment whose calls return awaitables is refused (``TypeError``)."""
    if len(tasks) != len(seeds):
        raise ValueError(f"play_batch: {len(tasks)} tasks but {len(seeds)} seeds")
    rollouts = [TextRollout(env, task, renderer, limits) for task in tasks]
    while True:
        open_ = [(i, b) for i, r in enumerate(rollouts) if (b := r.budget()) is not None]
        if not open_:
            break
        gens = policy.sample([rollouts[i].context for i, _ in open_], max_new_tokens=[b for _, b in open_],
                             temperature=temperature,
                             seeds=[derive_seed(seeds[i], len(rollouts[i].turns)) for i, _ in open_],
                             stop=[renderer.stop_sequences] * len(open_))
        for (i, _), gen in zip(open_, gens, strict=True):
            rollout = rollouts[i]
            for call in rollout.take(gen.tokens, gen.logprobs, version):
                with noted(f"raised by tool {call.name!r} of {rollout.source}"), blocking_deadline(call.name, rollout.step_timeout):
                    result = rollout.episode.call(call)
                if not isinstance(result, ToolResult):
                    getattr(result, "close", lambda: None)()  # a coroutine never awaited: no warning for it
                    raise TypeError("play_batch: an environment whose calls return awaitables needs play_episode")
                if not rollout.answer(call, result):
                    break
            rollout.close()
    return [r.trajectory() for r in rollouts]
