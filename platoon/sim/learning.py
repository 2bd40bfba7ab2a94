"""The simulated tasks and the learning model: who passes, and how training changes it.

Each training task ``t`` of an entry ``e`` has a difficulty ``d[t]`` (a logit) and a skill ``s[t]`` (0 at first);
the policy has an ability ``a[e]`` per entry. A rollout of ``t`` passes with probability

    p[t] = sigmoid(a[e] + s[t] - d[t])

Every informative group (its valid rollouts mixed passes and failures) that a step *trains* adds ``gain`` to its
task's skill and ``gain x transfer`` to the ability of its entry; the change takes effect when the step's weights
are published. Held-out tasks have difficulties of their own and no skill, so only the ability moves them: held-out
pass@1 is ``mean_h sigmoid(a[e] - d[h])`` over every entry's held-out tasks, computed exactly (no evaluation
rollouts). Groups that do not train (uniform, stale, rejected, failed) teach nothing, which is what makes a sampler
or an admission rule visible in ``eval/pass@1``. The logistic shape gives diminishing returns for free: a task that
is nearly always solved rarely yields a mixed group.

Where the tasks come from, per entry: a task file (``sim.tasks``: ids with fixed pass rates and optional length
multipliers; learning is off), else the entry's ``tasks`` ids, else its environment's training tasks when the entry
names an extension's environment (``platoon.sim.setup``: ids and columns, so that ``label_by`` reads them), else
``population.tasks`` synthesized ids ``<entry>/<n>``. Difficulties and length multipliers are drawn from the *entry's* seed and each task's id, so that
runs with different run seeds share one population, and a task keeps its difficulty wherever it is listed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from platoon.config.sim import SimConfig
from platoon.config.sim_files import TaskFileRow, read_task_file
from platoon.sim.seeded_normals import name_words, word_normals

SALT_DIFFICULTY = 0x0510_0002
SALT_LENGTH = 0x0510_0003
SALT_HELDOUT = 0x0510_0004


def _name_rng(seed: int, salt: int, name: str) -> np.random.Generator:
    """A generator that depends only on the entry's seed, a salt and a name (a task id, an entry's name)."""
    word = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")
    return np.random.default_rng([int(seed) % (1 << 64), salt, word])


def _task_normal(seed: int, salt: int, task_id: str) -> float:
    return float(_name_rng(seed, salt, task_id).standard_normal())


@dataclass
class EntryTasks:
    """One entry's simulated tasks: training ids, their difficulties (or fixed pass rates) and lengths, and the
    difficulties of its held-out tasks."""

    entry: str
    task_ids: list[str]
    difficulty: np.ndarray
    length: np.ndarray
    fixed_rate: np.ndarray | None
    heldout: np.ndarray
    data: list[dict] = field(default_factory=list)

    @classmethod
    def build(cls, entry: str, sim: SimConfig, *, seed: int, task_ids: Sequence[str] | None,
              data: Sequence[dict] | None = None) -> EntryTasks:
        """The entry's tasks from its (resolved) sim block: the task file, else ``task_ids`` (with ``data``, their
        columns, when given), else synthesized."""
        pop = sim.population
        sigma = sim.rollout.length_sigma
        if sim.tasks is not None:
            rows = read_task_file(sim.tasks)
            ids = [r.task_id for r in rows]
            rates = np.array([r.pass_rate for r in rows], dtype=float)
            with np.errstate(divide="ignore"):
                difficulty = -np.log(rates / (1.0 - rates))
            return cls(entry, ids, difficulty, np.array([r.length for r in rows], dtype=float), rates,
                       np.zeros(0), [r.data for r in rows])
        ids = list(task_ids) if task_ids else [f"{entry}/{n}" for n in range(pop.tasks)]
        words = name_words(ids)
        difficulty = pop.difficulty_mean + pop.difficulty_sd * word_normals(seed, SALT_DIFFICULTY, words)
        # math.exp per task, not np.exp: numpy's vectorised exp may differ in the last bit.
        length = (np.array([math.exp(sigma * z) for z in word_normals(seed, SALT_LENGTH, words).tolist()])
                  if sigma else np.ones(len(ids)))
        heldout = pop.difficulty_mean + pop.difficulty_sd * _name_rng(seed, SALT_HELDOUT, entry).standard_normal(
            pop.heldout)
        rows = [dict(d) for d in data] if data is not None and task_ids else [{} for _ in ids]
        return cls(entry, ids, difficulty, length, None, heldout, rows)


    def select(self, task_ids: Sequence[str]) -> EntryTasks:
        """These tasks only, in the order of ``task_ids`` (each one of this entry's)."""
        at = {t: i for i, t in enumerate(self.task_ids)}
        ix = [at[t] for t in task_ids]
        rate = None if self.fixed_rate is None else self.fixed_rate[ix]
        return EntryTasks(self.entry, list(task_ids), self.difficulty[ix], self.length[ix], rate, self.heldout,
                          [self.data[i] for i in ix])


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class Learner:
    """Pass rates of the pool's rows under the learning model (see the module docstring).

    ``row_entry[r]`` is the index of pool row ``r``'s entry in ``entries``; ``row_task[r]`` the row's place in that
    entry's ``EntryTasks``. ``learn``, ``gain``, ``transfer`` and ``initial_ability`` are per entry; an entry that
    does not learn keeps its rates (a task file's, or the initial ones).
    """

    def __init__(self, entries: Sequence[EntryTasks], row_entry: Sequence[int], row_task: Sequence[int], *,
                 learn: Sequence[bool], gain: Sequence[float], transfer: Sequence[float],
                 initial_ability: Sequence[float]) -> None:
        self.entries = list(entries)
        self.row_entry = np.asarray(row_entry, dtype=np.int64)
        self.difficulty, length, self.fixed, self.fixed_mask = self._gather(np.asarray(row_task, dtype=np.int64))
        self.length = length.tolist()
        self.learn = [bool(x) for x in learn]
        self.gain = [float(g) if on else 0.0 for g, on in zip(gain, self.learn, strict=True)]
        self.transfer = [float(t) for t in transfer]
        self.ability = np.asarray(initial_ability, dtype=float).copy()
        self.skill = np.zeros(len(self.difficulty))
        self.pending_rows: list[int] = []  # informative groups trained, not yet published
        self._rates: list[float] = []
        self._rate_array = np.zeros(0)
        self._refresh()

    def _gather(self, row_task: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per pool row, from its entry's task ``row_task[r]``: difficulty, length, fixed rate (0 where the entry
        has none) and whether it has one; one gather per entry, not a Python step per row."""
        n = len(row_task)
        difficulty, length, fixed, fixed_mask = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
        for i, entry in enumerate(self.entries):
            rows = self.row_entry == i
            at = row_task[rows]
            difficulty[rows], length[rows] = entry.difficulty[at], entry.length[at]
            if entry.fixed_rate is not None:
                fixed[rows], fixed_mask[rows] = entry.fixed_rate[at], True
        return difficulty, length, fixed, fixed_mask

    def _refresh(self) -> None:
        if len(self.difficulty) == 0:
            self._rates, self._rate_array = [], np.zeros(0)
            return
        with np.errstate(over="ignore", invalid="ignore"):
            logits = self.ability[self.row_entry] + self.skill - np.where(self.fixed_mask, 0.0, self.difficulty)
            self._rate_array = np.where(self.fixed_mask, self.fixed, sigmoid(logits))
        self._rates = self._rate_array.tolist()  # a list: a rollout reads one row, quicker from a list

    def pass_rate(self, row: int) -> float:
        """Row ``row``'s pass rate under the published policy."""
        return self._rates[row]

    def trained(self, rows: Sequence[int]) -> None:
        """A step trained informative groups of these pool rows (one entry per group); effective at ``publish``."""
        self.pending_rows.extend(int(r) for r in rows if self.learn[self.row_entry[r]])

    def publish(self) -> None:
        """The step's weights are live: apply what it trained."""
        if not self.pending_rows:
            return
        for r in self.pending_rows:
            e = self.row_entry[r]
            self.skill[r] += self.gain[e]
            self.ability[e] += self.gain[e] * self.transfer[e]
        self.pending_rows = []
        self._refresh()

    def pass_at_1(self) -> float | None:
        """Held-out pass@1 of the published policy over every entry's held-out tasks; None without any."""
        total, n = 0.0, 0
        for i, e in enumerate(self.entries):
            if len(e.heldout):
                total += float(sigmoid(self.ability[i] - e.heldout).sum())
                n += len(e.heldout)
        return total / n if n else None

    def mean_pass_rate(self) -> float:
        """The mean pass rate over the training rows (the population's, not weighted by draws)."""
        return float(self._rate_array.mean()) if self._rates else 0.0

    def state_dict(self) -> dict:
        """The learner's state. Skill is kept sparse (the rows that have any, and their skill): most rows of a large
        pool are never trained, and a dense list made every checkpoint of a pool of a million tasks 5 MB."""
        rows = np.flatnonzero(self.skill)
        return {"ability": self.ability.tolist(), "skill_rows": rows.tolist(), "skill": self.skill[rows].tolist(),
                "pending_rows": list(self.pending_rows)}

    def load_state_dict(self, state: dict) -> None:
        """Loads `state_dict`'s form, or a checkpoint's of an older release (``skill`` dense, without ``skill_rows``)."""
        self.ability = np.asarray(state["ability"], dtype=float)
        if "skill_rows" in state:
            self.skill = np.zeros(len(self.difficulty))
            self.skill[np.asarray(state["skill_rows"], dtype=np.int64)] = np.asarray(state["skill"], dtype=float)
        else:
            self.skill = np.asarray(state["skill"], dtype=float)
        self.pending_rows = [int(r) for r in state["pending_rows"]]
        self._refresh()


__all__ = ["EntryTasks", "Learner", "TaskFileRow", "read_task_file", "sigmoid"]
