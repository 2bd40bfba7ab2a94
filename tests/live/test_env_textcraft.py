"""TextCraft-Synth end to end through a chat model: the hf_kit tokenizer (byte-level BPE with a Qwen-style template,
built here, no download) renders the episodes with ``chat_template``, hermes ``<tool_call>`` blocks are parsed into
calls, the environment's answers come back as rendered tool results and it grades the episode; what trains is the
sampled ids. Then ``platoon train`` on a tiny randomly initialised Llama of that tokenizer runs, checkpoints and
resumes. Skipped without transformers or the platoon-textcraft extension."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("platoon_textcraft")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hf_kit import chat_tokenizer, save_chat_model  # noqa: E402

from platoon.live.agent.chat_template import ChatTemplateRenderer  # noqa: E402
from platoon.live.agent.harness import play_text_episode  # noqa: E402
from platoon.live.envs.resolve import resolve_environment  # noqa: E402
from platoon.live.envs.text import ToolCall  # noqa: E402
from platoon.live.inference.service import FakeModelService  # noqa: E402
from platoon.live.launch import command  # noqa: E402
from platoon.live.launch.build import default_service  # noqa: E402
from platoon.live.training.datums import trajectory_datums  # noqa: E402
from platoon.runs import read_checkpoint_rows, read_jsonl  # noqa: E402

END = "<|im_end|>"


@pytest.fixture(scope="module")
def env():
    return resolve_environment("textcraft-synth")


@pytest.fixture(scope="module")
def renderer():
    return ChatTemplateRenderer(chat_tokenizer())


def shortest_task(env, split="train-easy"):
    """The first task of ``split`` whose gold solution is fewest crafts."""
    return min(env.task_ids(split)[:100], key=lambda t: len(env.gold_solution(t)))


def hermes(call: ToolCall) -> str:
    return f'<tool_call>\n{json.dumps({"name": call.name, "arguments": call.arguments})}\n</tool_call>{END}'


def spelt(tokenizer, text: str) -> list[int]:
    """``text`` one character at a time (its end token whole): ids that decode to ``text`` but that encoding the
    text again merges into fewer."""
    body = text.removesuffix(END)
    return [i for ch in body for i in tokenizer.encode(ch)] + tokenizer.encode(END)


def play(env, renderer, task_id, completions):
    service = FakeModelService(completions, logprob=-0.5)
    rollout = asyncio.run(play_text_episode(service, env, env.task(task_id), renderer, temperature=1.0, seed=7))
    return rollout, service


def results_of(env, task_id, calls):
    """The texts the environment answers ``calls`` with, played on an episode of its own."""
    episode = env.episode(env.task(task_id))
    episode.reset()
    return [episode.call(c).text for c in calls]


def test_scripted_hermes_calls_play_a_task_to_success_and_train_on_the_sampled_ids(env, renderer):
    tok = renderer.tokenizer
    task_id = shortest_task(env)
    calls = [ToolCall("view_inventory", {}), *env.gold_solution(task_id)]
    completions = [tok.encode(hermes(c)) for c in calls]
    completions[-1] = spelt(tok, hermes(calls[-1]))  # the finish call as no encoder writes it
    assert tok.decode(completions[-1]) == hermes(calls[-1]) and tok.encode(hermes(calls[-1])) != completions[-1]

    rollout, service = play(env, renderer, task_id, completions)
    assert (rollout.reward, rollout.success) == (1.0, True)
    assert [t.tokens for t in rollout.turns] == [tuple(c) for c in completions]
    # each tool result reaches the next turn's context as the template renders it
    for turn, text in zip(rollout.turns[1:], results_of(env, task_id, calls), strict=False):
        assert tok.decode(turn.prompt).endswith(
            f"{END}\n<|im_start|>user\n<tool_response>\n{text}\n</tool_response>{END}\n<|im_start|>assistant\n")
    assert "Inventory: " in tok.decode(rollout.turns[1].prompt)
    assert len(service.calls) == len(calls)  # finish ended the episode

    (datum,) = trajectory_datums(rollout, advantage=1.0)
    sampled = [t for t, m in zip(datum["tokens"], datum["mask"], strict=True) if m]
    assert sampled == [t for c in completions for t in c]
    assert [lp for lp, m in zip(datum["logprobs"], datum["mask"], strict=True) if m] == [-0.5] * len(sampled)
    assert datum["tokens"] == list(rollout.turns[-1].prompt) + completions[-1]


def test_a_partial_plan_is_graded_zero_and_a_bad_craft_is_answered(env, renderer):
    tok = renderer.tokenizer
    task_id = shortest_task(env)
    gold = env.gold_solution(task_id)
    bad = ToolCall("craft", {"ingredients": {"t0_i0": 99}, "target": gold[0].arguments["target"]})
    calls = [gold[0], bad, ToolCall("finish", {"message": "done"})]
    rollout, _ = play(env, renderer, task_id, [tok.encode(hermes(c)) for c in calls])
    assert (rollout.reward, rollout.success) == (0.0, False)
    crafted, refused = results_of(env, task_id, calls[:2])
    assert crafted.startswith("Crafted ") and refused.startswith("Could not craft")
    assert f"<tool_response>\n{refused}\n</tool_response>" in tok.decode(rollout.turns[-1].prompt)


# -- platoon train on a tiny random Llama of the kit's tokenizer ------------------------------------------------------
PER_TURN, TURNS = 16, 3


class Recording:
    """The run's own model service, each request recorded (its prompt and token budget) on the way through."""

    def __init__(self, inner, calls):
        self.inner, self.calls = inner, calls

    @property
    def version(self):
        return self.inner.version

    async def sample(self, prompt_tokens, **kwargs):
        self.calls.append((tuple(prompt_tokens), kwargs["max_new_tokens"]))
        return await self.inner.sample(prompt_tokens, **kwargs)

    async def publish(self, state_dict, version):
        await self.inner.publish(state_dict, version)

    async def aclose(self):
        await self.inner.aclose()


