"""The chat_template renderer over a tokenizer built here (hf_kit: byte-level BPE, a Qwen-style template, no
download): prompts as the template renders them, tool calls parsed by each parser, contexts extended without ever
re-encoding what the model sampled. Skipped without transformers."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hf_kit import CHAT_TEMPLATE, chat_tokenizer  # noqa: E402

from platoon.live.agent.chat_template import (  # noqa: E402
    ChatTemplateRenderer,
    HFTokenizer,
    message_dict,
    parse_auto,
    parse_hermes,
    parse_text,
)
from platoon.live.agent.messages import Message  # noqa: E402
from platoon.live.agent.renderer import Renderer, Tokenizer  # noqa: E402
from platoon.live.envs.text import Tool, ToolCall  # noqa: E402

TOOLS = [
    Tool("craft", "Craft an item.", {"type": "object", "properties": {"target": {"type": "string"}}}),
    Tool("finish", "End the episode.", {"type": "object", "properties": {"message": {"type": "string"}}},
         terminal=True),
]
START = [Message("system", "Be brief."), Message("user", "make a plank")]
CALL = '<tool_call>\n{"name": "craft", "arguments": {"target": "plank"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatTemplateRenderer(tokenizer)


def render(tokenizer, messages, *, generation_prompt=True):
    return tokenizer.apply_chat_template([message_dict(m) for m in messages], tools=[t.schema() for t in TOOLS],
                                         add_generation_prompt=generation_prompt, tokenize=False)


def test_it_meets_the_protocols(renderer, tokenizer):
    assert isinstance(renderer, Renderer) and isinstance(renderer.tokenizer, Tokenizer)
    assert renderer.tokenizer.vocab_size == len(tokenizer) == 400
    assert renderer.tokenizer.encode("hello") == tokenizer.encode("hello", add_special_tokens=False)
    assert renderer.tokenizer.decode(renderer.tokenizer.encode("<|im_end|>\n ünï")) == "<|im_end|>\n ünï"


def test_the_prompt_is_the_templates_with_the_tools(renderer, tokenizer):
    ids = renderer.prompt(START, TOOLS)
    assert ids == tokenizer.apply_chat_template([message_dict(m) for m in START], tools=[t.schema() for t in TOOLS],
                                                add_generation_prompt=True, tokenize=True, return_dict=False)
    text = renderer.tokenizer.decode(ids)
    assert '"name": "craft"' in text and text.endswith("<|im_start|>assistant\n")
    assert "# Tools" not in renderer.tokenizer.decode(renderer.prompt(START, []))


def test_it_stops_on_eos_and_the_templates_end_of_turn(renderer, tokenizer):
    assert renderer.end_tokens == ("<|endoftext|>", "<|im_end|>")
    assert renderer.stop_sequences == ((tokenizer.eos_token_id,), (tokenizer.convert_tokens_to_ids("<|im_end|>"),))


def parsed(renderer, text):
    return renderer.parse(renderer.tokenizer.encode(text))


def test_a_tool_call_in_a_tool_call_out(renderer):
    message = parsed(renderer, CALL + "<|im_end|>")
    assert message == Message("assistant", "", tool_calls=(ToolCall("craft", {"target": "plank"}),))


def test_two_calls_and_the_text_around_them(renderer):
    text = f'Let me craft.\n{CALL}\n<tool_call>{{"name": "finish", "arguments": "{{\\"message\\": \\"ok\\"}}"}}' \
           "</tool_call><|endoftext|>"
    message = parsed(renderer, text)
    assert message.tool_calls == (ToolCall("craft", {"target": "plank"}), ToolCall("finish", {"message": "ok"}))
    assert message.content == "Let me craft."


@pytest.mark.parametrize("bad", [
    '<tool_call>\n{"name": "craft", "arguments": {"target": }\n</tool_call>',  # not JSON
    '<tool_call>\n["craft"]\n</tool_call>',  # not an object
    '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name
    '<tool_call>\n{"name": "craft", "arguments": [1]}\n</tool_call>',  # arguments not an object
    '<tool_call>\n{"name": "craft", "arguments": {"target": "plank"}}',  # cut off before its end
])
def test_a_malformed_call_stays_in_the_content(renderer, bad):
    message = parsed(renderer, f"thinking {bad}")
    assert message.tool_calls == () and message.content == f"thinking {bad}"


def test_a_malformed_call_beside_a_good_one(renderer):
    bad = "<tool_call>{oops}</tool_call>"
    message = parsed(renderer, f"{bad}{CALL}<|im_end|>")
    assert message.tool_calls == (ToolCall("craft", {"target": "plank"}),) and message.content == bad


def test_only_a_trailing_stop_sequence_is_split_off(renderer):
    assert parsed(renderer, "done<|im_end|>").content == "done"
    assert parsed(renderer, "cut off mid").content == "cut off mid"


@pytest.mark.parametrize(("text", "calls", "rest"), [
    ('craft({"target": "plank"})', [ToolCall("craft", {"target": "plank"})], ""),
    ("I will look.\nview_inventory()\n", [ToolCall("view_inventory", {})], "I will look."),
    ('finish {"message": "done"}', [ToolCall("finish", {"message": "done"})], ""),
    ('craft({\n  "target": "plank"\n})\nget_info({"items": ["plank"]})',
     [ToolCall("craft", {"target": "plank"}), ToolCall("get_info", {"items": ["plank"]})], ""),
    ('I think craft({"target": "plank"}) is best', [], 'I think craft({"target": "plank"}) is best'),
    ('print("hi")', [], 'print("hi")'),
    ('craft({"target": "plank"}) then more', [], 'craft({"target": "plank"}) then more'),
    ('craft({"target": })', [], 'craft({"target": })'),
])
def test_the_text_parser(text, calls, rest):
    assert parse_text(text) == (calls, rest)


def test_given_the_tools_the_text_parser_takes_only_their_names(renderer):
    text = 'Answer {"x": 1}\nfinish({"message": "x"})'
    assert parse_text(text) == ([ToolCall("Answer", {"x": 1}), ToolCall("finish", {"message": "x"})], "")
    assert parse_text(text, {"finish"}) == ([ToolCall("finish", {"message": "x"})], 'Answer {"x": 1}')
    auto = ChatTemplateRenderer(renderer.tokenizer, tool_call_parser="auto")
    message = auto.parse(auto.tokenizer.encode(text + "<|im_end|>"), TOOLS)
    assert message.tool_calls == (ToolCall("finish", {"message": "x"}),) and message.content == 'Answer {"x": 1}'
    assert auto.parse(auto.tokenizer.encode(CALL), TOOLS[1:]).tool_calls == (ToolCall("craft", {"target": "plank"}),)


def test_auto_tries_hermes_then_text():
    assert parse_auto(CALL + '\nfinish({"message": "x"})') == ([ToolCall("craft", {"target": "plank"})],
                                                              'finish({"message": "x"})')
    assert parse_auto('finish({"message": "x"})') == ([ToolCall("finish", {"message": "x"})], "")
    assert parse_hermes('finish({"message": "x"})') == ([], 'finish({"message": "x"})')


@pytest.mark.parametrize(("parser", "calls"), [("qwen3", 1), ("hermes", 1), ("text", 1), ("auto", 1)])
def test_the_parser_is_chosen_by_name(tokenizer, parser, calls):
    text = CALL if parser != "text" else 'craft({"target": "plank"})'
    renderer = ChatTemplateRenderer(tokenizer, tool_call_parser=parser)
    assert len(parsed(renderer, text).tool_calls) == calls


def test_attributes_are_checked(tokenizer):
    with pytest.raises(ValueError, match="no attribute 'temperature'"):
        ChatTemplateRenderer(tokenizer, temperature=0.5)
    with pytest.raises(ValueError, match="tool_call_parser 'kimi_k2' is not one of hermes, qwen3, llama3_json, "):
        ChatTemplateRenderer(tokenizer, tool_call_parser="kimi_k2")
    with pytest.raises(ValueError, match="reasoning_markers 'think' must be a list of \\[open, close\\] pairs"):
        ChatTemplateRenderer(tokenizer, reasoning_markers="think")
    assert ChatTemplateRenderer(tokenizer, reasoning_markers=[]).reasoning_markers == ()
    with pytest.raises(ValueError, match="no chat template"):
        ChatTemplateRenderer(chat_tokenizer(chat_template=""))
    with pytest.raises(ValueError, match="must be non-empty strings"):
        ChatTemplateRenderer(tokenizer, end_tokens=["<|im_end|>", ""])
    with pytest.raises(ValueError, match="chat_template_kwargs .* must be a mapping"):
        ChatTemplateRenderer(tokenizer, chat_template_kwargs=["enable_thinking"])
    assert ChatTemplateRenderer(tokenizer, end_tokens="<|im_end|>").stop_sequences == ((2,),)
    ends = ChatTemplateRenderer(tokenizer, end_tokens=["<|im_end|>", "</done>"])
    assert ends.stop_sequences == ((2,), tuple(ends.tokenizer.encode("</done>")))


def test_template_variables_reach_the_template(tokenizer):
    template = CHAT_TEMPLATE + "{% if add_generation_prompt and enable_thinking is false %}<think></think>{% endif %}"
    renderer = ChatTemplateRenderer(chat_tokenizer(chat_template=template),
                                    chat_template_kwargs={"enable_thinking": False})
    assert renderer.tokenizer.decode(renderer.prompt(START, TOOLS)).endswith("assistant\n<think></think>")


def context_of(renderer, turns, *, closed=True):
    """The context the harness builds: the prompt, then each turn's sampled ids as sampled and what ``extend``
    renders after them (the tool's answer to each call); also the conversation, as parsed."""
    messages = list(START)
    context = renderer.prompt(messages, TOOLS)
    for sampled in turns:
        context += sampled
        messages.append(renderer.parse(sampled))
        new = [Message("tool", f"did {c.name}", name=c.name) for c in messages[-1].tool_calls]
        context += renderer.extend(messages, new, TOOLS, closed=closed)
        messages += new
    return context, messages


def test_an_extended_context_reads_as_the_template_renders_the_conversation(renderer, tokenizer):
    encode = renderer.tokenizer.encode
    context, messages = context_of(renderer, [encode(CALL + "<|im_end|>"), encode("Done.<|im_end|>")])
    assert renderer.tokenizer.decode(context) == render(tokenizer, messages)
    assert context == renderer.prompt(messages, TOOLS)  # this tokenizer reads these turns the same either way


def test_a_cut_off_completion_is_closed_first(renderer, tokenizer):
    encode = renderer.tokenizer.encode
    messages = [*START, renderer.parse(encode("I am still thin"))]
    closed = renderer.tokenizer.decode(renderer.extend(messages, [Message("user", "go on")], TOOLS, closed=False))
    assert closed == "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n"
    after_stop = renderer.tokenizer.decode(renderer.extend(messages, [Message("user", "go on")], TOOLS, closed=True))
    assert after_stop == closed.removeprefix("<|im_end|>")


def test_extend_never_encodes_the_assistants_part(renderer):
    """The same parsed message from other sampled ids gets the same extension, and it holds none of the
    assistant's text: only what the template puts after it."""
    tok = renderer.tokenizer
    canonical = tok.encode(CALL + "<|im_end|>")
    letters = [i for t in tok.hf.convert_ids_to_tokens(canonical[:-1]) for i in tok.hf.convert_tokens_to_ids(list(t))]
    assert letters != canonical[:-1] and tok.decode(letters) == tok.decode(canonical[:-1])
    extensions = {tuple(renderer.extend([*START, renderer.parse(ids)], [Message("tool", "ok")], TOOLS, closed=True))
                  for ids in (canonical, [*letters, canonical[-1]])}
    assert len(extensions) == 1
    assert "craft" not in tok.decode(next(iter(extensions)))


def test_training_context_keeps_the_sampled_ids_where_re_tokenising_changes_them(renderer):
    """On this BPE, the letters of "hello" decode to the text that encodes as one id: decode -> encode loses the
    ids the model sampled. The context built with ``extend`` keeps them, and reads as the same text."""
    tok = renderer.tokenizer
    sampled = [tok.hf.convert_tokens_to_ids(c) for c in "hello"] + tok.encode("<|im_end|>")
    assert tok.encode(tok.decode(sampled)) != sampled  # re-tokenising changes the ids
    assert tok.encode("hello") == [tok.hf.convert_tokens_to_ids("hello")]
    context, messages = context_of(renderer, [sampled])
    prompt = renderer.prompt(START, TOOLS)
    assert context[len(prompt):len(prompt) + len(sampled)] == sampled
    again = renderer.prompt(messages, TOOLS)  # what a re-rendering harness would train on
    assert tok.decode(again) == tok.decode(context) and again != context


def rewritten(old: str, new: str, *, prefix: str = "") -> str:
    """The kit's template with ``old`` replaced by ``new`` (which must be there), ``prefix`` in front."""
    assert old in CHAT_TEMPLATE
    return prefix + CHAT_TEMPLATE.replace(old, new)


LAST_USER = ("{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
             "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}")
ASSISTANT = "<|im_start|>assistant\n{{ message.content }}"
REWRITING = {
    # Qwen3: an assistant message before the last user message loses its reasoning (text up to </think>).
    "drops old reasoning": rewritten(ASSISTANT, "<|im_start|>assistant\n{{ message.content.split('</think>')[-1] "
                                                "if loop.index0 < ns.last else message.content }}", prefix=LAST_USER),
    # Qwen3 without thinking: only the last message gets an (empty) reasoning block.
    "reasons in the last turn only": rewritten(
        ASSISTANT, "<|im_start|>assistant\n{% if loop.last %}<think>\n\n</think>\n\n{% endif %}"
                   "{{ message.content }}"),
    # Falcon-H1R: the last message's end-of-turn token has no newline after it.
    "no newline after the last turn": rewritten(
        "{{ message.content }}<|im_end|>\n{% elif message.role == 'assistant' %}",
        "{{ message.content }}<|im_end|>{% if not loop.last %}{{ '\\n' }}{% endif %}"
        "{% elif message.role == 'assistant' %}").replace(
        "</tool_call>{% endfor %}<|im_end|>\n", "</tool_call>{% endfor %}<|im_end|>{% if not loop.last %}"
                                               "{{ '\\n' }}{% endif %}"),
}


@pytest.mark.parametrize("how", list(REWRITING))
def test_a_template_that_rewrites_earlier_turns_is_followed(how):
    """The new messages' ids are what the template writes after the assistant's end-of-turn token, though the
    conversation before it reads differently once they are there (or the token is followed by other text)."""
    renderer = ChatTemplateRenderer(chat_tokenizer(chat_template=REWRITING[how]))
    tok = renderer.tokenizer
    messages = [*START, renderer.parse(tok.encode("<think>hmm</think>Hi.<|im_end|>"))]
    new = [Message("user", "again")]
    head = render(tok.hf, messages, generation_prompt=False)
    whole = render(tok.hf, [*messages, *new])
    assert whole.startswith(head) == (how == "no newline after the last turn")  # that one only adds a newline
    expected = whole[whole.index("<|im_start|>user\nagain"):]
    gap = "" if how == "no newline after the last turn" else "\n"
    assert tok.decode(renderer.extend(messages, new, TOOLS, closed=True)) == "\n" + expected
    assert tok.decode(renderer.extend(messages, new, TOOLS, closed=False)) == "<|im_end|>\n" + expected
    assert head.endswith("<|im_end|>" + gap)


def test_a_template_without_end_tokens_must_render_prefixes():
    plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}me:" \
            "{% endif %}"
    renderer = ChatTemplateRenderer(chat_tokenizer(chat_template=plain), tool_fallback="system_message")
    assert renderer.end_tokens == ("<|endoftext|>",)
    messages = [*START, renderer.parse(renderer.tokenizer.encode("Hi."))]
    assert renderer.tokenizer.decode(renderer.extend(messages, [Message("user", "again")], TOOLS, closed=False)) \
        == "user: again\nme:"
    with pytest.raises(ValueError, match="renders the conversation differently once messages follow it"):
        ChatTemplateRenderer(chat_tokenizer(chat_template="{{ messages | length }}" + plain),
                             tool_fallback="system_message")
    with pytest.raises(ValueError, match="must end with the assistant"):
        renderer.extend(START, [Message("user", "again")], TOOLS, closed=True)


