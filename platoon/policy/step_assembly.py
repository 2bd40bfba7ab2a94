"""Step assembly: which settled groups a step takes, when it is complete, and the fates its groups get.

The ``Dispatcher`` owns the state (its ``queue``, ``step_items``, ``phase``, ``step``, ``version``); these functions
are the rules it applies to it between ``take_step`` and ``publish`` (docs/dispatch.md). Rules kept:

- **The phase table** (``TRANSITIONS``): ASSEMBLING --take_step--> TRAINING --commit_step--> COMMITTED --publish-->
  ASSEMBLING (or FINISHED after the last step). A call in the wrong phase raises, naming the call and the phase.
- **Taking a step.** Settled groups are dequeued in the order they settled until the horizon says the step is
  complete (``B`` groups, or under a rule ``B`` admitted or the cap counted); an admitted group past
  ``max_staleness`` turns stale as it is dequeued. The ``TrainStep`` lists each kind in draw order.
- **Committing it.** Fates are given in key order (consumed, stale, failed; a marker already has its fate), the
  admission counts and the samplers' consumption noted, then the stale and short-step warnings.
- **The version** moves only when a step updates the policy: an admitted group whose verdict trains (``uniform``
  too when ``uniform_groups_update``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from platoon.policy.dispatch_metrics import short_step_warning
from platoon.policy.dispatch_records import StepPhase
from platoon.policy.outputs import SettledGroup, SettledKind, TrainStep, draw_order

if TYPE_CHECKING:  # the dispatcher calls these with itself; only the type goes the other way
    from platoon.policy.dispatcher import Dispatcher

TRANSITIONS = {
    ("take_step", StepPhase.ASSEMBLING): StepPhase.TRAINING,
    ("commit_step", StepPhase.TRAINING): StepPhase.COMMITTED,
    ("publish", StepPhase.COMMITTED): StepPhase.ASSEMBLING,
}

_FATES = {"admitted": "consumed", "stale": "stale", "failed": "failed"}


def expect(d: Dispatcher, call: str) -> None:
    """Refuse ``call`` unless the transition table has it leave ``d``'s current phase."""
    if (call, d.phase) not in TRANSITIONS:
        needs = " or ".join(p.value for c, p in TRANSITIONS if c == call)
        raise RuntimeError(f"{call}: the dispatcher is {d.phase.value}, not {needs}")


def take_step(d: Dispatcher) -> TrainStep | None:
    """Dequeue settled groups toward the current step; the ``TrainStep`` once its batch is complete."""
    expect(d, "take_step")
    while d.queue and not d.horizon.step_complete():
        _dequeue(d, d.queue.popleft())
    if not d.horizon.step_complete():
        return None
    d.phase = TRANSITIONS["take_step", d.phase]
    by_kind: dict[str, list[SettledGroup]] = {"admitted": [], "stale": [], "failed": [], "marker": []}
    for item in d.step_items:
        by_kind[item.kind].append(item)
    admitted = draw_order(by_kind["admitted"])
    return TrainStep(d.step, d.version, admitted, draw_order(by_kind["stale"]),
                     draw_order(by_kind["failed"]), draw_order(by_kind["marker"]),
                     d.samplers.loss_weights([g.record for g in admitted]))


def _dequeue(d: Dispatcher, item: SettledGroup) -> None:
    kind = item.kind
    if kind == SettledKind.ADMITTED and d.horizon.is_stale(item, version=d.version):
        kind = SettledKind.STALE
    item = SettledGroup(item.key, item.task_id, item.entry, item.position, item.output, item.record, kind,
                        item.reason, item.window, item.held)
    d.horizon.dequeued(item, step=d.step)
    d.step_items.append(item)


def commit_step(d: Dispatcher) -> None:
    """The update is done: give the dequeued groups their fates and feed the statistics (in draw order)."""
    expect(d, "commit_step")
    d.phase = TRANSITIONS["commit_step", d.phase]
    consumed, stale = 0, 0
    for item in sorted(d.step_items, key=lambda g: g.key):
        if item.kind == "marker":
            continue
        d.recorder.fate(*item.key, _FATES[item.kind], task_id=item.task_id)
        d.outstanding.pop(item.key, None)
        consumed += 1
        stale += item.kind == "stale"
        if d.admission is not None:
            d.admission.note(item.kind, label=item.entry, reason=item.reason,
                             informative=item.record.verdict == "trained" if item.output is not None else None)
    d.samplers.note_consumed([g.record for g in d.step_items
                              if g.kind == "admitted" or (g.kind == "marker" and g.output is not None)])
    warning = d.stale_watch.note_step(consumed, stale, d.gauges.last_blocked, d.config.max_staleness)
    if warning:
        d.warn(warning)
    if d.admission is not None:
        short = short_step_warning(d.step_items, step=d.step, admitted=d.horizon.step_admitted,
                                   counted=d.horizon.step_counted, batch_size=d.config.batch_size,
                                   version=d.version)
        if short is not None:
            d.warn_once(f"{short[0]}_step", short[1])
    d.recorder.flush()


def next_version(d: Dispatcher) -> int:
    """One more than ``d.version`` once a step that updates the policy is taken, else ``d.version``."""
    trains = d.phase in (StepPhase.TRAINING, StepPhase.COMMITTED) and any(
        _updates(d, item) for item in d.step_items)
    return d.version + trains


def _updates(d: Dispatcher, item: SettledGroup) -> bool:
    """Whether an item of the step gives the update a nonzero objective (``DispatchConfig``)."""
    if item.kind != SettledKind.ADMITTED or item.output is None:
        return False
    verdict = item.output.verdict
    return verdict == "trained" or (d.config.uniform_groups_update and verdict == "uniform")


def publish(d: Dispatcher) -> bool:
    """New weights are live: move the version (unless the step updated nothing) and the step on; False once the
    run is FINISHED (nothing more may start), True when the next step is ASSEMBLING."""
    expect(d, "publish")
    d.version = next_version(d)
    d.step += 1
    d.horizon.published()
    d.step_items = []
    if d.step >= d.config.steps:
        d.phase = StepPhase.FINISHED
        return False
    d.phase = TRANSITIONS["publish", d.phase]
    return True