def kit_config(tmp_path):
    model = save_chat_model(tmp_path / "tiny-chat")
    config = tmp_path / "textcraft-chat.yaml"
    config.write_text(f"""\
train:
  model_name: {model}
  renderer_name: chat_template
  max_training_steps: 2
  batch_size: 2
  workflow_config:
    group_size: 2
    rollout_config:
      max_steps: {TURNS}
      inference_params: {{max_completion_tokens: {PER_TURN}}}
checkpoint: {{every: 1}}
eval: {{every: 0}}
environments:
  - name: textcraft
    env: textcraft-synth
    dataset_kwargs: {{split_name: train-easy}}
""")
    return config, model


@pytest.mark.slow
def test_platoon_train_on_a_tiny_chat_model_checkpoints_and_resumes(tmp_path, one_torch_thread):
    config, model = kit_config(tmp_path)
    calls = []

    def service(policy, cfg, version=0):
        return Recording(default_service(policy, cfg, version), calls)

    run = command.train(config, out=tmp_path / "run", progress=False, service_factory=service)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1]
    assert [r["step"] for r in read_checkpoint_rows(run)] == [0, 1, 2]
    command.train(resume=run, steps=4, progress=False, service_factory=service)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1, 2, 3]
    assert [r["step"] for r in read_checkpoint_rows(run)] == [0, 1, 2, 2, 3, 4]
    assert all(r["train/rollouts"] == 4 for r in metrics)  # a batch of two groups of two, every step
    assert (run / "checkpoints" / "000004" / "trainer.pt").is_file()

    # the rollouts played through the kit's chat template, within the per-turn and per-episode budgets
    tok = ChatTemplateRenderer(chat_tokenizer()).tokenizer
    prompts = [tok.decode(p) for p, _ in calls]
    assert all(p.startswith("<|im_start|>system\n# Tools") and "Craft the following items: " in p for p in prompts)
    assert {budget for _, budget in calls} <= set(range(1, PER_TURN + 1))
    assert max(p.count("<|im_start|>assistant\n") for p in prompts) <= TURNS
    assert len(calls) <= 4 * 4 * TURNS


def test_the_chat_model_config_textcraft_md_shows_validates_with_a_checkpoint(tmp_path):
    from typer.testing import CliRunner

    from platoon.cli import app

    doc = (Path(__file__).resolve().parents[2] / "docs" / "textcraft.md").read_text(encoding="utf-8")
    [config] = [b for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S) if "chat_template" in b]
    (tmp_path / "chat.yaml").write_text(config)
    model = save_chat_model(tmp_path / "tiny-chat", context=8192)  # in place of the doc's cached model id
    result = CliRunner().invoke(app, ["config", "validate", str(tmp_path / "chat.yaml"), f"log_path={tmp_path}",
                                      f"train.model_name={model}"])
    assert result.exit_code == 0, result.output
