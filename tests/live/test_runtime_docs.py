"""The example of docs/live-runtime.md runs as written: a workflow of one's own trains a small run."""

import re
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "live-runtime.md"


def test_the_workflow_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(blocks[-1], str(DOC), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out == "[0, 1, 2, 3] True"


def test_the_names_it_documents_exist():
    import platoon.experimental as experimental
    import platoon.live as live
    from platoon.config.models import EMBEDDED_DEFAULT

    text = DOC.read_text()
    for name in ("rollout_lease", "RolloutLease"):
        assert name in experimental.__all__ and name in text
    for name in ("GroupRolloutWorkflow", "background_teardown", "build_live"):
        assert getattr(live, name) is not None and name in text
    assert "EMBEDDED_DEFAULT" in text and EMBEDDED_DEFAULT
