"""The simulated trainer, a part of ``SimRuntime`` (``platoon.sim.runtime``) split off for size.

The trainer waits for a step (``take_step``); an evaluation the schedule has before it (``eval.every``,
``eval.at_start``; and after the last step) takes ``sim.trainer.eval_s``, as live evaluates in its train loop; the
step trains ``step_s + per_datum_s x datums`` of work, its metrics row and checkpoint are written (``write_step``),
and its weights publish for ``publish_s``. Each of those is a span on the trace's ``trainer`` track (``eval``,
``train``, ``publish``), from ``trainer_since``, which the runtime's state keeps.

Sharing the machine with the model service (turns mode, ``service_slowdown`` k > 0): while the service runs a batch
the step's work is done at rate 1/(1 + k), else at rate 1 (processor sharing). ``Training`` keeps the work left at
``since`` and the rate since then; whenever the service starts or ends a batch (``_service_changed``) the work done
since is taken off and the ``TRAINED`` timer is re-armed at ``now + work x (1 + k)`` (or ``now + work``). Only
training is slowed: ``publish_s`` and ``eval_s`` are what ``platoon calibrate`` measures live, contention included,
and the fit of k rests on ``train`` spans alone. The service's hand-off between batches does not slow it: calibrate
measures the overlap with ``batch`` spans, which the hand-off lies between. Each end time is computed from the stored
``(work, since)``, and the state stores them exactly, so a resumed run re-arms at the very times the uninterrupted
one did. With k = 0 nothing is re-armed: the step ends at ``now + step_s + per_datum_s x datums`` as it always has.

``TrainerMixin`` is mixed into ``SimRuntime``, whose attributes it uses: ``now``, ``driver``, ``pool``, ``learner``,
``cfg``, ``trainer_cfg``, ``trace``, ``version``, ``step``, ``trainer``, ``trainer_since``, ``training``,
``service``, ``done``, ``_stop``, the hooks ``write_step`` and ``finish``, and its timers (``_at``,
``_cancel``) and decisions (``_carry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from platoon.runs.trace import TRAINER
from platoon.sim.records import Timer


class Trainer(Enum):
    """Where the trainer stands (its value is what checkpoints store)."""

    WAITING = "waiting"
    EVALUATING = "evaluating"
    TRAINING = "training"
    PUBLISHING = "publishing"
    DONE = "done"


@dataclass(slots=True)
class Training:
    """The step in training: ``work`` seconds of it left at time ``since``, done slower since then when ``slowed``
    (the model service running a batch); ``timer``: the seq of its ``TRAINED`` timer."""

    work: float
    since: float
    slowed: bool
    timer: int

    def to_json(self) -> list:
        return [self.work, self.since, self.slowed, self.timer]

    @classmethod
    def from_json(cls, d: list) -> Training:
        work, since, slowed, timer = d
        return cls(float(work), float(since), bool(slowed), int(timer))


class TrainerMixin:
    """The trainer's handlers (see the module docstring)."""

    def _try_step(self) -> None:
        if self.trainer is not Trainer.WAITING:
            return
        step, decisions = self.driver.take_step(now=self.now)
        self._carry(decisions)
        if step is None:
            return
        self.step = step
        if not self._evaluate(step.step):
            self._train()

    def _evaluate(self, step: int) -> bool:
        """The evaluation the schedule has before step ``step`` (``steps``: after the last), as live runs it in its
        train loop: True while it takes ``eval_s`` (its timer then goes on); False when none is due or it took no
        time (its span is written now)."""
        if not self.driver.eval_due(step):
            return False
        self.trainer_since = self.now
        if self.trainer_cfg.eval_s > 0:
            self.trainer = Trainer.EVALUATING
            self._at(self.now + self.trainer_cfg.eval_s, Timer.EVALUATED, (step,))
            return True
        if self.trace is not None:
            self.trace.span("eval", TRAINER, self.now, self.now, step=step)
        return False

    def _t_evaluated(self, step: int) -> None:
        if self.trace is not None:
            self.trace.span("eval", TRAINER, self.trainer_since, self.now, step=step)
        if self.step is None:
            self._end()
        else:
            self._train()

    def _train(self) -> None:
        self.trainer, self.trainer_since = Trainer.TRAINING, self.now
        t = self.trainer_cfg
        n, slowed = len(self.step.datums), self._slowed()
        work = t.step_s + t.per_datum_s * n
        if slowed:
            end = self.now + work * (1.0 + t.service_slowdown)
        else:  # the sum as it always was (float addition is not associative): k = 0 changes no time
            end = self.now + t.step_s + t.per_datum_s * n
        self.training = Training(work, self.now, slowed, self._at(end, Timer.TRAINED))

    def _slowed(self) -> bool:
        """Whether training is slowed now: service_slowdown set and the model service running a batch."""
        return self.trainer_cfg.service_slowdown > 0 and self.service is not None and self.service.started is not None

    def _service_changed(self) -> None:
        """The model service may have started or ended a batch: a step in training under ``service_slowdown`` takes
        off the work done since its last change and is re-armed at its new rate (nothing when the rate stays)."""
        tr = self.training
        if tr is None or tr.slowed == (slowed := self._slowed()):
            return
        factor = 1.0 + self.trainer_cfg.service_slowdown
        done = (self.now - tr.since) / factor if tr.slowed else self.now - tr.since
        tr.work, tr.since, tr.slowed = max(0.0, tr.work - done), self.now, slowed
        self._cancel(tr.timer)
        tr.timer = self._at(self.now + (tr.work * factor if slowed else tr.work), Timer.TRAINED)

    def _t_trained(self) -> None:
        step, self.step, self.training = self.step, None, None
        if self.trace is not None:
            self.trace.span("train", TRAINER, self.trainer_since, self.now, step=step.step, datums=len(step.datums),
                            tokens=0)
        rows = [self.pool.first_index(g.task_id) for g in step.groups
                if g.output is not None and g.output.verdict == "trained"]
        self.learner.trained([r for r in rows if r is not None])
        report = self.driver.finish_step(step, now=self.now, metrics=self.sim_metrics(step.step))
        self.trainer, self.trainer_since = Trainer.PUBLISHING, self.now
        self._at(self.now + self.trainer_cfg.publish_s, Timer.PUBLISHED)
        if self.write_step is not None:
            self.write_step(report, self.now)

    def sim_metrics(self, step: int) -> dict[str, float]:
        """The metrics only the simulator knows, and ``eval/pass@1`` from its learning model when it is due."""
        out = {"sim/simulated_seconds": self.now, "sim/gpu_hours": self.now / 3600.0 * self.cfg.sim.gpus,
               "sim/train_pass_rate_mean": self.learner.mean_pass_rate()}
        if self.learns and self.driver.eval_due(step):
            out["eval/pass@1"] = self.learner.pass_at_1()
        return out

    @property
    def learns(self) -> bool:
        return any(self.learner.learn) and self.learner.pass_at_1() is not None

    def _t_published(self) -> None:
        self.learner.publish()
        decisions = self.driver.publish(now=self.now)
        self.version = self.driver.dispatcher.version  # a step that trained no group leaves it
        if self.trace is not None:
            self.trace.span("publish", TRAINER, self.trainer_since, self.now, version=self.version)
        self._carry(decisions)
        if self.driver.finished:
            if not self._evaluate(self.driver.steps):
                self._end()
            return
        self.trainer = Trainer.WAITING
        self._try_step()

    def _end(self) -> None:
        """The plan is done (the final evaluation too): the run directory finishes, and the loop stops."""
        self.trainer, self.done = Trainer.DONE, True
        if self.finish is not None:
            self.finish(self.now)
        self._stop.succeed()


__all__ = ["Trainer", "TrainerMixin", "Training"]
