"""docs/scale-out.md says what the code does: its config example loads and acts, its messages are the code's."""

import json
import re
from pathlib import Path

import yaml
from config_kit import schema_config

from platoon.config.config_warnings import config_warnings

DOC = Path(__file__).parents[3] / "docs" / "scale-out.md"


def test_the_config_example_loads_and_every_key_acts():
    (block,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    train = yaml.safe_load(block)["train"]
    cfg = schema_config([f"train.workflow_config={json.dumps(train['workflow_config'])}",
                             f"train.ray={json.dumps(train['ray'])}"])
    assert cfg.train.workflow_config.rollout_isolation == "ray"
    assert (cfg.train.ray.actor_cpus, cfg.train.ray.max_actors, cfg.train.ray.start_timeout_seconds) == (1, None, 300)
    assert config_warnings(cfg) == []


def test_the_messages_it_quotes_are_the_codes():
    import platoon.live.workers.ray_pool as ray_pool

    text, code = DOC.read_text(), Path(ray_pool.__file__).read_text()
    for quoted, written in (("rollouts run on Ray actors (", "rollouts run on Ray actors ("),
                            ("each actor holds 1 CPU, at most 256 at once", "each actor holds "),
                            ("install the\nsame platoon on every node", "install the same {name} on every node"),
                            ("is lost: its rollouts failed, and rollouts\n  go on on the", "is lost: its rollouts "
                                                                                         "failed, and rollouts go on "
                                                                                         "on the "),
                            ("rollout_client/ray/node/", "rollout_client/ray/node/")):
        assert quoted in text and written in code, quoted
    for name in ("WorkerDied", "SPREAD", "start_timeout_seconds", "runtime_env"):
        assert name in text and name in code
