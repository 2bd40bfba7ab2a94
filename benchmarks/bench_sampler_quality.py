"""Does pass_rate give more informative groups than uniform, and how close does it get to the ceiling?

Five synthetic populations of 1,000 tasks (group size 8). Three have fixed pass rates: bimodal (most tasks nearly
always fail or nearly always pass, a tenth in between), Beta(0.3, 0.3), and mostly hard (four fifths nearly never
pass). Two more test what fixed rates cannot:

- learning: pass rates move as a learning policy's do, as in the simulator's learning model
  (``platoon.sim.learning``): ``p = sigmoid(ability + skill[task] - difficulty[task])``, difficulties ~ N(1.5, 2.5);
  every informative group adds 0.05 to its task's skill and 0.01 x 0.05 to the ability, applied when the policy
  version moves on. So the rates rise while the run goes, most where the sampler trains;
- graded: bimodal pass rates (drawn afresh) under a graded reward (as ``platoon-number-search``'s partial credit): a
  group whose rollouts all fail still trains unless their rewards happen to be alike (one time in ten); a group
  whose rollouts all pass never trains.

Each run draws 12,000 groups with 64 outstanding: a group settles (its members pass by Bernoulli(p)) in a random
order among those open, and a new one is drawn in its place; the policy version moves on every 64 settles. A group
is informative when it trains: with a binary reward, when it mixes passes and failures (``0 < passes < 8``).

Printed per population: the informative share of uniform, of pass_rate with platoon 0.4.0's evidence
(``evidence: versions``) and with the default (``evidence: drift``), each over all groups and over the second half
(once pass_rate has evidence), the default's ratio to 0.4.0's, the oracle's (pass_rate's contract and spread, with
every task's true chance to train: the most any pass_rate gets, exploration included), the oracle's blind to a task
until its first group settled (the most a pass_rate that learns a task's chance from one group gets), and for fixed
rates the
ceiling: what an oracle that knows every p gets under pass_rate's cap of 3 draws per task per pool-sized window
with no exploration (the top third of the tasks, each drawn three times).

``--seeds K`` repeats every run with K seeds (0..K-1) and prints the mean and the spread (min..max). ``--options
KEY=VALUE,...`` adds a column: pass_rate with those options (``importance_cap``'s loss weights scale what the learning
population learns from each group, over each version's trained groups as a step's are scaled). "of oracle" is a
column's share over the oracle's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import yaml

from platoon.components import sampler_set
from platoon.config.components import PassRateOptions
from platoon.experimental import task_sampler
from platoon.policy.pool import EntrySpec, TaskPool
from platoon.policy.recorder import StatsRecorder
from platoon.policy.samplers.pass_rate import PassRateSampler
from platoon.policy.samplers.runtime import Bound
from platoon.policy.stats import GroupRecord, MemberResult

N_TASKS = 1_000
GROUP = 8
GROUPS = 12_000
OPEN = 64
SEED = 0
SETTINGS = {"0.4.0": {"evidence": "versions"}, "default": {}}
"""pass_rate's options per column: platoon 0.4.0's evidence, and the default."""


class Population:
    """Tasks with pass rates; ``trains`` says whether a group with ``passes`` of ``GROUP`` trains."""

    fixed = True

    def __init__(self, rates: np.ndarray) -> None:
        self.rates = np.asarray(rates, dtype=float)

    def rate(self, i: int) -> float:
        return float(self.rates[i])

    def trains(self, i: int, passes: int, rng: np.random.Generator) -> bool:
        return 0 < passes < GROUP

    def trained(self, i: int, weight: float = 1.0) -> None:
        """Task ``i``'s group trained with loss weight ``weight`` (the learning population learns from it)."""

    def publish(self) -> None:
        """The policy version moved on."""


class Learning(Population):
    """``p = sigmoid(ability + skill - difficulty)``; each informative group raises its task's skill by ``GAIN``
    and the ability by ``GAIN x TRANSFER``, effective at the next version (the simulator's model)."""

    fixed = False
    GAIN, TRANSFER = 0.05, 0.01

    def __init__(self, difficulty: np.ndarray) -> None:
        self.difficulty = np.asarray(difficulty, dtype=float)
        self.skill = np.zeros(len(difficulty))
        self.ability = 0.0
        self.pending: list[int] = []
        super().__init__(self._rates())

    def _rates(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.ability + self.skill - self.difficulty)))

    def trained(self, i: int, weight: float = 1.0) -> None:
        self.pending.append((i, weight))

    def publish(self) -> None:
        for i, weight in self.pending:
            self.skill[i] += self.GAIN * weight
            self.ability += self.GAIN * self.TRANSFER * weight
        self.pending = []
        self.rates = self._rates()


