"""docs/rollout-workers.md says what the code does: its config example loads and acts, its messages are the code's."""

import json
import re
from pathlib import Path

import yaml
from config_kit import schema_config

from platoon.config.config_warnings import config_warnings

DOC = Path(__file__).parents[3] / "docs" / "rollout-workers.md"


def test_the_config_example_loads_and_every_key_acts():
    (block,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    workers = yaml.safe_load(block)["train"]["workflow_config"]
    cfg = schema_config([f"train.workflow_config={json.dumps(workers)}"])
    w = cfg.train.workflow_config
    assert (w.rollout_isolation, w.worker_start_method, w.worker_preload) == ("process", "forkserver",
                                                                              ["my_env.renderer"])
    assert config_warnings(cfg) == []
    assert w.worker_termination_grace_seconds == 10


def test_the_messages_it_quotes_are_the_codes():
    import platoon.live.workers.pool as pool
    import platoon.live.workers.preload as preload
    import platoon.live.workers.screen as screen

    text = DOC.read_text()
    code = Path(preload.__file__).read_text() + Path(screen.__file__).read_text() + Path(pool.__file__).read_text()
    assert "imported the worker's stack and" in text and "imported the worker's stack" in code
    assert "the rollout workers' fork server leaves out module" in text
    assert "the rollout workers' fork server leaves out {what}" in code and "which is not " in code
    for name in ("PLATOON_NODE_SCRATCH", "PBS_LOCALDIR", "SLURM_TMPDIR", "TMPDIR", "jemalloc_bg_thd", "WorkerDied"):
        assert name in text and name in code
