"""Models by name: ``train.model_name`` as a local checkpoint directory or a model id in a (fake, made here) Hugging
Face cache, resolved offline; the tokenizer from the same place; a name that is neither refused with exit 78 naming
the cache. No test here may open a network connection. Skipped without transformers."""

from __future__ import annotations

import socket
import sys

import pytest

pytest.importorskip("transformers")

from hf_kit import hub_cache_entry, save_chat_model  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from platoon.cli import app  # noqa: E402
from platoon.live.agent.chat_template import ChatTemplateRenderer  # noqa: E402
from platoon.live.agent.messages import Message  # noqa: E402
from platoon.live.envs.text import Tool  # noqa: E402
from platoon.live.inference.hf import (  # noqa: E402
    HFPolicy,
    hub_cache_dir,
    load_tokenizer,
    model_name_problem,
    resolve_model,
)

REPO = "tiny-org/tiny-chat"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("tiny-chat"))


@pytest.fixture
def cache(tmp_path, monkeypatch, checkpoint):
    """An HF cache holding ``REPO``, named by HF_HUB_CACHE; the network refused for the test's length."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError("a model by name opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    hub_cache_entry(tmp_path / "hub", REPO, checkpoint)
    return tmp_path / "hub"


def test_the_cache_is_found_as_huggingface_hub_finds_it(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", "~/elsewhere")
    assert hub_cache_dir() == tmp_path / "elsewhere"


def test_a_directory_or_a_cached_id_resolves(cache, checkpoint):
    assert resolve_model(checkpoint) == checkpoint
    snapshot = resolve_model(REPO)
    assert snapshot.parent.parent == cache / "models--tiny-org--tiny-chat"
    assert (snapshot / "config.json").is_file()
    from huggingface_hub import scan_cache_dir

    scanned = scan_cache_dir(cache)  # the kit's layout is the hub's own
    assert not scanned.warnings
    assert [(r.repo_id, [set(v.refs) for v in r.revisions]) for r in scanned.repos] == [(REPO, [{"main"}])]


@pytest.mark.parametrize("name", ["tiny-org/other", "nobody", "not an id/with spaces", "a/b/c", "./no/such/dir"])
def test_a_name_that_is_neither_names_the_cache(cache, name):
    with pytest.raises(FileNotFoundError, match=f"neither a local directory .* Hugging Face cache {cache}"):
        resolve_model(name)


def test_the_config_problem_of_a_name(cache, checkpoint):
    assert [model_name_problem(n) for n in ("tiny", str(checkpoint), REPO)] == [None, None, None]
    problem = model_name_problem("tiny-org/missing")
    assert problem.startswith("train.model_name: 'tiny-org/missing' is neither a local directory")
    assert str(cache) in problem and "nor is it tiny" in problem


def test_a_cached_model_and_its_tokenizer_load_and_play_a_turn(cache):
    """The model and tokenizer of a cached id, through the chat_template renderer: a prompt, a sampled completion
    that stops on the end of turn or the budget, parsed; the next turn's context keeps the sampled ids."""
    policy = HFPolicy.from_pretrained(REPO, device="cpu")
    renderer = ChatTemplateRenderer(load_tokenizer(REPO), tool_call_parser="auto")
    assert policy.vocab_size == renderer.tokenizer.vocab_size
    tools = [Tool("finish", "End.", terminal=True)]
    messages = [Message("user", "say hello")]
    prompt = renderer.prompt(messages, tools)
    stops = {seq[0] for seq in renderer.stop_sequences}
    sampled = list(policy.sample([prompt], max_new_tokens=12, temperature=1.0, seeds=[3])[0].tokens)
    cut = next((i + 1 for i, t in enumerate(sampled) if t in stops), len(sampled))  # where sampling would stop
    sampled = sampled[:cut]
    closed = sampled[-1] in stops
    messages.append(renderer.parse(sampled))
    nxt = renderer.extend(messages, [Message("user", "again")], tools, closed=closed)
    context = prompt + sampled + nxt
    assert context[len(prompt):len(prompt) + len(sampled)] == sampled
    assert renderer.tokenizer.decode(nxt).endswith("<|im_start|>assistant\n")


def test_train_refuses_a_name_that_is_neither_with_exit_78(cache, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("train:\n  model_name: tiny-org/missing\n  renderer_name: chat_template\n"
                      "  max_training_steps: 1\nenvironments:\n  - name: ns\n    env: platoon-number-search\n")
    result = CliRunner().invoke(app, ["train", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 78, result.output
    assert "train.model_name: 'tiny-org/missing' is neither a local directory" in result.output
    assert f"Hugging Face cache {cache} " in result.output
    assert not (tmp_path / "run").exists()


def test_train_without_the_hf_extra_is_a_config_error_naming_it(cache, checkpoint, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed: importing it raises ImportError
    config = tmp_path / "run.yaml"
    config.write_text(f"train:\n  model_name: {checkpoint}\n  renderer_name: chat_template\n"
                      "  max_training_steps: 1\nenvironments:\n  - name: ns\n    env: platoon-number-search\n")
    result = CliRunner().invoke(app, ["train", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 78, result.output
    assert "train.model_name: a Hugging Face checkpoint needs the transformers package, which is not installed " \
           "here: pip install 'platoon[hf]'" in result.output and "internal error" not in result.output
    assert not (tmp_path / "run").exists()