class Graded(Population):
    """A graded reward: all failures still train unless their rewards are alike (chance ``ALIKE``)."""

    fixed = False
    ALIKE = 0.1

    def trains(self, i: int, passes: int, rng: np.random.Generator) -> bool:
        if passes == 0:
            return bool(rng.random() >= self.ALIKE)
        return passes < GROUP


ORACLE_POP: list[Population] = []
"""The population the oracle reads (the one being run)."""


@task_sampler("oracle", options=PassRateOptions)
class Oracle(PassRateSampler):
    """pass_rate's contract (its filters, cap, exploration and spread) with every task's true chance to train: the
    most any pass_rate can get from a population under that contract."""

    def _read(self, stats, idx):
        pop = ORACLE_POP[-1]
        p = np.clip(pop.rates[idx], 1e-12, 1.0 - 1e-12)
        u0 = Graded.ALIKE if isinstance(pop, Graded) else 1.0
        sharp = 1e9  # a posterior this sharp samples the rate itself
        return p * sharp, (1.0 - p) * sharp, np.ones(len(idx)), np.full(len(idx), u0), np.zeros(len(idx))


@task_sampler("oracle-one-look", options=PassRateOptions)
class OracleAfterOneLook(Oracle):
    """The oracle, blind to a task until its first group settles (until then it reads the default's prior): what a
    pass_rate that learned a task's exact chance from one group would get. The default's own inference is bounded
    by it."""

    def _read(self, stats, idx):
        a, b, u1, u0, w = super()._read(stats, idx)
        seen = self._model.seen(idx)
        prior_a, prior_b = self._model.prior(idx)
        return np.where(seen, a, prior_a), np.where(seen, b, prior_b), u1, u0, w


def populations(rng: np.random.Generator) -> dict[str, Callable[[], Population]]:
    """Each population's constructor (a fresh one per run: the learning one changes as it is trained)."""
    n = N_TASKS
    bimodal = np.concatenate(
        [
            rng.beta(0.5, 12, int(n * 0.45)),
            rng.beta(12, 0.5, int(n * 0.45)),
            rng.uniform(0.2, 0.8, n - 2 * int(n * 0.45)),
        ]
    )
    hard = np.concatenate([rng.beta(0.2, 25, int(n * 0.8)), rng.beta(2, 3, n - int(n * 0.8))])
    # The draws in 0.4.0's benchmark's order, so that the first three populations are its own.
    bimodal = rng.permutation(bimodal)
    beta = rng.beta(0.3, 0.3, n)
    hard = rng.permutation(hard)
    difficulty = rng.normal(1.5, 2.5, n)
    graded = rng.permutation(
        np.concatenate(
            [
                rng.beta(0.5, 12, int(n * 0.45)),
                rng.beta(12, 0.5, int(n * 0.45)),
                rng.uniform(0.2, 0.8, n - 2 * int(n * 0.45)),
            ]
        )
    )
    return {
        "bimodal": lambda: Population(bimodal),
        "beta(0.3,0.3)": lambda: Population(beta),
        "mostly hard": lambda: Population(hard),
        "learning": lambda: Learning(difficulty),
        "graded": lambda: Graded(graded),
    }


def informative_chance(p: np.ndarray) -> np.ndarray:
    return 1 - p**GROUP - (1 - p) ** GROUP


def ceiling(p: np.ndarray, cap: int = 3) -> float:
    q = np.sort(informative_chance(p))[::-1]
    return float(q[: int(np.ceil(len(q) / cap))].mean())


@dataclass(frozen=True)
class Result:
    """One run: the informative share over all groups, over the second half, and per draw reason
    (``explore``/``exploit``/...: that reason's share of the draws and the share of those draws that trained)."""

    share: float
    second_half: float
    by_reason: dict[str, tuple[float, float]]


