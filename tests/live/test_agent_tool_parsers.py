"""The tool-call parsers (``platoon.live.agent.tool_parsers``) on each family's own output forms: single and parallel
calls, strings holding the delimiters, calls drafted inside reasoning (never taken), malformed calls (text, no
crash)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platoon.live.agent.tool_parsers import PARSERS, mistral_call_id, outside_reasoning, parse
from platoon.live.envs.text import ToolCall

pytestmark = pytest.mark.live

CRAFT = ToolCall("craft", {"target": "plank", "n": 4})
FINISH = ToolCall("finish", {"message": "done </tool_call> [TOOL_CALLS] ``` }"})


def names(calls):
    return [(c.name, dict(c.arguments)) for c in calls]


def hermes(call: ToolCall) -> str:
    return f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"


def test_hermes_takes_every_block_even_with_delimiters_in_its_strings():
    text = f"I craft first.\n{hermes(CRAFT)}\n{hermes(FINISH)}"
    calls, rest = parse("hermes", text)
    assert names(calls) == names([CRAFT, FINISH]) and rest == "I craft first."


@pytest.mark.parametrize("parser", ["hermes", "qwen3_coder", "deepseek_v3"])
def test_a_call_drafted_while_reasoning_is_not_taken_and_the_reasoning_stays(parser):
    drafts = {"hermes": hermes(FINISH),
              "qwen3_coder": "<tool_call>\n<function=finish>\n<parameter=message>\nx\n</parameter>\n</function>\n"
                             "</tool_call>",
              "deepseek_v3": '<｜tool▁call▁begin｜>finish<｜tool▁sep｜>{"message": "x"}<｜tool▁call▁end｜>'}
    real = {"hermes": hermes(CRAFT),
            "qwen3_coder": "<tool_call>\n<function=craft>\n<parameter=target>\nplank\n</parameter>\n"
                           "<parameter=n>\n4\n</parameter>\n</function>\n</tool_call>",
            "deepseek_v3": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>craft<｜tool▁sep｜>{"target": "plank", "n": 4}'
                           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}
    reasoning = f"<think>\nMaybe I should just call\n{drafts[parser]}\nno, craft first.\n</think>"
    calls, rest = parse(parser, f"{reasoning}\n\n{real[parser]}")
    assert names(calls) == names([CRAFT])
    assert rest == reasoning
    # a template that opens the block in its generation prompt: the completion holds only its end
    calls, rest = parse(parser, f"{reasoning.removeprefix('<think>')}\n\n{real[parser]}")
    assert names(calls) == names([CRAFT])
    # still thinking at the end: nothing is a call
    assert parse(parser, f"<think>\n{drafts[parser]}")[0] == []


def test_reasoning_markers_are_the_renderers_to_name():
    text = f"[THINK]{hermes(FINISH)}[/THINK]{hermes(CRAFT)}"
    assert names(parse("hermes", text, markers=[("[THINK]", "[/THINK]")])[0]) == names([CRAFT])
    assert names(parse("hermes", text, markers=[])[0]) == names([FINISH, CRAFT])


def test_llama3_json_takes_the_whole_message_or_what_follows_the_python_tag():
    one = '{"name": "craft", "parameters": {"target": "plank", "n": 4}}'
    assert names(parse("llama3_json", one)[0]) == names([CRAFT])
    two = f'{one}; {{"name": "finish", "parameters": {json.dumps(FINISH.arguments)}}}'
    assert names(parse("llama3_json", two)[0]) == names([CRAFT, FINISH])
    tagged = f"Let me craft.<|python_tag|>{one}"
    assert parse("llama3_json", tagged) == ([ToolCall("craft", {"target": "plank", "n": 4})], "Let me craft.")
    prose = 'The answer is {"name": "craft"} in JSON.'
    assert parse("llama3_json", prose) == ([], prose)
    assert parse("llama3_json", '{"name": "craft", "parameters": {"target": ')[0] == []  # cut off: text


def test_pythonic_takes_a_list_of_calls_with_literal_arguments_only():
    text = '[craft(target="plank", n=4), finish(message="done </tool_call> [TOOL_CALLS] ``` }")]'
    assert names(parse("pythonic", text)[0]) == names([CRAFT, FINISH])
    assert names(parse("pythonic", "<|python_tag|>view_inventory()")[0]) == [("view_inventory", {})]
    for bad in ("[craft(__import__('os').system('x'))]", "[craft(target=open('f'))]", "craft(1)", "just words"):
        assert parse("pythonic", bad) == ([], bad)


def test_mistral_takes_both_forms_with_ids_its_template_accepts():
    v3 = f'[TOOL_CALLS] [{json.dumps({"name": "craft", "arguments": CRAFT.arguments})}, ' \
         f'{json.dumps({"name": "finish", "arguments": FINISH.arguments})}]'
    calls, rest = parse("mistral", v3)
    assert names(calls) == names([CRAFT, FINISH]) and rest == ""
    assert all(re.fullmatch(r"[a-zA-Z0-9]{9}", c.id) for c in calls) and calls[0].id != calls[1].id
    assert [c.id for c in parse("mistral", v3)[0]] == [c.id for c in calls]  # the same completion, the same ids
    v11 = f'[TOOL_CALLS]craft[ARGS]{json.dumps(CRAFT.arguments)}[TOOL_CALLS]finish[ARGS]{json.dumps(FINISH.arguments)}'
    assert names(parse("mistral", v11)[0]) == names([CRAFT, FINISH])
    assert parse("mistral", "[TOOL_CALLS] [{\"name\": ")[0] == []
    assert mistral_call_id("x", 0) != mistral_call_id("x", 1)


def test_deepseek_takes_its_fenced_and_its_v3_1_blocks():
    fenced = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>craft\n```json\n"
              f"{json.dumps(CRAFT.arguments)}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
              f"finish\n```json\n{json.dumps(FINISH.arguments)}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    calls, rest = parse("deepseek_v3", "Crafting." + fenced)
    assert names(calls) == names([CRAFT, FINISH]) and rest == "Crafting."


def test_qwen3_coder_reads_json_values_and_keeps_text_ones():
    text = ("<tool_call>\n<function=craft>\n<parameter=target>\nplank\n</parameter>\n<parameter=n>\n4\n</parameter>\n"
            "</function>\n</tool_call>")
    assert names(parse("qwen3_coder", text)[0]) == names([CRAFT])


@given(st.text(max_size=200))
def test_no_parser_raises_and_plain_prose_is_never_a_call(text):
    for name in PARSERS:
        calls, rest = parse(name, text)
        assert isinstance(rest, str)
    assert parse("hermes", text.replace("<tool_call>", ""))[0] == []


def test_the_pieces_of_reasoning_and_answer_make_the_text_again():
    text = "a</think>b<think>c</think>d<think>e"
    pieces = outside_reasoning(text)
    assert "".join(p for _, p in pieces) == text
    assert pieces == [(True, "a</think>"), (False, "b"), (True, "<think>c</think>"), (False, "d"), (True, "<think>e")]
