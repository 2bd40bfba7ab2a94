"""The simulated trainer: the work of the cycle's ``Evaluate``, ``Train`` and ``Publish`` decisions on simulated time.

What this module owns (the order of the work is the driver's, ``platoon.policy.cycle``): an evaluation takes
``sim.trainer.eval_s`` and measures held-out pass@1 from the learning model (``platoon.sim.learning``) when it
learns; a step trains ``step_s + per_datum_s x datums`` of work, and what it trained reaches the learner; its weights
publish for ``publish_s``, after which the learner applies them; under ``train.inference.engine: vllm`` the engine's
servers pause for its last ``sim.service.pause_s`` (``platoon.sim.servers``: the ``SERVERS_PAUSED`` timer, a
``pause`` span on the model service's track) and go on as the new version goes live. Each of those is a span on the trace's ``trainer``
track (``eval``, ``train``, ``publish``), from ``since``, which the runtime's state keeps. The metrics only the
simulator knows go with each trained step (``sim/simulated_seconds``, ``sim/gpu_hours``,
``sim/train_pass_rate_mean``).

Sharing the machine with the model service (turns mode, ``service_slowdown`` k > 0): while the service runs a batch
the step's work is done at rate 1/(1 + k), else at rate 1 (processor sharing). ``Training`` keeps the work left at
``since`` and the rate since then; whenever the service starts or ends a batch (``service_changed``) the work done
since is taken off and the ``TRAINED`` timer is re-armed at ``now + work x (1 + k)`` (or ``now + work``). Only
training is slowed: ``publish_s`` and ``eval_s`` are what ``platoon calibrate`` measures live, contention included,
and the fit of k rests on ``train`` spans alone. Each end time is computed from the stored ``(work, since)``, and the
state stores them exactly, so a resumed run re-arms at the very times the uninterrupted one did. With k = 0 nothing
is re-armed: the step ends at ``now + step_s + per_datum_s x datums`` as it always has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from platoon.config.models import RunConfig
from platoon.policy import (
    Driver,
    Evaluate,
    Evaluated,
    Publish,
    Published,
    StepTrained,
    TaskPool,
    Train,
    TrainStep,
)
from platoon.runs.trace import SERVICE, TRAINER, TraceWriter
from platoon.sim.clock import TimerClock
from platoon.sim.learning import Learner
from platoon.sim.records import Timer
from platoon.sim.servers import Deployment
from platoon.sim.service import ModelService


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


class SimTrainer:
    """The trainer's work (see the module docstring); ``carry`` carries out what the driver answers."""

    def __init__(self, cfg: RunConfig, learner: Learner, pool: TaskPool, driver: Driver, clock: TimerClock, *,
                 carry: Callable[[list], None], service: ModelService | Deployment | None) -> None:
        self.t, self.gpus = cfg.sim.trainer, cfg.sim.gpus
        self.learner, self.pool, self.driver, self.clock, self.carry = learner, pool, driver, clock, carry
        self.service = service
        self.servers = service if isinstance(service, Deployment) else None
        self.pause_s = cfg.sim.service.pause_s if self.servers is not None else 0.0
        self.trace: TraceWriter | None = None
        self.since = clock.now  # when the trainer's current span (eval, train, publish) began
        self.step: TrainStep | None = None
        self.training: Training | None = None
        self.version = 0  # the policy version live now
        clock.on(Timer.EVALUATED, self._evaluated)
        clock.on(Timer.TRAINED, self._trained)
        clock.on(Timer.PUBLISHED, self._published)
        clock.on(Timer.SERVERS_PAUSED, self._servers_paused)

    @property
    def learns(self) -> bool:
        return any(self.learner.learn) and self.learner.pass_at_1() is not None

    # -------------------------------------------------------------------------------------------- decisions
    def evaluate(self, dec: Evaluate) -> None:
        self.since = self.clock.now
        if self.t.eval_s > 0:
            self.clock.at(self.clock.now + self.t.eval_s, Timer.EVALUATED, (dec.step,))
        else:
            self._evaluated(dec.step)

    def train(self, dec: Train) -> None:
        now = self.since = self.clock.now
        self.step = dec.step
        n, slowed = len(dec.step.datums), self._slowed()
        work = self.t.step_s + self.t.per_datum_s * n
        if slowed:
            end = now + work * (1.0 + self.t.service_slowdown)
        else:  # the sum as it always was (float addition is not associative): k = 0 changes no time
            end = now + self.t.step_s + self.t.per_datum_s * n
        self.training = Training(work, now, slowed, self.clock.at(end, Timer.TRAINED))

    def publish(self, dec: Publish) -> None:
        now = self.since = self.clock.now
        if self.pause_s > 0:
            self.clock.at(now + (self.t.publish_s - self.pause_s), Timer.SERVERS_PAUSED)
        self.clock.at(now + self.t.publish_s, Timer.PUBLISHED, (dec.version,))

    # ----------------------------------------------------------------------------------------------- timers
    def _evaluated(self, step: int) -> None:
        if self.trace is not None:
            self.trace.span("eval", TRAINER, self.since, self.clock.now, step=step)
        metrics = {"pass@1": self.learner.pass_at_1()} if self.learns else None
        self.carry(self.driver.handle(Evaluated(metrics), now=self.clock.now))

    def _trained(self) -> None:
        step, self.step, self.training = self.step, None, None
        now = self.clock.now
        if self.trace is not None:
            self.trace.span("train", TRAINER, self.since, now, step=step.step, datums=len(step.datums), tokens=0)
        trained = [(self.pool.first_index(g.task_id), w) for g, w in zip(step.groups, step.group_weights(), strict=True)
                   if g.output is not None and g.output.verdict == "trained"]
        self.learner.trained([r for r, _ in trained if r is not None], [w for r, w in trained if r is not None])
        metrics = {"sim/simulated_seconds": now, "sim/gpu_hours": now / 3600.0 * self.gpus,
                   "sim/train_pass_rate_mean": self.learner.mean_pass_rate()}
        if self.servers is not None:
            metrics.update(self.servers.take_metrics())
        self.carry(self.driver.handle(StepTrained(runtime=metrics), now=now))

    def _servers_paused(self) -> None:
        self.servers.pause()

    def _published(self, version: int) -> None:
        self.learner.publish()
        self.version = version
        now = self.clock.now
        if self.servers is not None:
            if self.trace is not None and self.pause_s > 0:
                self.trace.span("pause", SERVICE, self.servers.paused_at, now, version=version,
                                servers=len(self.servers.servers))
            self.servers.resume(now - self.since)
        if self.trace is not None:
            self.trace.span("publish", TRAINER, self.since, now, version=version)
        self.carry(self.driver.handle(Published(), now=self.clock.now))

    # ------------------------------------------------------------------------------------ the service's share
    def _slowed(self) -> bool:
        """Whether training is slowed now: service_slowdown set and the model service running a batch."""
        return self.t.service_slowdown > 0 and self.service is not None and self.service.busy

    def service_changed(self) -> None:
        """The model service may have started or ended a batch: a step in training under ``service_slowdown`` takes
        off the work done since its last change and is re-armed at its new rate (nothing when the rate stays)."""
        tr = self.training
        if tr is None or tr.slowed == (slowed := self._slowed()):
            return
        now, factor = self.clock.now, 1.0 + self.t.service_slowdown
        done = (now - tr.since) / factor if tr.slowed else now - tr.since
        tr.work, tr.since, tr.slowed = max(0.0, tr.work - done), now, slowed
        self.clock.cancel(tr.timer)
        tr.timer = self.clock.at(now + (tr.work * factor if slowed else tr.work), Timer.TRAINED)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"since": self.since, "training": None if self.training is None else self.training.to_json()}

    def load_state_dict(self, s: dict) -> None:
        self.since = s["since"]
        self.training = None if s["training"] is None else Training.from_json(s["training"])


__all__ = ["SimTrainer", "Training"]
