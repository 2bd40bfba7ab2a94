"""Assemble the policy layer of one start of a run from its config: pool and the resolved samplers and admission
rules -> statistics, dispatcher, and the driver that holds them with the start limit and the member watch.

The samplers and rules arrive built from resolved classes (``platoon.components.build_policy`` resolves them and
calls ``assemble_policy``): this layer finds no plug-in. Both runtimes build through it; only the pool differs (the simulator's tasks are synthetic, the live backend's
come from its environments), so the driver they drive is the same object built the same way. A start's clock begins
at 0, or where its checkpoint's left off for a resumed live start (``now=``, ``begin_clock``): the dispatcher's time
and every metrics window begin there, so the first step after a resume is measured from the resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from platoon.config.config_warnings import config_warnings
from platoon.config.effective import effective_group_size, eval_concurrency, straggler_policy
from platoon.config.models import RunConfig
from platoon.config.steps import NO_PLAN, event_interval, planned_steps, steps_per_epoch
from platoon.policy.admission import AdmissionSet
from platoon.policy.dispatch_metrics import DispatchGauges
from platoon.policy.dispatcher import Dispatcher, dispatch_config
from platoon.policy.driver import Driver, Schedule
from platoon.policy.members import MemberWatch
from platoon.policy.pool import TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.runtime import SamplerSet
from platoon.policy.start_limit import StartLimit, start_timer_s


@dataclass
class PolicyLayer:
    """The policy-layer objects of one start of a run."""

    pool: TaskPool
    samplers: SamplerSet
    recorder: StatsRecorder
    admission: AdmissionSet
    dispatcher: Dispatcher
    driver: Driver


def assemble_policy(cfg: RunConfig, pool: TaskPool, samplers: SamplerSet, admission: AdmissionSet, *,
                    start: int = 1, rolling: bool = True, runtime: str = "sim", now: float = 0.0,
                    group_workflow: bool = True) -> PolicyLayer:
    """The driver and what it drives, built from ``cfg`` over ``pool`` with the run's ``samplers`` and
    ``admission`` (built from resolved classes). ``rolling``: the training workflow runs its rollouts on the lease;
    ``runtime`` (``sim`` or ``live``) is recorded in checkpoint rows; ``now``: the run's clock when this start
    begins (``begin_clock``); ``group_workflow``: the training workflow is a GroupRolloutWorkflow (the start
    limit's announcement warns when it is not)."""
    train = cfg.train
    recorder = StatsRecorder.for_pool(pool, start=start, group_size=effective_group_size(cfg))
    recorder.add_listener(samplers.observe)
    steps = planned_steps(cfg, len(pool.rows))
    if steps is None:
        raise ValueError(f"train: {NO_PLAN}")
    dispatcher = Dispatcher(dispatch_config(cfg, steps), pool, samplers, recorder, admission, rolling=rolling,
                            start=start)
    begin_clock(dispatcher, now=now)
    limit = train.max_starting_rollouts
    start_limit = (StartLimit(limit, timer_s=start_timer_s(train.workflow_config.worker_startup_budget_seconds))
                   if limit is not None else None)
    members = MemberWatch(policies=straggler_policies(cfg, pool))
    when = schedule(cfg, len(pool.rows))
    # live evaluation's rollouts take start slots beside training's (docs/start-limit.md)
    evaluates = runtime == "live" and (when.eval_every is not None or when.eval_at_start)
    driver = Driver(dispatcher, start_limit=start_limit, members=members, schedule=when, runtime=runtime,
                    group_workflow=group_workflow, config_warnings=tuple(config_warnings(cfg)),
                    eval_rollouts=eval_concurrency(cfg) if evaluates else 0)
    return PolicyLayer(pool, samplers, recorder, admission, dispatcher, driver)


def schedule(cfg: RunConfig, tasks: int) -> Schedule:
    """When the run evaluates and checkpoints, in steps (``eval``/``checkpoint`` over ``tasks`` training tasks)."""
    per_epoch = steps_per_epoch(cfg, tasks)
    ev, ck = cfg.eval, cfg.checkpoint
    recovery = None if ck.recovery_every is None else event_interval(ck.recovery_every, ck.strategy, per_epoch)
    return Schedule(eval_every=event_interval(ev.every, ev.strategy, per_epoch), eval_at_start=ev.at_start,
                    checkpoint_every=event_interval(ck.every, ck.strategy, per_epoch), recovery_every=recovery)


def straggler_policies(cfg: RunConfig, pool: TaskPool) -> Callable[[str, str], tuple[float | None, int | None]]:
    """``(entry, label) -> (timeout_s, quorum)`` of a group (``platoon.config.effective.straggler_policy``)."""
    index = {e.label: i for i, e in enumerate(cfg.environments)}
    return lambda entry, label: straggler_policy(cfg, index[entry], label)


def begin_clock(dispatcher: Dispatcher, *, now: float) -> None:
    """Begin the fresh ``dispatcher``'s clock at ``now`` rather than 0: its time and its gauges' windows (a resumed
    live start goes on from its checkpoint's ``clock_s``; docs/run-directory.md). Call it before building the
    ``Driver``, whose step window begins at the dispatcher's time. Time never goes backwards: an earlier ``now``
    than the dispatcher's is an error."""
    if now < dispatcher.now:
        raise ValueError(f"begin_clock: time went backwards: now={now} after {dispatcher.now}")
    dispatcher.now = now
    dispatcher.gauges = DispatchGauges(configured=dispatcher.gauges.configured, now=now)
