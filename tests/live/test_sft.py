"""platoon sft: demonstrations laid out as rollouts (assistant tokens trained, the rest masked), files refused by
line, the loss falls, resume is exact, and train.init_from hands the weights over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from live_harness import train_then_sigkill

from platoon.config.errors import ConfigError
from platoon.live.agent.messages import Message
from platoon.live.agent.role_colon import RoleColonRenderer
from platoon.live.agent.tokenizer import TinyTokenizer
from platoon.live.envs.text import Tool, ToolCall
from platoon.live.sft.command import sft
from platoon.live.sft.demonstrations import Conversation, conversation_tokens, read_demonstrations
from platoon.live.training.checkpoint import LiveRunDir
from platoon.live.training.trainer import loads_state
from platoon.runs import read_jsonl

GUESS = Tool("guess", "guess", {"type": "object", "properties": {"number": {"type": "integer"}}})
TOK = TinyTokenizer(["guess", "number", "higher", "found", "8", "12", "from", "1", "to", "16"])


def test_only_the_assistant_s_tokens_are_trained_on():
    r = RoleColonRenderer(TOK)
    c = Conversation((Message("user", "guess the number from 1 to 16"),
                      Message("assistant", tool_calls=(ToolCall("guess", {"number": 8}),)),
                      Message("tool", "higher", name="guess"),
                      Message("assistant", tool_calls=(ToolCall("guess", {"number": 12}),)),
                      Message("tool", "found", name="guess")), (GUESS,), "t")
    ids, mask = conversation_tokens(r, c)
    trained = [i for i, m in zip(ids, mask, strict=True) if m]
    assert TOK.decode(trained) == TOK.decode(TOK.encode("guess 8 <eot> guess 12 <eot>"))
    # the layout is the harness's: the prompt, each completion, extend's ids for what follows it
    context = r.prompt(c.messages[:1], c.tools)
    assert ids[: len(context)] == context and not any(mask[: len(context)])
    assert TOK.decode([i for i, m in zip(ids, mask, strict=True) if not m]).endswith("tool: higher <eot> assistant:")


def test_a_malformed_demonstrations_file_is_refused_naming_each_line(tmp_path: Path):
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({"messages": [{"role": "user"}]}),
                               json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
                                           "tool_calls": [{"function": {"name": "nope", "arguments": "{}"}}]}]})]))
    with pytest.raises(ConfigError) as err:
        read_demonstrations(path)
    said = "\n".join(err.value.problems)
    assert f"{path}:2: not JSON" in said and f"{path}:3: messages: no assistant message" in said
    assert f"{path}:4: messages[1].tool_calls[0]: calls 'nope'" in said and f"{path}:1" not in said
    (tmp_path / "ok.jsonl").write_text(json.dumps(good) + "\n\n")
    assert [c.source for c in read_demonstrations(tmp_path / "ok.jsonl")] == [f"{tmp_path / 'ok.jsonl'}:1"]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return loads_state(LiveRunDir(run).resume_point().trainer_state)["model"]


def test_sft_lowers_the_loss_and_a_resume_trains_as_the_run_that_never_stopped(tmp_path: Path):
    args = ["sft.batch_size=8", "eval.every=0", "checkpoint.recovery_every=3"]
    whole = sft(None, args, out=tmp_path / "whole", steps=6, progress=False)
    rows = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    losses = [r["sft/loss"] for r in rows if "sft/loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0]
    cut = sft(None, args, out=tmp_path / "cut", steps=3, progress=False)
    sft(resume=cut, steps=6, progress=False)
    assert [json.loads(line)["sft/loss"] for line in (cut / "metrics.jsonl").read_text().splitlines()
            if "sft/loss" in line] == losses
    theirs, mine = _weights(whole), _weights(cut)
    assert all(torch.equal(theirs[k], mine[k]) for k in theirs)


def test_train_init_from_starts_the_policy_from_the_sft_run_s_weights(tmp_path: Path):
    from platoon.live.launch.build import build_live
    from platoon.live.launch.train_config import load_train_config

    run = sft(None, ["sft.batch_size=8", "eval.every=0"], out=tmp_path / "sft", steps=3, progress=False)
    cfg = load_train_config(None, [f"train.init_from={run}"], steps=1)
    live = build_live(cfg)
    sequence = torch.tensor([[3, 5, 7, 9, 11]])
    mask = torch.tensor([[0, 1, 1, 1, 1]])
    sft_model = build_live(load_train_config(None, [], steps=1)).model
    sft_model.load_state_dict(_weights(run))
    assert torch.equal(live.model.policy_logprobs(sequence, mask), sft_model.policy_logprobs(sequence, mask))
    with pytest.raises(ConfigError, match="train.init_from: .*not a run directory"):
        build_live(load_train_config(None, [f"train.init_from={tmp_path / 'nothing'}"], steps=1))


@pytest.mark.slow
def test_sft_sigkilled_mid_run_then_resumed_trains_each_step_once_as_the_whole_run(tmp_path: Path):
    args = ["sft.batch_size=8", "eval.every=0", "checkpoint.recovery_every=4"]
    whole = sft(None, args, out=tmp_path / "whole", steps=30, progress=False)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = tmp_path / "run"
    proc = train_then_sigkill(run, ["--steps", "30", *args], env, after_rows=10, within_s=120, command="sft")
    assert proc.returncode == -signal.SIGKILL
    resumed = subprocess.run([sys.executable, "-m", "platoon", "sft", "--resume", str(run)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    losses = {r["step"]: r["sft/loss"] for r in read_jsonl(whole / "metrics.jsonl") if "sft/loss" in r}
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "sft/loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 31))  # each step once: what the kill cut off was redone
    assert {r["step"]: r["sft/loss"] for r in rows} == losses
    theirs, mine = _weights(whole), _weights(run)
    assert all(torch.equal(theirs[k], mine[k]) for k in theirs)


def test_the_docs_example_line_reads(tmp_path: Path):
    doc = (Path(__file__).parents[2] / "docs" / "warm-start.md").read_text(encoding="utf-8")
    example = doc.split("```json", 1)[1].split("```", 1)[0]
    (tmp_path / "demos.jsonl").write_text(json.dumps(json.loads(example)) + "\n")
    [conversation] = read_demonstrations(tmp_path / "demos.jsonl")
    assert [m.role for m in conversation.messages] == ["system", "user", "assistant", "tool"]
    assert conversation.messages[2].tool_calls[0].arguments == {"number": 8}
