"""docs/renderers.md's chat_template section against the code: its example runs, its tables name exactly the
parsers and attributes there are."""

import re
from pathlib import Path

from platoon.live.agent.chat_template import ATTRIBUTES, PARSERS

DOC = Path(__file__).parents[2] / "docs" / "renderers.md"


def section() -> str:
    text = DOC.read_text()
    start = text.index("## The `chat_template` renderer")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_the_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip() == "parsed"


def table_names(heading: str) -> set[str]:
    part = section().split(heading, 1)[1].split("\n\n", 2)[1]
    return {name for row in part.splitlines()[2:] for name in re.findall(r"`([\w-]+)`", row.split("|")[1])}


def test_the_tables_name_the_parsers_and_attributes():
    assert table_names("### Tool-call parsers") == set(PARSERS)
    assert table_names("### Attributes") == set(ATTRIBUTES)
