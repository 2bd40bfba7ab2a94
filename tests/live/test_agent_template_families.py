"""Real model families' chat templates through the ``chat_template`` renderer: the parser follows the template, a
template that would train on nothing is refused naming itself, every turn's ids are the template's own, and each
family's own call syntax is read back (templates: ``templates/PROVENANCE.md``)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from template_families import (  # noqa: E402
    FAMILIES,
    GUESS,
    SAY,
    TEMPLATES,
    family_tokenizer,
    mistral_own_template,
)

from platoon.config.components import renderer_name_problem  # noqa: E402
from platoon.live.agent.chat_template import ChatTemplateRenderer, message_dict  # noqa: E402
from platoon.live.agent.harness import play_text_episode  # noqa: E402
from platoon.live.agent.messages import Message  # noqa: E402
from platoon.live.agent.renderer import make_renderer  # noqa: E402
from platoon.live.envs.number_search import NumberSearch  # noqa: E402
from platoon.live.envs.text import Tool  # noqa: E402
from platoon.live.inference.service import FakeModelService  # noqa: E402
from platoon.live.training.datums import trajectory_datums  # noqa: E402

SUPPORTED = [name for name, f in FAMILIES.items() if f.parser is not None or f.kwargs]
NATIVE = [name for name, f in FAMILIES.items() if f.parser is not None]
TOOLS = (Tool("guess", "guess the number", {"type": "object", "properties": {"number": {"type": "integer"}}}),
         Tool("say", "say something", {"type": "object", "properties": {"text": {"type": "string"}}}))


def renderer_of(name: str, **kwargs) -> ChatTemplateRenderer:
    family = FAMILIES[name]
    return ChatTemplateRenderer(family_tokenizer(family), **{**family.kwargs, **kwargs})


def sampled(renderer: ChatTemplateRenderer, text: str) -> list[int]:
    """``text`` as a completion the model closed with the end-of-turn token its template writes."""
    rendered = renderer._render([Message("user", "?"), Message("assistant", "platoon-end")], TOOLS, False)
    after = rendered[rendered.rfind("platoon-end") + len("platoon-end"):]
    end = min((t for t in renderer.end_tokens if t in after), key=after.find)
    return renderer.tokenizer.encode(text) + renderer.tokenizer.encode(end)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_parser_follows_the_template_or_the_template_is_refused_naming_itself(name):
    family = FAMILIES[name]
    if family.parser is None:
        with pytest.raises(ValueError) as refused:
            ChatTemplateRenderer(family_tokenizer(family))
        assert family.template in str(refused.value) and family.refusal in str(refused.value)
        assert "tool_fallback" in str(refused.value) or "template of your own" in str(refused.value)
    if family.parser is None and not family.kwargs:
        return
    renderer = renderer_of(name)
    expected = family.parser or "hermes"  # tool_fallback asks for hermes calls
    assert renderer.tool_call_parser == expected
    assert f"tool_call_parser {expected}" in renderer.choice and family.template in renderer.choice


@pytest.mark.parametrize("name", NATIVE)
def test_the_prompt_is_the_template_s_own_render(name):
    family = FAMILIES[name]
    renderer = renderer_of(name)
    hf = renderer.tokenizer.hf
    messages = [Message("user", "Guess the number.")]
    text = hf.apply_chat_template([message_dict(m) for m in messages], tools=[t.schema() for t in TOOLS],
                                  add_generation_prompt=True, tokenize=False,
                                  **family.kwargs.get("chat_template_kwargs", {}))
    assert renderer.prompt(messages, TOOLS) == hf.encode(text, add_special_tokens=False)


def play(renderer, completions):
    env = NumberSearch(ranges=(16,), guess_offsets=(2,), action_tokens=64)  # 3 guesses; 8 is never right
    task = env.task(env.task_ids("train")[0])
    service = FakeModelService([*completions, *[completions[-1]] * 8], logprob=-0.5)  # the game may go on
    return asyncio.run(play_text_episode(service, env, task, renderer, temperature=1.0, seed=3))


@pytest.mark.parametrize("name", SUPPORTED)
def test_an_episode_plays_through_the_template_its_nudge_and_tool_results_reaching_the_next_turns(name):
    """A turn with no call gets the nudge, a call its result, and the rollout trains on exactly the sampled ids."""
    renderer = renderer_of(name)
    call, *_ = [text for text, calls in FAMILIES[name].outputs if calls == [GUESS]]
    completions = [sampled(renderer, "Thinking it over."), sampled(renderer, call), sampled(renderer, call)]
    rollout = play(renderer, completions)
    assert [list(t.tokens) for t in rollout.turns[:3]] == completions
    second, third = (renderer.tokenizer.decode(t.prompt) for t in rollout.turns[1:3])
    assert "call a tool" in second and ("higher" in third or "lower" in third)
    (datum,) = trajectory_datums(rollout, advantage=1.0)
    assert [t for t, m in zip(datum["tokens"], datum["mask"], strict=True) if m] == [t for turn in rollout.turns
                                                                                       for t in turn.tokens]


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3-coder", "llama3.1", "llama3.2"])
def test_a_context_built_turn_by_turn_is_the_whole_conversation_s_render(name):
    """Where the template rewrites no earlier turn, the context the harness builds from the sampled ids and
    ``extend`` is exactly the template's render of the whole conversation. (Qwen3's drops earlier turns' reasoning;
    Hermes 3's writes a newline into an earlier tool result once a turn follows it: there each turn appends what the
    template wrote when it was appended, which ``check_turns`` holds at start.)"""
    renderer = renderer_of(name)
    call, *_ = [text for text, calls in FAMILIES[name].outputs if calls == [GUESS]]
    messages = [Message("user", "Guess the number.")]
    context = renderer.prompt(messages, TOOLS)
    for text in (call, "Thinking it over."):
        ids = sampled(renderer, text)
        context += ids
        messages.append(renderer.parse(ids, TOOLS))
        new = [Message("tool", "higher", tool_call_id=c.id, name=c.name) for c in messages[-1].tool_calls]
        new = new or [Message("user", "call a tool")]
        context += renderer.extend(messages, new, TOOLS, closed=True)
        messages += new
    assert context == renderer.prompt(messages, TOOLS)


@pytest.mark.parametrize("name", SUPPORTED)
def test_the_family_s_own_tool_calls_are_read_and_drafts_in_reasoning_are_not(name):
    renderer = renderer_of(name)
    for text, calls in FAMILIES[name].outputs:
        message = renderer.parse(sampled(renderer, text), TOOLS)
        assert [(c.name, dict(c.arguments)) for c in message.tool_calls] == [(c.name, c.arguments) for c in calls], text
        assert message.call_error is None


MALFORMED = {
    "hermes": '<tool_call>\n{"name": "guess", "arguments": {"number": }}\n</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=guess>\n<parameter=number>\n8\n</parameter>\n</tool_call>",
    "llama3_json": '<|python_tag|>{"name": "guess", "parameters": {"number": 8}',
    "mistral": '[TOOL_CALLS][{"name": "guess", "arguments": {"number": 8}]',
}


@pytest.mark.parametrize("name", SUPPORTED)
def test_a_malformed_call_is_an_error_the_model_sees_never_a_crash(name):
    renderer = renderer_of(name)
    broken = MALFORMED[renderer.tool_call_parser]
    message = renderer.parse(sampled(renderer, broken), TOOLS)
    assert message.tool_calls == () and message.call_error.startswith("error: your tool call could not be read")
    rollout = play(renderer, [sampled(renderer, broken), sampled(renderer, "Fine.")])
    assert message.call_error in renderer.tokenizer.decode(rollout.turns[1].prompt)


def test_a_tokenizer_that_prepends_a_space_to_appended_text_is_refused_naming_the_place():
    family = FAMILIES["qwen2.5"]
    with pytest.raises(ValueError) as refused:
        ChatTemplateRenderer(family_tokenizer(family, metaspace=True))
    text = str(refused.value)
    assert family.template in text and "token " in text and "around" in text and "prefix space" in text


def test_mistral_trains_through_a_template_of_its_own_with_ids_its_template_demands(tmp_path):
    family = FAMILIES["mistral"]
    own = tmp_path / "mistral.jinja"
    own.write_text(mistral_own_template())
    renderer = ChatTemplateRenderer(family_tokenizer(family), chat_template=str(own))
    assert renderer.tool_call_parser == "mistral" and "given in renderer_kwargs" in renderer.choice
    completion = sampled(renderer, '[TOOL_CALLS][{"name": "guess", "arguments": {"number": 8}}]')
    (call,) = renderer.parse(completion, TOOLS).tool_calls
    assert len(call.id) == 9 and call.id.isalnum()
    both = sampled(renderer, f'[TOOL_CALLS][{{"name": "guess", "arguments": {{"number": 8}}}}, '
                             f'{{"name": "say", "arguments": {json.dumps(SAY.arguments)}}}]')
    calls = renderer.parse(both, TOOLS).tool_calls
    assert [(c.name, dict(c.arguments)) for c in calls] == [(GUESS.name, GUESS.arguments), (SAY.name, SAY.arguments)]
    assert len({c.id for c in calls}) == 2
    rollout = play(renderer, [completion, sampled(renderer, "Hmm."), completion])
    assert f'"call_id": "{call.id}"' in renderer.tokenizer.decode(rollout.turns[1].prompt)
    assert "[INST]call a tool[/INST]" in renderer.tokenizer.decode(rollout.turns[2].prompt)


def test_phi_s_eos_after_its_end_of_turn_is_followed():
    renderer = renderer_of("phi-3.5")
    messages = [Message("user", "Go."), Message("assistant", "Hi.")]
    assert renderer.extend_text(messages, [Message("user", "again")], TOOLS, closed=True) \
        == "\n<|user|>\nagain<|end|>\n<|assistant|>\n"


def test_0_4_0_family_names_set_the_template_s_variables_and_unsupported_ones_are_refused_by_name():
    qwen3 = family_tokenizer(FAMILIES["qwen3"])
    renderer = make_renderer("qwen3_disable_thinking", qwen3)
    assert renderer.chat_template_kwargs == {"enable_thinking": False} and renderer.tool_call_parser == "hermes"
    assert renderer.tokenizer.decode(renderer.prompt([Message("user", "Go.")], TOOLS)).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert make_renderer("llama3", family_tokenizer(FAMILIES["llama3.1"])).tool_call_parser == "llama3_json"
    for name, why in (("kimi_k2", "Kimi K2"), ("gpt_oss_low_reasoning", "harmony"), ("qwen3_vl", "vision")):
        assert why in renderer_name_problem(name)
    with pytest.raises(ValueError, match="harmony"):
        make_renderer("gpt_oss_high_reasoning", qwen3)


def test_a_named_parser_that_disagrees_with_the_template_is_said_in_the_choice():
    renderer = renderer_of("qwen2.5", tool_call_parser="llama3_json")
    assert renderer.tool_call_parser == "llama3_json" and "while hermes writes" in renderer.choice


def test_arguments_go_to_the_template_in_the_form_it_writes():
    """DeepSeek-R1-Distill's template as its model repository ships it adds a call's arguments to a string (no
    ``tojson``): a mapping raises, so the probe hands them over as a JSON string, and reads its calls back."""
    family = FAMILIES["deepseek-r1-distill"]
    r1 = (TEMPLATES / f"{family.template}.jinja").read_text()
    as_shipped = "{% if tools %}{{ tools | tojson }}{% endif %}" + r1.replace("tool['function']['arguments'] | tojson",
                                                                              "tool['function']['arguments']")
    assert as_shipped.count("tool['function']['arguments'] +") == 2
    renderer = ChatTemplateRenderer(family_tokenizer(family, template=as_shipped))
    assert renderer.arguments_as_json and renderer.tool_call_parser == "deepseek_v3"
    assert "arguments as a JSON string" in renderer.choice
    message = Message("assistant", "", tool_calls=(GUESS,))
    assert message_dict(message, arguments_as_json=True)["tool_calls"][0]["function"]["arguments"] == '{"number": 8}'


@pytest.mark.slow
@pytest.mark.parametrize("name", [*SUPPORTED, "mistral"])
def test_platoon_trains_a_tiny_random_model_through_the_family_s_template(name, tmp_path, one_torch_thread,
                                                                           capfd):
    """Two steps of ``platoon train`` on a tiny random Llama whose tokenizer is the family's, through its template."""
    import yaml
    from live_harness import save_tiny_llama

    from platoon.live.launch import command
    from platoon.runs import read_jsonl

    family = FAMILIES[name]
    tokenizer = family_tokenizer(family)
    model = save_tiny_llama(tmp_path / "model", vocab_size=len(tokenizer), context=4096)
    tokenizer.save_pretrained(str(model))
    kwargs = dict(family.kwargs)
    if name == "mistral":
        (tmp_path / "mistral.jinja").write_text(mistral_own_template())
        kwargs["chat_template"] = str(tmp_path / "mistral.jinja")
    config = {
        "train": {"model_name": str(model), "renderer_name": "chat_template", "renderer_kwargs": kwargs,
                  "max_training_steps": 2, "batch_size": 1,
                  "workflow_config": {"group_size": 2, "rollout_config": {
                      "max_steps": 2, "inference_params": {"max_completion_tokens": 6}}}},
        "eval": {"every": 0},
        "environments": [{"service_kwargs": {"ranges": [4], "action_tokens": 6}}],
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run = command.train(tmp_path / "run.yaml", out=tmp_path / "run", progress=False)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1] and all(r["train/rollouts"] == 2 for r in metrics)
    expected = family.parser or ("mistral" if name == "mistral" else "hermes")
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("info: renderer chat_template:")]
    assert said and all(f"tool_call_parser {expected}" in line for line in said)
    assert json.loads((run / "lock.json").read_text())["config"]["train"]["renderer_kwargs"] == kwargs
