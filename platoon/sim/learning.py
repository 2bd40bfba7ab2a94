"""The simulated tasks and the learning model: who passes, and how training changes it.

Each training task ``t`` of an entry ``e`` has a difficulty ``d[t]`` (a logit) and a skill ``s[t]`` (0 at first);
the policy has an ability ``a[e]`` per entry. A rollout of ``t`` passes with probability

    p[t] = sigmoid(a[e] + s[t] - d[t])

Every informative group (its valid rollouts mixed passes and failures) that a step *trains* adds ``gain`` to its
task's skill and ``gain x transfer`` to the ability of its entry, each times the group's loss weight (1 unless the
sampler weighs its draws, ``pass_rate``'s ``importance_cap``); the change takes effect when the step's weights
are published. Held-out tasks have difficulties of their own and no skill, so only the ability moves them: held-out
pass@1 is ``mean_h sigmoid(a[e] - d[h])`` over every entry's held-out tasks, computed exactly (no evaluation
rollouts). Groups that do not train (uniform, stale, rejected, failed) teach nothing, which is what makes a sampler
or an admission rule visible in ``eval/pass@1``. The logistic shape gives diminishing returns for free: a task that
is nearly always solved rarely yields a mixed group.

What live training shows that this leaves out, two keys of ``sim.learning`` put in (``platoon calibrate`` fits
both from a live run):

- **similarity groups** (``similar_by``: task columns, e.g. a prompt's range and guesses): a task of group ``L`` passes
  with ``sigmoid(a[e] + g[L] + s[t] - d[t])``, and each trained group adds ``label_gain`` (which may be negative) to
  ``g[L]``, so that training one task moves the others of its group, held-out ones included; the entry's training
  and held-out tasks are then its environment's train and eval splits (with their columns), each group's
  difficulty ``label_difficulty[L]`` (else the population's mean) spread by ``difficulty_sd``. Held-out pass@1 is
  the mean over every held-out task, each with its group's ``g[L]``: a sampler that trains a few groups raises
  those and leaves the rest where they were;
- **forgetting** (``forget_half_life``): a task's own skill halves every that many policy versions after it was
  last trained.

Where the tasks come from, per entry: a task file (``sim.tasks``: ids with fixed pass rates and optional length
multipliers; learning is off), else the entry's ``tasks`` ids, else its environment's training tasks when the entry
names an extension's environment (``platoon.sim.setup``: ids and columns, so that ``label_by`` reads them), else
``population.tasks`` synthesized ids ``<entry>/<n>``. Difficulties and length multipliers are drawn from the *entry's* seed and each task's id, so that
runs with different run seeds share one population, and a task keeps its difficulty wherever it is listed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    labels: list[str] | None = None  # each training task's similarity group (learning.similar_by)
    heldout_labels: list[str] | None = None  # each held-out task's

    @classmethod
    def build(cls, entry: str, sim: SimConfig, *, seed: int, task_ids: Sequence[str] | None,
              data: Sequence[dict] | None = None, heldout: tuple[Sequence[str], Sequence[dict]] | None = None,
              ) -> EntryTasks:
        """The entry's tasks from its (resolved) sim block: the task file, else ``task_ids`` (with ``data``, their
        columns, when given), else synthesized. ``heldout``: the held-out tasks' ids and columns, which
        ``learning.similar_by`` needs (with ``data``); ValueError naming a column a task lacks."""
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
        if sim.learning.similar_by is not None:
            return cls._grouped(entry, sim, seed, ids, data or [], heldout)
        difficulty = pop.difficulty_mean + pop.difficulty_sd * word_normals(seed, SALT_DIFFICULTY, words)
        length = _lengths(seed, sigma, words)
        heldout = pop.difficulty_mean + pop.difficulty_sd * _name_rng(seed, SALT_HELDOUT, entry).standard_normal(
            pop.heldout)
        rows = [dict(d) for d in data] if data is not None and task_ids else [{} for _ in ids]
        return cls(entry, ids, difficulty, length, None, heldout, rows)


    @classmethod
    def _grouped(cls, entry: str, sim: SimConfig, seed: int, ids: list[str], data: Sequence[dict],
                 heldout: tuple[Sequence[str], Sequence[dict]] | None) -> EntryTasks:
        """Tasks in similarity groups: each one's difficulty its group's (``label_difficulty``) spread by the
        population's sd, drawn from its id (training and held-out tasks alike)."""
        learning, pop = sim.learning, sim.population
        if heldout is None or len(data) != len(ids):
            raise ValueError("learning.similar_by needs the entry's tasks with their columns and its held-out tasks: "
                             "name an environment whose tasks carry those columns")
        held_ids, held_data = list(heldout[0]), list(heldout[1])
        labels, held_labels = group_names(data, learning.similar_by), group_names(held_data, learning.similar_by)
        means = dict(learning.label_difficulty or {})

        def difficulty(names: list[str], groups: list[str], salt: int) -> np.ndarray:
            centre = np.array([means.get(g, pop.difficulty_mean) for g in groups], dtype=float)
            return centre + pop.difficulty_sd * word_normals(seed, salt, name_words(names))

        length = _lengths(seed, sim.rollout.length_sigma, name_words(ids))
        return cls(entry, ids, difficulty(ids, labels, SALT_DIFFICULTY), length, None,
                   difficulty(held_ids, held_labels, SALT_HELDOUT), [dict(d) for d in data], labels, held_labels)

    def select(self, task_ids: Sequence[str]) -> EntryTasks:
        """These tasks only, in the order of ``task_ids`` (each one of this entry's)."""
        at = {t: i for i, t in enumerate(self.task_ids)}
        ix = [at[t] for t in task_ids]
        rate = None if self.fixed_rate is None else self.fixed_rate[ix]
        return EntryTasks(self.entry, list(task_ids), self.difficulty[ix], self.length[ix], rate, self.heldout,
                          [self.data[i] for i in ix], None if self.labels is None else [self.labels[i] for i in ix],
                          self.heldout_labels)


