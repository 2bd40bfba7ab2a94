"""The tool-calling harness: what a turn trains is exactly what was sampled, and how an episode ends."""

from __future__ import annotations

import asyncio

import pytest

from platoon.live.agent.harness import NUDGE, Limits, TextRollout, play_text_batch, play_text_episode
from platoon.live.agent.role_colon import RoleColonRenderer
from platoon.live.agent.tokenizer import TinyTokenizer
from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.text import Tool, ToolResult
from platoon.live.inference.model import Generation, derive_seed
from platoon.live.inference.service import Sample
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow

SAY = Tool("say", "say a word", {"type": "object", "properties": {"word": {"type": "string"}}})
STOP = Tool("stop", "end the episode", terminal=True)
TOK = TinyTokenizer(["say", "stop", "ab", "a", "b", "heard", "call", "tool"])
BYTE = {c: TOK.first_byte + ord(c) for c in " ab"}


class Parrot:
    """Say words (``say``) until ``stop``; rewarded 1 when it heard ``ab``. Its calls are awaitables when
    ``slow``."""

    speaks_text = True
    words = ("say", "stop", "heard")

    def __init__(self, slow: bool = False) -> None:
        self.slow = slow

    def task_ids(self, split):
        return ["t"]

    def task(self, task_id):
        return Task(task_id, "train", max_turns=4, max_action_tokens=8)

    def episode(self, task):
        return ParrotEpisode(self.slow)


class ParrotEpisode:
    tools = (SAY, STOP)

    def __init__(self, slow: bool) -> None:
        self.slow, self.heard, self.calls = slow, [], []

    def reset(self):
        return "say ab"

    def call(self, call):
        self.calls.append(call)
        result = ToolResult(f"heard {call.arguments.get('word', '')}".strip())
        if call.name == "say":
            self.heard.append(call.arguments.get("word"))
        if not self.slow:
            return result

        async def later():
            await asyncio.sleep(0)
            return result

        return later()

    def outcome(self):
        return Outcome(float("ab" in self.heard), "ab" in self.heard)


class Scripted:
    """A model service answering from a list of completions, each token with its own log-probability."""

    def __init__(self, completions):
        self.completions = list(completions)
        self.version = 0
        self.answered: list[Sample] = []

    async def sample(self, context, *, max_new_tokens, temperature, seed=None, stop=()):
        tokens = tuple(self.completions.pop(0))[:max_new_tokens]
        sample = Sample(tokens, tuple(-0.01 * (i + 1) - seed % 7 for i in range(len(tokens))), 0)
        self.answered.append(sample)
        return sample


def test_the_trained_datums_are_the_sampled_ids_and_logprobs_never_a_reencoding():
    eot = TOK.token("<eot>")
    # "say ab" spelt in bytes: it decodes to "say ab", which encodes to [say, ab], not to these ids
    spelt = [TOK.token("say"), BYTE[" "], BYTE["a"], BYTE["b"], eot]
    assert TOK.decode(spelt) == "say ab<eot>" and TOK.encode("say ab") + [eot] != spelt
    stop = [TOK.token("stop"), eot]
    service = Scripted([spelt, stop] * 3)
    wf = GroupRolloutWorkflow({"p": Parrot()}, service, seed=1, renderer=RoleColonRenderer(TOK))
    out = asyncio.run(wf.arun_episode(GroupRow((1, 0), "t", "p", 1)))
    (datum,) = out.datums  # one rollout, its turns extending each other: one datum
    sampled = [t for t, m in zip(datum["tokens"], datum["mask"], strict=True) if m]
    assert sampled == spelt + stop
    # each masked log-probability is the one the service reported for that token, in order
    masked_lps = [lp for lp, m in zip(datum["logprobs"], datum["mask"], strict=True) if m]
    assert masked_lps == [lp for sample in service.answered for lp in sample.logprobs]
    assert [t for sample in service.answered for t in sample.tokens] == sampled
    # and the whole sequence is the first context, then exactly what was sampled, then the renderer's ids
    renderer = RoleColonRenderer(TOK)
    first = renderer.prompt([_user("say ab")], (SAY, STOP))
    after = TOK.encode("tool: heard ab <eot> assistant:")
    assert datum["tokens"] == first + spelt + after + stop


def test_sampled_logprobs_are_kept_as_the_service_gave_them():
    completions = [[TOK.token("say"), BYTE[" "], BYTE["a"], BYTE["b"]], [TOK.token("stop")]]
    rollout = asyncio.run(play_text_episode(Scripted(completions), Parrot(), Parrot().task("t"),
                                            RoleColonRenderer(TOK), temperature=1.0, seed=3))
    assert [t.tokens for t in rollout.turns] == [tuple(c) for c in completions]
    for t, turn in enumerate(rollout.turns):
        s = derive_seed(3, t) % 7
        assert turn.logprobs == tuple(-0.01 * (i + 1) - s for i in range(len(turn.tokens)))
    # the first completion was cut by its budget, not closed: the renderer closed it in the next context
    assert rollout.turns[1].prompt[len(rollout.turns[0].prompt) + 4] == TOK.token("<eot>")
    assert rollout.success and rollout.reward == 1.0


