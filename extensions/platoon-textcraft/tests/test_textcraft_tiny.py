"""TextCraft with the built-in tiny model: the words the environments declare give each item, count and answer word
one token of the tiny tokenizer, and the example config (examples/textcraft-synth-tiny.yaml) loads and trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from platoon.environments import ToolCall
from platoon.live.agent.harness import default_renderer, tiny_tokenizer
from platoon.live.agent.messages import Message
from platoon_textcraft.episode import TOOLS
from platoon_textcraft.synth import TextCraftSynth

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "textcraft-synth-tiny.yaml"


@pytest.fixture(scope="module")
def env() -> TextCraftSynth:
    return TextCraftSynth()


def spelt_in_bytes(tok, text: str) -> list[str]:
    """The space-separated pieces of ``text`` that the tokenizer spells in bytes."""
    return [p for p in text.split(" ") if p and any(i >= tok.first_byte for i in tok.encode(p))]


def test_items_tools_and_counts_are_words(env: TextCraftSynth) -> None:
    words = set(env.words)
    assert set(env.world.items) <= words and {t.name for t in TOOLS} <= words
    assert {"ingredients", "target", "items", "message", "0", "256", "3x"} <= words
    assert "257" not in words  # longer counts are spelt in bytes


@pytest.mark.parametrize("split", ["val-easy", "train-easy"])  # counts above 256 (deeper tasks) are bytes
def test_an_episode_s_instruction_and_answers_are_words(env: TextCraftSynth, split: str) -> None:
    tok = tiny_tokenizer([env])
    task_id = env.task_ids(split)[0]
    episode = env.episode(env.task(task_id))
    headline, rest = episode.reset().split("\n", 1)
    assert spelt_in_bytes(tok, headline) == []  # the targets: one token each
    assert spelt_in_bytes(tok, rest) == []
    gold = env.gold_solution(task_id)
    target = gold[-2].arguments["target"]
    first = gold[0].arguments
    answers = [episode.call(ToolCall("view_inventory", {})).text,
               episode.call(ToolCall("get_info", {"items": [target[0]]})).text,
               episode.call(ToolCall("craft", {"ingredients": first["ingredients"],
                                               "target": [first["target"][0], first["target"][1] + 1]})).text,
               *(episode.call(c).text for c in gold)]
    assert answers[2].startswith("Could not craft") and answers[-1] == "Finished."
    assert episode.outcome().success
    for answer in answers:
        assert spelt_in_bytes(tok, answer) == [], answer


def test_the_tiny_prompt_is_short(env: TextCraftSynth) -> None:
    renderer = default_renderer([env])
    task = env.task(env.task_ids("train-easy")[0])
    episode = env.episode(task)
    prompt = renderer.prompt([Message("user", episode.reset())], episode.tools)
    assert len(prompt) < 80  # 291 ids when only the harness's words are declared


@pytest.mark.slow
def test_the_example_config_validates_and_trains(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from platoon.cli import app
    from platoon.live.launch import command
    from platoon.runs import read_jsonl

    result = CliRunner().invoke(app, ["config", "validate", str(EXAMPLE), f"log_path={tmp_path}"])
    assert result.exit_code == 0, result.output
    run = command.train(EXAMPLE, ["train.max_training_steps=2", "train.batch_size=1",
                                  "train.workflow_config.group_size=4"], out=tmp_path / "run", progress=False)
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    # train/rollouts counts the rollouts that ended in a step's window: under max_staleness 1 a group for step 1
    # may end while step 0 trains, so only the two steps' sum is fixed by the batch (one group of four each)
    assert sum(r["train/rollouts"] for r in rows) >= 8
    assert (run / "checkpoints" / "000002" / "trainer.pt").is_file()


@pytest.mark.slow
def test_the_sft_example_fine_tunes_on_the_gold_plans_and_hands_over_to_train(tmp_path: Path) -> None:
    from platoon.live.launch import command
    from platoon.live.sft.command import sft
    from platoon.runs import read_jsonl

    example = EXAMPLE.with_name("textcraft-synth-sft.yaml")
    small = ["sft.max_demonstrations=8", "sft.batch_size=4", "environments.0.eval_dataset_kwargs.limit=1"]
    warm = sft(example, small, out=tmp_path / "sft", steps=3, progress=False)
    rows = read_jsonl(warm / "metrics.jsonl")
    assert [r["step"] for r in rows if "sft/loss" in r] == [1, 2, 3]
    assert rows[0]["sft/demonstrations"] == 4 and rows[-1]["sft/epoch"] == 1.5  # 3 steps of 4 of the 8
    run = command.train(example, [f"train.init_from={warm}", "train.max_training_steps=1", "train.batch_size=1",
                                  "train.workflow_config.group_size=2", "environments.0.eval_dataset_kwargs.limit=1"],
                        out=tmp_path / "rl", progress=False)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0]
