"""The text environment protocol's own pieces: tool schemas, awaited calls, telling the protocols apart."""

import asyncio

from platoon.live.envs.text import Tool, ToolCall, ToolResult, acall, is_text_environment


class _Echo:
    tools = (Tool("echo", "Say it back", {"type": "object", "properties": {"text": {"type": "string"}}}),)

    def call(self, call):
        return ToolResult(call.arguments.get("text", ""))


class _AsyncEcho(_Echo):
    async def call(self, call):
        return ToolResult(call.arguments["text"].upper())


def test_tool_schema_is_the_function_form_chat_templates_take():
    schema = _Echo.tools[0].schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "echo"
    assert schema["function"]["parameters"]["properties"]["text"] == {"type": "string"}


def test_acall_answers_plain_and_awaitable_results():
    assert asyncio.run(acall(_Echo(), ToolCall("echo", {"text": "hi"}))).text == "hi"
    assert asyncio.run(acall(_AsyncEcho(), ToolCall("echo", {"text": "hi"}))).text == "HI"


def test_only_an_environment_that_says_so_speaks_text():
    class Text:
        speaks_text = True

    assert is_text_environment(Text())
    assert not is_text_environment(object())