def _user(text):
    from platoon.live.agent.messages import Message

    return Message("user", text)


def test_a_terminal_call_ends_the_episode_and_later_calls_in_its_message_are_not_run():
    eot = TOK.token("<eot>")
    both = TOK.encode("stop ; say ab") + [eot]
    episode_env = Parrot()
    rollout = TextRollout(episode_env, episode_env.task("t"), RoleColonRenderer(TOK))
    calls = rollout.take(both, [0.0] * len(both), 0)
    assert [c.name for c in calls] == ["stop", "say"]
    assert rollout.answer(calls[0], ToolResult("bye")) is False
    rollout.close()
    assert rollout.budget() is None and rollout.ended == "done"
    assert rollout.trajectory().reward == 0.0


def test_a_completion_without_a_call_gets_the_nudge():
    rollout = TextRollout(Parrot(), Parrot().task("t"), RoleColonRenderer(TOK))
    assert rollout.take(TOK.encode("a b"), [0.0, 0.0], 0) == ()
    rollout.close()
    assert TOK.decode(rollout.context).endswith(f"assistant: a b <eot> user: {NUDGE} <eot> assistant:")
    assert rollout.budget() == 8


def test_awaitable_calls_are_awaited_by_play_episode_and_refused_by_play_batch():
    say = TOK.encode("say ab") + [TOK.token("<eot>")]
    env = Parrot(slow=True)
    rollout = asyncio.run(play_text_episode(Scripted([say, say, say, say]), env, env.task("t"),
                                            RoleColonRenderer(TOK), temperature=1.0, seed=0))
    assert rollout.steps == 4 and rollout.success  # the turn budget ended it

    class SyncModel:
        def sample(self, prompts, *, max_new_tokens, temperature, seeds, stop=None):
            return [Generation(tuple(say), (0.0,) * len(say)) for _ in prompts]

    with pytest.raises(TypeError, match="awaitables"):
        play_text_batch(SyncModel(), env, [env.task("t")], RoleColonRenderer(TOK), temperature=1.0, seeds=[0],
                        limits=Limits())


def test_a_turn_runs_at_most_its_bound_of_tool_calls_and_answers_the_rest_with_an_error_the_model_sees():
    eot = TOK.token("<eot>")
    many = TOK.encode(" ; ".join(["say a"] * 40)) + [eot]
    env = Parrot()
    rollout = TextRollout(env, env.task("t"), RoleColonRenderer(TOK), Limits(max_tool_calls=3))
    calls = rollout.take(many, [0.0] * len(many), 0)
    assert len(calls) == 3 and len(rollout.messages[-1].tool_calls) == 40  # the message keeps every call parsed
    for call in calls:
        assert rollout.answer(call, rollout.episode.call(call))
    rollout.close()
    text = TOK.decode(rollout.context)
    assert text.count("not run: a turn runs at most 3 tool calls") == 37
    assert "and this was call 4 of its turn" in text and "and this was call 40 of its turn" in text
    assert rollout.turns[0].tokens == tuple(many)  # what trains is exactly what was sampled
    assert len(rollout.episode.calls) == 3


def test_a_completion_of_a_thousand_calls_runs_the_default_bound_and_the_episode_goes_on():
    from platoon.live.agent.harness import MAX_TOOL_CALLS

    eot = TOK.token("<eot>")
    thousand = TOK.encode(" ; ".join(["say b"] * 1000)) + [eot]
    service = Scripted([thousand, TOK.encode("say ab") + [eot], TOK.encode("stop") + [eot]])

    class Counting(Parrot):
        def task(self, task_id):  # room for the whole completion in one turn
            return Task(task_id, "train", max_turns=4, max_action_tokens=len(thousand))

        def episode(self, task):
            self.last = super().episode(task)
            return self.last

    env = Counting()
    rollout = asyncio.run(play_text_episode(service, env, env.task("t"), RoleColonRenderer(TOK), temperature=1.0,
                                            seed=0))
    assert [c.name for c in env.last.calls].count("say") == MAX_TOOL_CALLS + 1 and rollout.success
    assert rollout.turns[0].tokens == tuple(thousand)


def test_a_tool_result_comes_to_the_model_cut_to_its_limit_and_with_lone_surrogates_mended():
    from platoon.live.agent.harness import model_text

    cut = model_text("x" * 1000, 100)
    assert cut.startswith("x" * 100) and cut.endswith("[... 900 more characters cut: a tool result keeps 100]")
    assert model_text("a\ud800b \x00\u202e", 100) == "a\ufffdb \x00\u202e"
    assert model_text("fine", 100) == "fine"
