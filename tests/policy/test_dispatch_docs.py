"""The example of docs/dispatch.md runs as written."""

import re
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "dispatch.md"


def test_the_driving_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(blocks[-1], str(DOC), "exec"), {})
    tasks, fraction = capsys.readouterr().out.splitlines()
    assert len(eval(tasks.rsplit("]", 1)[0] + "]")) == 2 and tasks.endswith(" 4")
    assert 0 < float(fraction) <= 1
