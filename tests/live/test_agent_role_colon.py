"""role_colon: conversations to ids, completions to calls, and the renderer names train.renderer_name takes."""

from __future__ import annotations

import pytest

from platoon.live.agent.messages import Message
from platoon.live.agent.renderer import (
    Renderer,
    ends_with_stop,
    make_renderer,
    parse_completion,
    renderer_name_problem,
)
from platoon.live.agent.role_colon import RoleColonRenderer, call_text, parse_calls
from platoon.live.agent.tokenizer import TinyTokenizer
from platoon.live.envs.text import Tool, ToolCall

GUESS = Tool("guess", "guess a number", {"type": "object", "properties": {"number": {"type": "integer"}}})
CRAFT = Tool("craft", "craft an item", {"type": "object", "properties": {"ingredients": {}, "target": {}}})
FINISH = Tool("finish", "stop", {"type": "object", "properties": {"message": {"type": "string"}}}, terminal=True)
TOOLS = (GUESS, CRAFT, FINISH)
TOK = TinyTokenizer(["guess", "number", "higher", "8", "9", "16", "the", "from", "1", "to", "stick"])


def ids(text: str) -> list[int]:
    return TOK.encode(text)


def test_a_conversation_renders_as_role_colon_lines_ending_with_the_generation_prompt():
    r = make_renderer("role_colon", TOK)
    assert isinstance(r, Renderer) and isinstance(r, RoleColonRenderer)
    assert r.stop_sequences == ((TOK.token("<eot>"),),)
    got = r.prompt([Message("user", "the number from 1 to 16")], (GUESS,))
    assert got == ids("system: guess number <eot> user: the number from 1 to 16 <eot> assistant:")
    assert TOK.decode(got) == "system: guess number <eot> user: the number from 1 to 16 <eot> assistant:"
    with_system = r.prompt([Message("system", "the"), Message("user", "16")], ())
    assert with_system == ids("system: the <eot> user: 16 <eot> assistant:")


def test_extend_renders_the_new_messages_and_closes_a_turn_its_budget_cut():
    r = RoleColonRenderer(TOK)
    history = [Message("user", "16"), Message("assistant", tool_calls=(ToolCall("guess", {"number": 8}),))]
    new = [Message("tool", "higher 9 16", name="guess")]
    assert r.extend(history, new, (GUESS,), closed=True) == ids("tool: higher 9 16 <eot> assistant:")
    assert r.extend(history, new, (GUESS,), closed=False) == ids("<eot> tool: higher 9 16 <eot> assistant:")
    # a call in the history renders in the syntax a completion parses
    assert r.prompt(history, ()) == ids("user: 16 <eot> assistant: guess 8 <eot> assistant:")


def test_a_completion_whose_first_word_names_a_tool_is_a_call_with_positional_arguments():
    r = RoleColonRenderer(TOK)
    assert r.parse(ids("guess 8 <eot>"), TOOLS) == Message("assistant", tool_calls=(ToolCall("guess", {"number": 8}),))
    assert r.parse(ids("guess 8"), TOOLS).tool_calls == (ToolCall("guess", {"number": 8}),)  # cut by its budget
    crafted = r.parse(ids('craft {"stick": 2, "oak planks": 1} ["torch", 4] ; finish "all done"'), TOOLS)
    assert crafted.tool_calls == (ToolCall("craft", {"ingredients": {"stick": 2, "oak planks": 1},
                                                      "target": ["torch", 4]}),
                                  ToolCall("finish", {"message": "all done"}))
    assert parse_calls("finish stick", TOOLS) == (ToolCall("finish", {"message": "stick"}),)  # a bare word
    assert parse_calls("finish", TOOLS) == (ToolCall("finish", {}),)  # missing arguments: the tool says so


@pytest.mark.parametrize("text", ["the number", "guess 8 9", "nope 8", "", "guess 8 ; the"])
def test_plain_text_and_malformed_calls_make_no_call_and_stay_in_the_content(text):
    message = RoleColonRenderer(TOK).parse(ids(text), TOOLS)
    assert message == Message("assistant", text)


def test_parse_needs_the_tools_and_parse_completion_passes_them_when_it_can():
    r = RoleColonRenderer(TOK)
    assert r.parse(ids("guess 8")).tool_calls == ()
    assert parse_completion(r, ids("guess 8"), TOOLS).tool_calls == (ToolCall("guess", {"number": 8}),)

    class NoTools:
        def parse(self, completion):
            return Message("assistant", "seen")

    assert parse_completion(NoTools(), [1], TOOLS) == Message("assistant", "seen")


@pytest.mark.parametrize("value", [8, "stick", "oak planks", "8", ";", "", {"a": [1, "b c"]}, True, None, 2.5])
def test_a_call_renders_in_a_form_that_parses_back_to_it(value):
    call = ToolCall("finish", {"message": value})
    assert parse_calls(call_text(call), TOOLS) == (call,)


def test_ends_with_stop():
    assert ends_with_stop([3, 1, 2], [(1, 2)]) and ends_with_stop([2], [(9,), (2,)])
    assert not ends_with_stop([1], [(1, 2)]) and not ends_with_stop([], [(1,)])


def test_renderer_names():
    assert renderer_name_problem("role_colon") is None and renderer_name_problem("chat_template") is None
    assert renderer_name_problem("qwen3_instruct") is None  # 0.4.0's, rendered by the chat template
    assert "not a renderer here" in renderer_name_problem("nope")
    with pytest.raises(ValueError, match="nope"):
        make_renderer("nope", TOK)
    with pytest.raises(TypeError):
        make_renderer("role_colon", TOK, tool_call_parser="hermes")
