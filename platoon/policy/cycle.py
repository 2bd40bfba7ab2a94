"""The step cycle: what a run does next, between its rollouts, as decisions a runtime carries out.

What this module owns (docs/architecture.md, "The step cycle"): the order of a run's trainer-side work, written once
for every runtime. A runtime never decides what comes next: it tells the ``Driver`` what happened (``on_evaluated``,
``on_trained``, ``on_published``, with ``now=``) and asks ``Driver.poll(now=)`` whenever it has nothing left to
carry out; the answer is the next decisions, in the order they must be carried out:

- ``SaveCheckpoint``: write a full checkpoint (its files and row are the policy layer's; a runtime adds its own
  files, a run session the log lengths);
- ``Evaluate(step)``: measure held-out pass@1 of the policy step ``step`` trains from (``step == steps``: the final
  policy); ``Train(step)``: train the ``TrainStep``; ``WriteRow(row)``: append a row to ``metrics.jsonl``;
  ``Publish(version)``: make the new weights live; ``Finish(steps)``: the plan is done (the run records its end);
- ``Abort(reason)``: no progress is possible (nothing runs, nothing is due, the batch cannot complete; or groups
  failed in a row): the runtime stops with ``reason``, the same words in each runtime.

The cycle's states and the event that leaves each are a transition table (``TRANSITIONS``), as h11 keeps its
protocol: an event in a state that has no entry for it raises ``CycleError`` naming both.

```
LAUNCHING  --poll: SaveCheckpoint (the launch save)----------> STARTING  (FINAL when every step is done)
STARTING   --poll: the dispatcher's first StartGroups--------> WAITING
WAITING    --poll, once a group settled: starts; the batch---> STEP_READY  (or Abort: nothing can complete it)
STEP_READY --poll: Evaluate(step) | Train(step)--------------> EVALUATING | TRAINING
EVALUATING --on_evaluated--> EVALUATED --poll: Train(step)--> TRAINING
TRAINING   --on_trained--> COMMITTED --poll: WriteRow, [SaveCheckpoint], Publish--> PUBLISHING
PUBLISHING --on_published: the dispatcher's starts----------> WAITING | FINAL (after the last step)
FINAL      --poll: Evaluate(steps) | [WriteRow,] Finish-----> FINAL_EVALUATING | FINISHED
FINAL_EVALUATING --on_evaluated--> FINAL_EVALUATED --poll: [WriteRow,] Finish--> FINISHED
```

A checkpoint's driver state records STARTING (the launch save: a resume starts the dispatcher) or PUBLISH_DUE (a
step's: a resume publishes its weights first).

Rules it keeps:

- **Starts before work.** The starts a step's dequeues allow are answered by one poll and the step's ``Evaluate`` or
  ``Train`` by the next, so a runtime carries out every start (and what it leads to) before it begins the step.
- **Rows.** A step's row is the dispatcher's and the driver's metrics, then the runtime's own (``sim/...``, the
  workflow's), then the trainer's under ``trainer/``, then the step's evaluation under ``eval/`` (its start-limit
  metrics included); a value that is not a finite number is written as null. The final evaluation's row is
  ``{"step": steps, "time": ..., "eval/...": ...}``, written only when it measured something.
- **Checkpoints.** Every start of a run saves at launch, before it draws (kept for good at step 0, a recovery
  checkpoint after that); a step's checkpoint is captured right after its row, before its weights are published,
  and a resume from it publishes them (``PUBLISH_DUE`` is what it records).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from platoon.policy.outputs import TrainStep


class CycleError(RuntimeError):
    """An event the cycle cannot take in its state."""


class CycleState(Enum):
    LAUNCHING = "launching"
    STARTING = "starting"
    WAITING = "waiting"
    STEP_READY = "step_ready"
    EVALUATING = "evaluating"
    EVALUATED = "evaluated"
    TRAINING = "training"
    COMMITTED = "committed"
    PUBLISH_DUE = "publish_due"
    PUBLISHING = "publishing"
    FINAL = "final"
    FINAL_EVALUATING = "final_evaluating"
    FINAL_EVALUATED = "final_evaluated"
    FINISHED = "finished"


S = CycleState
#: ``(state, event) -> state``: the events a runtime feeds and where they lead; every other state moves on a poll
#: (``Driver.poll``: the decisions it answers in each state are the driver's ``_POLLS``).
TRANSITIONS: dict[tuple[CycleState, str], CycleState] = {
    (S.EVALUATING, "on_evaluated"): S.EVALUATED,
    (S.FINAL_EVALUATING, "on_evaluated"): S.FINAL_EVALUATED,
    (S.TRAINING, "on_trained"): S.COMMITTED,
    (S.PUBLISHING, "on_published"): S.WAITING,
}


@dataclass(frozen=True)
class SaveCheckpoint:
    """Decision: write full checkpoint ``name`` of ``done`` steps: ``files`` (name -> JSON-safe data or bytes) and
    its ``checkpoints.jsonl`` row, captured when it was decided; ``permanent``: kept for good."""

    name: str
    done: int
    files: dict[str, object]
    row: dict[str, Any]
    permanent: bool


@dataclass(frozen=True)
class Evaluate:
    """Decision: evaluate the policy step ``step`` trains from (``final``: the policy after the last step)."""

    step: int
    final: bool = False


@dataclass(frozen=True)
class Train:
    """Decision: train ``step`` (its datums, at its version)."""

    step: TrainStep


@dataclass(frozen=True)
class WriteRow:
    """Decision: append ``row`` (``step``, ``time`` and the metrics, nulls for non-finite values) to metrics.jsonl."""

    row: dict[str, Any]


@dataclass(frozen=True)
class Publish:
    """Decision: make the trained weights live as policy ``version``; ``on_published`` once they are."""

    version: int


@dataclass(frozen=True)
class Finish:
    """Decision: the plan's ``steps`` are done, the final evaluation too: record the run's end and stop."""

    steps: int
    start: int


@dataclass(frozen=True)
class Abort:
    """Decision: no progress is possible; stop the run with ``reason``, in these words in every runtime. ``cause``:
    ``stalled`` (nothing runs, nothing is due, the batch cannot complete) or ``failures`` (groups failed in a row,
    ``platoon.policy.failures``)."""

    reason: str
    cause: str = "stalled"


#: The cycle's decisions, the ones ``Driver.poll`` answers (a part of ``platoon.policy.decisions.Decision``).
CycleDecision = SaveCheckpoint | Evaluate | Train | WriteRow | Publish | Finish | Abort
CYCLE_DECISIONS = (SaveCheckpoint, Evaluate, Train, WriteRow, Publish, Finish, Abort)


def step_row(step: int, now: float, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A ``metrics.jsonl`` row: ``step``, ``time``, then the metrics, a value that is not a finite number as null."""
    row: dict[str, Any] = {"step": step, "time": now}
    for k, v in metrics.items():
        row[k] = None if isinstance(v, float) and not math.isfinite(v) else v
    return row


