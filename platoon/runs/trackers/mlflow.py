"""MLflow: a run in a tracking store, by default a SQLite database under the run directory (``RUN/mlflow.db``).

``stats.mlflow.tracking_uri`` names another store (an MLflow server's URL, another database): runs that share one sit
side by side. MLflow's file store (``file:``), in maintenance mode since MLflow 3, cannot hold a metric whose name is
also a group of others (``train/sampler/draws`` beside ``train/sampler/draws/explore``): the config refuses it. The first start creates the experiment (when new) and the run, with the config
flattened to dotted keys as its parameters and platoon's tags (``platoon.runtime``, ``platoon.time``,
``platoon.sweep``); its run id is kept in ``RUN/trackers.json``, and a resume sets the same run running again. A
metric's name keeps to what MLflow takes (letters, digits, ``_ - . / : `` and spaces): ``@`` is written ``_at_``
(``eval/pass@1`` is ``eval/pass_at_1``), any other character ``_``. MLflow 3 keeps its file store for those who ask
(``MLFLOW_ALLOW_FILE_STORE``): platoon asks for its default store, the light ``mlflow-skinny`` client serving it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["MlflowTracker", "flat_params", "metric_name"]

_REFUSED = re.compile(r"[^/\w.\- :]")
BATCH = 1000  # MLflow's most metrics in one call (and 100 parameters)
STORE = "mlflow.db"


class MlflowTracker:
    name = "mlflow"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def open(self, run: Any, kept: Mapping[str, Any], log: Any) -> dict[str, Any]:
        from mlflow.entities import Param, RunStatus
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # their start-up chatter (creating the database's tables) is not the run's
            logging.getLogger(name).setLevel(logging.WARNING)
        uri = self.cfg.tracking_uri or f"sqlite:///{run.path / STORE}"
        self._client = client = MlflowClient(tracking_uri=uri)
        if kept.get("run_id"):
            self._run_id = kept["run_id"]
            client.update_run(self._run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            # the rows it holds: every row has a time, and a batch is stored whole or not at all
            return {"run_id": self._run_id, "rows": len(client.get_metric_history(self._run_id, "time"))}
        name = self.cfg.experiment or run.experiment
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        tags = {"platoon.runtime": run.runtime, "platoon.time": run.time_axis}
        if run.group is not None:
            tags["platoon.sweep"] = run.group
        self._run_id = client.create_run(experiment_id, run_name=self.cfg.run_name or run.name,
                                         tags=tags).info.run_id
        params = [Param(k, v) for k, v in flat_params(run.params)]
        for i in range(0, len(params), 100):
            client.log_batch(self._run_id, params=params[i:i + 100])
        return {"run_id": self._run_id, "rows": 0}

    def log(self, rows: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        for batch in _batches(rows):
            self._client.log_batch(self._run_id, metrics=batch)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def _batches(rows: Sequence[tuple[int, Mapping[str, float]]]) -> Iterator[list[Any]]:
    """The rows' metrics in calls of at most ``BATCH``, each call whole rows (a row longer than that alone, split),
    each row's ``time`` last: a row whose ``time`` is stored is stored whole."""
    from mlflow.entities import Metric

    stamp, batch = int(time.time() * 1000), []
    for step, row in rows:
        metrics = [Metric(metric_name(k), v, stamp, step) for k, v in sorted(row.items(), key=lambda kv: kv[0] == "time")]
        if batch and len(batch) + len(metrics) > BATCH:
            yield batch
            batch = []
        while len(metrics) > BATCH:
            yield metrics[:BATCH]
            metrics = metrics[BATCH:]
        batch += metrics
    if batch:
        yield batch


def metric_name(name: str) -> str:
    """``name`` as MLflow takes it (see the module's doc)."""
    return _REFUSED.sub("_", name.replace("@", "_at_"))


def flat_params(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """The config's leaves as (dotted key, value as text): a list or an empty mapping as JSON."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flat_params(value, path + ".")
        else:
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            yield metric_name(path), text[:6000]
