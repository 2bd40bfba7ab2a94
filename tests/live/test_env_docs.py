"""The example of docs/writing-a-text-environment.md runs as written, and what docs/live-backend.md documents of the
built-in environment holds."""

import re
from pathlib import Path

import pytest

from platoon.config import registry

DOC = Path(__file__).parents[2] / "docs" / "live-backend.md"
EXAMPLE = Path(__file__).parents[2] / "docs" / "writing-a-text-environment.md"


@pytest.fixture
def clean_registry():
    yield
    registry.unregister("environment", "copycat")


def test_the_environment_example_runs(capsys, clean_registry):
    text = EXAMPLE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    exec(compile(blocks[-1], str(EXAMPLE), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "system: say word <eot> user: repeat blue <eot> assistant:" and f"`{out[0]}`" in text
    assert out[1].startswith("EvalResult(pass_at_1=")
    assert f"`{out[2]}`" in text


def test_the_defaults_it_documents():
    from platoon.live.envs import NumberSearch

    text = DOC.read_text()
    env = NumberSearch()
    assert f"{len(env.task_ids('train'))} training and {len(env.task_ids('val'))} held-out" in text
    assert f"{len(env.words)} words" in text
    assert "`[4, 8, 12, 16, 24]`" in text and "`[-1, 0, 1, 2]`" in text