def _lengths(seed: int, sigma: float, words: np.ndarray) -> np.ndarray:
    """Each task's duration multiplier, ``exp(sigma z)`` with ``z`` drawn from its id (1 each when sigma is 0)."""
    if not sigma:
        return np.ones(len(words))
    # math.exp per task, not np.exp: numpy's vectorised exp may differ in the last bit.
    return np.array([math.exp(sigma * z) for z in word_normals(seed, SALT_LENGTH, words).tolist()])


def group_names(data: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[str]:
    """Each task's similarity group: its ``columns``' values joined by ``/``; ValueError naming a missing column."""
    out = []
    for row in data:
        missing = [c for c in columns if c not in row]
        if missing:
            raise ValueError(f"learning.similar_by: a task lacks column(s) {', '.join(missing)} (it has "
                             f"{', '.join(sorted(row)) or 'none'})")
        out.append("/".join(str(row[c]) for c in columns))
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class Learner:
    """Pass rates of the pool's rows under the learning model (see the module docstring).

    ``row_entry[r]`` is the index of pool row ``r``'s entry in ``entries``; ``row_task[r]`` the row's place in that
    entry's ``EntryTasks``. ``learn``, ``gain``, ``transfer``, ``initial_ability``, ``label_gain`` and
    ``forget_half_life`` are per entry; an entry that does not learn keeps its rates (a task file's, or the initial
    ones). Similarity groups are an entry's own (``EntryTasks.labels``).
    """

    def __init__(self, entries: Sequence[EntryTasks], row_entry: Sequence[int], row_task: Sequence[int], *,
                 learn: Sequence[bool], gain: Sequence[float], transfer: Sequence[float],
                 initial_ability: Sequence[float], label_gain: Sequence[float] | None = None,
                 forget_half_life: Sequence[float | None] | None = None) -> None:
        self.entries = list(entries)
        self.row_entry = np.asarray(row_entry, dtype=np.int64)
        row_task = np.asarray(row_task, dtype=np.int64)
        self.difficulty, length, self.fixed, self.fixed_mask = self._gather(row_task)
        self.length = length.tolist()
        self.learn = [bool(x) for x in learn]
        self.gain = [float(g) if on else 0.0 for g, on in zip(gain, self.learn, strict=True)]
        self.transfer = [float(t) for t in transfer]
        self.label_gain = [float(g) if on else 0.0 for g, on in zip(label_gain or [0.0] * len(self.entries),
                                                                      self.learn, strict=True)]
        self.half_life = list(forget_half_life or [None] * len(self.entries))
        self.row_group, self.heldout_group, self.group_names = self._groups(row_task)
        self.ability = np.asarray(initial_ability, dtype=float).copy()
        self.group_ability = np.zeros(len(self.group_names))
        self.skill = np.zeros(len(self.difficulty))
        self.last_trained = np.zeros(len(self.difficulty), dtype=np.int64)  # the version of each row's skill
        self.version = 0  # publishes so far
        self.pending_rows: list[int] = []  # informative groups trained, not yet published
        self.pending_weights: list[float] = []  # their loss weights
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

    def _groups(self, row_task: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[tuple[int, str]]]:
        """Each row's similarity group (-1: none), each entry's held-out tasks' groups, and the groups as
        (entry, name) in order of first appearance."""
        index: dict[tuple[int, str], int] = {}

        def code(e: int, name: str) -> int:
            return index.setdefault((e, name), len(index))

        row_group = np.full(len(row_task), -1, dtype=np.int64)
        held: list[np.ndarray] = []
        for e, entry in enumerate(self.entries):
            rows = np.flatnonzero(self.row_entry == e)
            if entry.labels is not None:
                row_group[rows] = [code(e, entry.labels[t]) for t in row_task[rows].tolist()]
            held.append(np.array([code(e, g) for g in entry.heldout_labels], dtype=np.int64)
                        if entry.heldout_labels is not None else np.full(len(entry.heldout), -1, dtype=np.int64))
        return row_group, held, list(index)

    def _group_term(self, groups: np.ndarray) -> np.ndarray:
        """``g[L]`` of each group code (0 for -1, no group)."""
        if not len(self.group_ability):
            return np.zeros(len(groups))
        return np.where(groups >= 0, self.group_ability[np.maximum(groups, 0)], 0.0)

    def _skill_now(self) -> np.ndarray:
        """Each row's skill at the current version, faded where its entry forgets."""
        if all(h is None for h in self.half_life):
            return self.skill
        halves = np.array([np.inf if h is None else h for h in self.half_life])[self.row_entry]
        return self.skill * np.power(2.0, -(self.version - self.last_trained) / halves)

    def _refresh(self) -> None:
        if len(self.difficulty) == 0:
            self._rates, self._rate_array = [], np.zeros(0)
            return
        with np.errstate(over="ignore", invalid="ignore"):
            logits = (self.ability[self.row_entry] + self._group_term(self.row_group) + self._skill_now()
                      - np.where(self.fixed_mask, 0.0, self.difficulty))
            self._rate_array = np.where(self.fixed_mask, self.fixed, sigmoid(logits))
        self._rates = self._rate_array.tolist()  # a list: a rollout reads one row, quicker from a list

    def pass_rate(self, row: int) -> float:
        """Row ``row``'s pass rate under the published policy."""
        return self._rates[row]

    def trained(self, rows: Sequence[int], weights: Sequence[float] | None = None) -> None:
        """A step trained informative groups of these pool rows (one entry per group), each with its loss weight
        (1 each by default); effective at ``publish``."""
        weights = [1.0] * len(rows) if weights is None else weights
        for r, w in zip(rows, weights, strict=True):
            if self.learn[self.row_entry[r]]:
                self.pending_rows.append(int(r))
                self.pending_weights.append(float(w))

    def publish(self) -> None:
        """The step's weights are live: apply what it trained (a new policy version)."""
        self.version += 1
        for r, w in zip(self.pending_rows, self.pending_weights, strict=True):
            e = self.row_entry[r]
            if self.half_life[e] is not None:  # what it had, faded to now, then the new gain
                self.skill[r] *= 2.0 ** (-(self.version - self.last_trained[r]) / self.half_life[e])
            self.skill[r] += self.gain[e] * w
            self.last_trained[r] = self.version
            self.ability[e] += self.gain[e] * self.transfer[e] * w
            if self.row_group[r] >= 0:
                self.group_ability[self.row_group[r]] += self.label_gain[e] * w
        trained = bool(self.pending_rows)
        self.pending_rows, self.pending_weights = [], []
        if trained or any(h is not None for h in self.half_life):
            self._refresh()

    def pass_at_1(self) -> float | None:
        """Held-out pass@1 of the published policy over every entry's held-out tasks; None without any."""
        total, n = 0.0, 0
        for i, e in enumerate(self.entries):
            if len(e.heldout):
                logits = self.ability[i] + self._group_term(self.heldout_group[i]) - e.heldout
                total += float(sigmoid(logits).sum())
                n += len(e.heldout)
        return total / n if n else None

    def mean_pass_rate(self) -> float:
        """The mean pass rate over the training rows (the population's, not weighted by draws)."""
        return float(self._rate_array.mean()) if self._rates else 0.0

    def state_dict(self) -> dict:
        """The learner's state. Skill is kept sparse (the rows that have any, and their skill): most rows of a large
        pool are never trained, and a dense list made every checkpoint of a pool of a million tasks 5 MB."""
        rows = np.flatnonzero(self.skill)
        state = {"ability": self.ability.tolist(), "skill_rows": rows.tolist(), "skill": self.skill[rows].tolist(),
                 "pending_rows": list(self.pending_rows)}
        if any(w != 1.0 for w in self.pending_weights):
            state["pending_weights"] = list(self.pending_weights)
        if len(self.group_ability):
            state["group_ability"] = self.group_ability.tolist()
        if any(h is not None for h in self.half_life):
            state["version"], state["last_trained"] = self.version, self.last_trained[rows].tolist()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Loads `state_dict`'s form, or a checkpoint's of an older release (``skill`` dense, without ``skill_rows``)."""
        self.ability = np.asarray(state["ability"], dtype=float)
        self.last_trained = np.zeros(len(self.difficulty), dtype=np.int64)
        if "skill_rows" in state:
            rows = np.asarray(state["skill_rows"], dtype=np.int64)
            self.skill = np.zeros(len(self.difficulty))
            self.skill[rows] = np.asarray(state["skill"], dtype=float)
            if "last_trained" in state:
                self.last_trained[rows] = np.asarray(state["last_trained"], dtype=np.int64)
        else:
            self.skill = np.asarray(state["skill"], dtype=float)
        self.version = int(state.get("version", 0))
        self.group_ability = np.asarray(state.get("group_ability", np.zeros(len(self.group_names))), dtype=float)
        self.pending_rows = [int(r) for r in state["pending_rows"]]
        self.pending_weights = [float(w) for w in state.get("pending_weights", [1.0] * len(self.pending_rows))]
        self._refresh()


__all__ = ["EntryTasks", "Learner", "TaskFileRow", "group_names", "read_task_file", "sigmoid"]