def run(sampler: str, pop: Population, options: dict | None = None, seed: int = SEED) -> Result:
    """One run of ``sampler`` (with ``options``) on ``pop``."""
    ORACLE_POP[:] = [pop]
    ids = [f"t{i}" for i in range(len(pop.rates))]
    pool = TaskPool.from_entries([EntrySpec("synthetic", ids, GROUP, 1.0, 0)])
    rec = StatsRecorder.for_pool(pool)
    samplers = sampler_set(
        pool,
        run_sampler=sampler,
        run_options=dict(options or {}),
        entry_samplers={},
        batch_size=OPEN,
        seed=seed,
    )
    rec.add_listener(samplers.observe)  # as the runtime wires them (platoon.policy.assemble)
    rng = np.random.default_rng(seed + 1)
    open_: list[tuple[tuple[int, int], Bound, int]] = []
    step: list[tuple[int, GroupRecord]] = []  # this version's trained groups: the step the loss weights scale over
    informative: list[bool] = []
    reasons: list[str] = []
    seq = 0
    version = 0

    def draw() -> None:
        nonlocal seq
        if samplers.run_adaptive:
            bound = samplers.adaptive_decision(
                None, eligible=lambda t: True, view=rec.view(version), step=version, version=version
            )
        else:
            bound = samplers.static_decision(seq)
        if bound.reason == "fallback":  # the sampler raised or answered wrong: its numbers would be uniform's
            raise RuntimeError(f"{sampler} fell back at decision {seq}: {samplers.take_warnings()}")
        key = (1, seq)
        rec.draw(
            *key,
            bound.row.task_id,
            seq,
            version=version,
            sampler=bound.sampler,
            reason=bound.reason,
            score=bound.score,
        )
        open_.append((key, bound, version))
        seq += 1

    while seq < OPEN:
        draw()
    while len(informative) < GROUPS:
        key, bound, drawn_at = open_.pop(int(rng.integers(len(open_))))
        i = bound.row.index
        passes = rng.random(GROUP) < pop.rate(i)
        members = tuple(
            MemberResult(scored=float(x), valid=True, versions={"main": (drawn_at, drawn_at)}) for x in passes
        )
        trains = pop.trains(i, int(passes.sum()), rng)
        record = GroupRecord(*key, bound.row.task_id, entry="synthetic", members=members,
                             verdict="trained" if trains else "uniform", drawn_at={"main": drawn_at},
                             sampler=bound.sampler)
        if trains:
            step.append((i, record))
        rec.settle(record)
        rec.fate(*key, "consumed")
        informative.append(trains)
        reasons.append(bound.reason)
        if len(informative) % OPEN == 0:
            weights = samplers.loss_weights([r for _, r in step]) or (1.0,) * len(step)
            for (j, _), w in zip(step, weights, strict=True):
                pop.trained(j, w)
            step = []
            version += 1
            pop.publish()
            rec.flush()
        draw()
    share, why = np.array(informative), np.array(reasons)
    by_reason = {
        r: (float(np.mean(why == r)), float(share[why == r].mean())) for r in sorted(set(reasons))
    }
    return Result(float(share.mean()), float(share[len(share) // 2 :].mean()), by_reason)


def _cell(values: list[float]) -> str:
    mean = float(np.mean(values))
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ({min(values):.3f}..{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="runs per cell, seeds 0..K-1 (default 1)")
    parser.add_argument("--only", default=None, help="a comma-separated list of populations")
    parser.add_argument("--options", default=None,
                        help="pass_rate options for one more column, KEY=VALUE,... (e.g. importance_cap=2)")
    args = parser.parse_args()
    if args.options:
        SETTINGS["options"] = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.options.split(","))}
    seeds = list(range(SEED, SEED + args.seeds))
    print(
        f"informative-group share, {N_TASKS} tasks, group size {GROUP}, {GROUPS} groups, {OPEN} outstanding, "
        f"seeds {seeds[0]}..{seeds[-1]}"
    )
    head = [
        "population",
        "uniform",
        "pass_rate 0.4.0",
        "2nd half",
        "pass_rate",
        "2nd half",
        "ratio",
        "oracle",
        "of oracle",
        "after one look",
        "ceiling",
    ] + ([f"pass_rate {args.options}", "of oracle"] if args.options else [])
    print(" | ".join(head))
    only = set(args.only.split(",")) if args.only else None
    for name, make in populations(np.random.default_rng(SEED)).items():
        if only is not None and name not in only:
            continue
        uniform = [run("uniform", make(), seed=s).share for s in seeds]
        oracle = [run("oracle", make(), seed=s).share for s in seeds]
        one_look = [run("oracle-one-look", make(), seed=s).share for s in seeds]
        cells: dict[str, tuple[list[float], list[float]]] = {}
        for label, options in SETTINGS.items():
            results = [run("pass_rate", make(), options, seed=s) for s in seeds]
            cells[label] = ([r.share for r in results], [r.second_half for r in results])
        ratio = [d / v for d, v in zip(cells["default"][0], cells["0.4.0"][0], strict=True)]
        pop = make()
        top = f"{ceiling(pop.rates):.3f}" if pop.fixed else "-"
        row = [
            name,
            _cell(uniform),
            _cell(cells["0.4.0"][0]),
            _cell(cells["0.4.0"][1]),
            _cell(cells["default"][0]),
            _cell(cells["default"][1]),
            _cell(ratio),
            _cell(oracle),
            _cell([d / o for d, o in zip(cells["default"][0], oracle, strict=True)]),
            _cell(one_look),
            top,
        ]
        if "options" in cells:
            row += [_cell(cells["options"][0]),
                    _cell([d / o for d, o in zip(cells["options"][0], oracle, strict=True)])]
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
