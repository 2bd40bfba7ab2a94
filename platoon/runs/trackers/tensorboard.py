"""TensorBoard: the run's event files under ``RUN/tensorboard`` (``tensorboard --logdir runs/`` shows every run).

Each row is one event of scalars (a metric's name as its tag, the row's step as its step), flushed as it is
written; a start counts the rows the event files hold (their events with a ``time``), so that a resume sends only
the others; the first start writes the config (lock.json's ``config``) and platoon's tags as a text summary,
``config``. Only ``tensorboard``'s own writer and protocol buffers are used: no TensorFlow, no torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TensorBoardTracker"]

LOGDIR = "tensorboard"


class TensorBoardTracker:
    name = "tensorboard"

    def open(self, run: Any, kept: Mapping[str, Any], log: Any) -> dict[str, Any]:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        held = _rows_held(run.path / LOGDIR)
        self._writer = EventFileWriter(str(run.path / LOGDIR))
        if not kept:
            text = (f"platoon {run.runtime} run; time: {run.time_axis}; tags: {', '.join(run.tags)}\n\n"
                    f"```json\n{json.dumps(run.params, indent=1, sort_keys=True)}\n```")
            self._writer.add_event(_text_event("config", text))
            self._writer.flush()
        return {"logdir": LOGDIR, "rows": held}

    def log(self, rows: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        for step, metrics in rows:
            values = [Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
            self._writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _rows_held(logdir: Any) -> int:
    """The rows the run's event files hold: their events with a ``time`` (every row has one; a record cut short by a
    kill is not read)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    held = 0
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            held += any(v.tag == "time" for v in event.summary.value)
    return held


def _text_event(tag: str, text: str) -> Any:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING
    from tensorboard.plugins.text.metadata import create_summary_metadata

    tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode()],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    value = Summary.Value(tag=tag, metadata=create_summary_metadata(display_name=tag, description=""), tensor=tensor)
    return Event(wall_time=time.time(), step=0, summary=Summary(value=[value]))
