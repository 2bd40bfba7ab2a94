"""A run's trackers read back, each with its own library, as ``{metric name: [(step, value), ...]}`` in the order
logged, beside what ``metrics.jsonl`` says they should hold (``expected``).

- TensorBoard: its ``EventAccumulator`` over ``RUN/tensorboard`` (values are float32 there);
- W&B: the offline run files ``RUN/wandb/offline-run-*/run-<id>.wandb``, each record decoded with W&B's own
  protocol buffers (``wandb.proto.wandb_internal_pb2.Record``; W&B 0.31 reads these files in its Go core only, so
  their framing is walked by ``platoon.runs.trackers.wandb.records``);
- MLflow: its client's ``get_metric_history`` on the run's store (names as MLflow takes them).
"""

from __future__ import annotations

import json
from pathlib import Path


def expected(run: Path, *, mlflow_names: bool = False) -> dict[str, list[tuple[int, float]]]:
    from platoon.runs import read_jsonl

    out: dict[str, list[tuple[int, float]]] = {}
    for row in read_jsonl(run / "metrics.jsonl"):
        for k, v in row.items():
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool):
                out.setdefault(_mlflow_name(k) if mlflow_names else k, []).append((row["step"], float(v)))
    return out


def tensorboard(run: Path) -> tuple[dict[str, list[tuple[int, float]]], str]:
    """The scalars, and the text of the ``config`` summary."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = [t for t in acc.Tags()["tensors"] if t == "config"]
    text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode() if texts else ""
    return scalars, text


def wandb_records(run: Path) -> list:
    from platoon.runs.trackers.wandb import records

    state = json.loads((run / "trackers.json").read_text())
    return records(run / "wandb", state["wandb"]["run_id"])


def wandb_history(run: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for record in wandb_records(run):
        if record.WhichOneof("record_type") != "history":
            continue
        step = record.history.step.num
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            if not key.startswith("_"):
                out.setdefault(key, []).append((step, float(json.loads(item.value_json))))
    return out


def mlflow_history(run: Path, run_id: str, uri: str | None = None) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri or f"sqlite:///{run / 'mlflow.db'}")
    names = client.get_run(run_id).data.metrics
    return {k: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, k), key=lambda m: m.timestamp)]
            for k in names}


def _mlflow_name(name: str) -> str:
    from platoon.runs.trackers.mlflow import metric_name

    return metric_name(name)