def prefixed(prefix: str, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metrics`` with ``prefix`` on every name that does not carry it already."""
    return {(k if k.startswith(prefix) else prefix + k): v for k, v in (metrics or {}).items()}


class Cycle:
    """Where the step cycle stands (see the module docstring); the ``Driver`` drives it and answers its decisions."""

    def __init__(self) -> None:
        self.state = CycleState.LAUNCHING
        self.step: TrainStep | None = None  # the step being evaluated for, or trained
        self.eval_metrics: dict[str, Any] = {}
        self.wake = True  # a group settled (or the cycle began, or a step published) since the last look

    def expect(self, *states: CycleState, event: str) -> None:
        if self.state not in states:
            raise CycleError(f"{event} in cycle state {self.state.value}")

    def go(self, event: str) -> None:
        """Take ``event`` along the transition table."""
        to = TRANSITIONS.get((self.state, event))
        if to is None:
            raise CycleError(f"{event} in cycle state {self.state.value}")
        self.state = to

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe. A checkpoint takes it where no step is in hand: STARTING (the launch save) or PUBLISH_DUE."""
        return {"state": self.state.value}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state = CycleState(state["state"])
        self.step, self.eval_metrics, self.wake = None, {}, True


__all__ = ["Abort", "CYCLE_DECISIONS", "Cycle", "CycleDecision", "CycleError", "CycleState", "Evaluate", "Finish",
           "Publish", "SaveCheckpoint", "TRANSITIONS", "Train", "WriteRow", "prefixed", "step_row"]
