"""The example of docs/live-backend.md runs as written, and the names it documents exist."""

import re
from pathlib import Path

import pytest

from platoon.config import registry

DOC = Path(__file__).parents[2] / "docs" / "live-backend.md"


@pytest.fixture
def clean_registry():
    yield
    registry.unregister("environment", "copycat")


def test_the_environment_example_runs(capsys, clean_registry):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(blocks[-1], str(DOC), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "[False, False, False, False, False, True, False, False] trained 8 1.0 1"
    assert out[-2].startswith("EvalResult(pass_at_1=")
    assert out[-1] in DOC.read_text()


def test_the_defaults_it_documents():
    from platoon.live.envs import NumberSearch

    text = DOC.read_text()
    env = NumberSearch()
    assert f"{len(env.task_ids('train'))} training and {len(env.task_ids('val'))} held-out" in text
    assert f"{len(env.vocab)}-token vocabulary and contexts of at most {env.max_context_tokens} tokens" in text
    assert "`[4, 8, 12, 16, 24]`" in text and "`[-1, 0, 1, 2]`" in text