def test_tool_call_ids_and_names_reach_the_template():
    message = Message("assistant", "", tool_calls=(ToolCall("craft", {"a": 1}, id="call_1"),))
    assert message_dict(message)["tool_calls"] == [
        {"type": "function", "function": {"name": "craft", "arguments": {"a": 1}}, "id": "call_1"}]
    assert message_dict(Message("tool", "ok", tool_call_id="call_1", name="craft")) == {
        "role": "tool", "content": "ok", "tool_call_id": "call_1", "name": "craft"}
    assert isinstance(HFTokenizer(chat_tokenizer()).vocab_size, int)


def test_llama_s_end_of_message_token_stops_a_completion_where_the_tokenizer_has_it():
    """After a ``<|python_tag|>`` call Llama 3.x writes ``<|eom_id|>``: a stop, or the call would run past it."""
    tokenizer = chat_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|eom_id|>"]})
    renderer = ChatTemplateRenderer(tokenizer, tool_call_parser="llama3_json")
    assert "<|eom_id|>" in renderer.end_tokens
    ids = renderer.tokenizer.encode('<|python_tag|>{"name": "craft", "parameters": {"target": "plank"}}<|eom_id|>')
    assert renderer.parse(ids).tool_calls == (ToolCall("craft", {"target": "plank"}),)
    assert "<|eom_id|>" not in ChatTemplateRenderer(chat_tokenizer()).end_tokens

