"""The simulated trainer, a part of ``SimRuntime`` (``platoon.sim.runtime``) split off for size.

The trainer waits for a step (``take_step``); an evaluation the schedule has before it (``eval.every``,
``eval.at_start``; and after the last step) takes ``sim.trainer.eval_s``, as live evaluates in its train loop; the
step trains for ``step_s + per_datum_s x datums``, its metrics row and checkpoint are written (``write_step``), and
its weights publish for ``publish_s``. Each of those is a span on the trace's ``trainer`` track (``eval``, ``train``,
``publish``), from ``trainer_since``, which the runtime's state keeps.

``TrainerMixin`` is mixed into ``SimRuntime``, whose attributes it uses: ``now``, ``driver``, ``pool``, ``learner``,
``cfg``, ``trainer_cfg``, ``trace``, ``version``, ``step``, ``trainer``, ``trainer_since``, ``done``, ``_stop``,
the hooks ``write_step`` and ``finish``, and its timers (``_at``) and decisions (``_carry``).
"""

from __future__ import annotations

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
        self._at(self.now + t.step_s + t.per_datum_s * len(self.step.datums), Timer.TRAINED)

    def _t_trained(self) -> None:
        step, self.step = self.step, None
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


__all__ = ["Trainer", "TrainerMixin"]
