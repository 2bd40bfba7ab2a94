"""Kept groups in platoon 0.4.0's file format (platoon.runs.kept): what this platoon writes beside its dispatch state
and how a 0.4.0 Tinker datum maps to a live datum. tests/fixtures/v040/ours holds a dispatch state and kept file this
platoon wrote that 0.4.0's reader accepted (its README says how)."""

import base64
import gzip
import json
import struct
from pathlib import Path

import pytest

from platoon.runs.kept import add_kept_file, kept_bytes, live_datum, tinker_datum

OURS = Path(__file__).resolve().parents[1] / "fixtures" / "v040" / "ours"


def f4(values):
    return {"dtype": "float32", "shape": [len(values)],
            "f4": base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()}


def v040_datum(tokens, logprobs, advantages, mask=None):
    """A Tinker datum as 0.4.0's kept_groups encodes one (tokens but the last as input, loss inputs shifted)."""
    loss = {"target_tokens": {"dtype": "int64", "shape": [len(tokens) - 1], "data": tokens[1:]},
            "logprobs": f4(logprobs), "advantages": f4(advantages)}
    if mask is not None:
        loss["mask"] = f4(mask)
    return {"model_input": {"chunks": [{"tokens": tokens[:-1], "type": "encoded_text"}]}, "loss_fn_inputs": loss}


def test_a_live_datum_goes_to_tinker_and_back_exactly():
    datum = {"tokens": [3, 5, 7, 9, 2], "mask": [0, 0, 1, 1, 0], "logprobs": [0.0, 0.0, -0.5, -1.25, 0.0],
             "advantage": 0.75, "version": 3}
    encoded = tinker_datum(datum)
    assert encoded["model_input"]["chunks"][0]["tokens"] == [3, 5, 7, 9]
    assert encoded["loss_fn_inputs"]["target_tokens"]["data"] == [5, 7, 9, 2]
    assert live_datum(json.loads(json.dumps(encoded)), version=3) == datum
    # a value a float32 does not hold goes as float64, and still comes back exactly
    datum["logprobs"][2] = -0.1
    assert "f8" in tinker_datum(datum)["loss_fn_inputs"]["logprobs"]
    assert live_datum(tinker_datum(datum), version=3) == datum


def test_a_040_datum_maps_with_and_without_its_mask():
    with_mask = v040_datum([101, 7, 8, 9], [0.0, -0.5, -1.25], [0.0, 0.5, 0.5], mask=[0.0, 1.0, 1.0])
    ours = live_datum(with_mask, version=2, vocab_size=200)
    assert ours == {"tokens": [101, 7, 8, 9], "mask": [0, 0, 1, 1], "logprobs": [0.0, 0.0, -0.5, -1.25],
                    "advantage": 0.5, "version": 2}
    without = v040_datum([101, 7, 8, 9], [0.0, -0.5, -1.25], [0.0, 0.5, 0.5])
    assert live_datum(without, version=2) == ours


@pytest.mark.parametrize("datum, why", [
    (v040_datum([101, 7, 8], [-0.5, -0.5], [0.5, 0.5]), "beyond this model's vocabulary"),
    (v040_datum([1, 7, 8], [-0.5, -0.5], [0.5, -0.5]), "not one value"),
    ({"model_input": {"chunks": [{"type": "image", "data": "x"}]}, "loss_fn_inputs": {}}, "other than text"),
    ({**v040_datum([1, 2, 3], [-1.0, -1.0], [1.0, 1.0]),
      "loss_fn_inputs": {**v040_datum([1, 2, 3], [-1.0, -1.0], [1.0, 1.0])["loss_fn_inputs"], "weights": f4([1, 1])}},
     "loss inputs"),
    ({**v040_datum([1, 2, 3], [-1.0, -1.0], [1.0, 1.0]), "model_input": {"chunks": [{"tokens": [1, 4],
                                                                                         "type": "encoded_text"}]}},
     "not its input shifted"),
    ({"model_input": None}, "not a Tinker datum"),
])
def test_a_datum_of_another_shape_is_refused_with_the_reason(datum, why):
    with pytest.raises(ValueError, match=why):
        live_datum(datum, version=0, vocab_size=100)


def test_the_kept_file_is_a_function_of_its_groups():
    groups = [{"key": [1, 2], "entry": None, "label": None, "record": {}, "output": {"type": "failed"}}]
    assert kept_bytes(groups) == kept_bytes(json.loads(json.dumps(groups)))
    assert json.loads(gzip.decompress(kept_bytes(groups))) == {"format": 1, "groups": groups}


def test_a_checkpoint_without_kept_groups_gets_no_file():
    files = {"tasks/dispatch-000001.json": {"kept": None}}
    row = {"dispatch": {"file": "tasks/dispatch-000001.json"}}
    add_kept_file(files, row, "000001")
    assert list(files) == ["tasks/dispatch-000001.json"] and "kept" not in row["dispatch"]


def shape(value):
    """The structure of JSON data: keys and types, a list by the shapes of its items."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return ["list", *sorted({json.dumps(shape(v), sort_keys=True) for v in value})]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, int | float) else type(value).__name__


def test_the_writer_still_writes_what_040_accepted(tmp_path):
    """The fixture's command again: its dispatch state and kept file have the structure 0.4.0's reader accepted."""
    from platoon.live.launch.command import train

    run = tmp_path / "run"
    train(None, ["checkpoint.recovery_every=1", "train.batch_size=2", "train.workflow_config.group_size=2",
                 "train.max_concurrent_rollouts=4"], out=run, steps=2, progress=False)
    row = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()][1]
    record = json.loads((OURS / "dispatch-record.json").read_text())
    assert shape({k: v for k, v in row["dispatch"].items()}) == shape(record)
    base = run / row["path"]
    ours, fixture = (json.loads((d / record["file"]).read_text()) for d in (base, OURS))
    for state in (ours, fixture):  # the exact section is this platoon's own; the sampler states are the samplers'
        state.pop("exact")
        for rec in (state["samplers"]["run"], *state["samplers"]["entries"].values()):
            rec.pop("state", None)
    assert shape(ours) == shape(fixture)
    assert ours["samplers"]["run"]["class"] == fixture["samplers"]["run"]["class"] == (
        "platoon.train.samplers:UniformSampler")
    kept_ours, kept_fixture = (json.loads(gzip.decompress((d / state["kept"]["file"]).read_bytes()))
                               for d, state in ((base, ours), (OURS, fixture)))
    assert shape(kept_ours) == shape(kept_fixture)
    assert {g["output"]["type"] for g in kept_ours["groups"]} == {"group"}


def test_a_kept_group_lists_its_members_as_040_does():
    from platoon.policy.outputs import GroupOutput
    from platoon.policy.records import MemberResult
    from platoon.runs.kept import kept_group

    datum = {"tokens": [3, 5, 7], "mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.25], "advantage": 0.5, "version": 1}
    members = (MemberResult(reward=1.0, scored=1.0, valid=True, outcome="pass"),
               MemberResult(reward=0.0, scored=0.0, valid=False, outcome="invalid"))
    output = GroupOutput("trained", members, (datum,)).to_json()  # members as columns
    item = {"key": [1, 2], "entry": "e", "record": {}, "output": output}
    kept = kept_group(item)["output"]
    assert kept["members"] == [m.to_json() for m in members]
    assert (kept["requested_rollouts"], kept["trainable_rollouts"]) == (2, 1)
