"""``pass_rate``: Thompson sampling on each task's pass-rate posterior, for groups that mix passes and failures.

Adaptive (asked only when a group can start), at run or entry level. Over the pool's ``N`` distinct task ids in
listing order, decision ``d`` (its window is ``d // N``; ``previous`` survives only into the next window):
1. ``pool`` = the eligible tasks; none: answer None;
2. with statistics: (a) drop the tasks that wait for their first result (a draw outstanding, no group yet), then
   (b) with ``max_outstanding_per_task``, keep tasks with fewer outstanding draws; a filter that would leave
   nothing keeps instead the tasks of the current pool with the fewest outstanding draws;
3. window cap: with ``max_draws_per_epoch``, keep tasks drawn fewer times in this window; if none, keep the pool
   (the cap is "lifted");
4. live statistics only: with chance ``1 - explore``, *exploit*: over the pool minus the tasks without evidence
   (``no_evidence_streak >= 3``), at most ``candidates`` of them chosen at random, draw ``p ~ Beta(alpha, beta)``
   per task and take the best ``1 - p^G - (1 - p)^G`` (G: the task's group size), ties at random;
5. otherwise *explore*: the least recently drawn task (never drawn counts as -1), ties at random;
6. the score is ``informative_at(alpha, beta, G)`` of the chosen task (None without statistics).

That is ``evidence: versions``, 0.4.0's: ``(alpha, beta)`` is the statistics' posterior, evidence halving every 32
versions. Under ``evidence: drift`` (the default) step 4 differs in three ways (``platoon.policy.samplers.drift``):
``(alpha, beta)`` is the drift model's posterior, fed by `observe` (a task it has not seen reads the statistics'
where they hold evidence of it); the score is ``1 - u1 p^G - u0 (1 - p)^G``, ``u1``/``u0`` the entry's recent share
of all-pass/all-fail groups that came out uniform (1 and 1 with a binary reward: 0.4.0's score); and *near-best
spread*: the Thompson sample competes only among the candidates whose expected chance (`informative_chance`) is
within ``near_best`` (0.05) of the best candidate's, and among those only the ones drawn fewest times in this window:
the best sampled score of that set is drawn (`_spread`).

Options beside the contract (each off by default): ``explore_order: reshuffled`` explores a random task not yet
drawn in the window instead of the least recently drawn; ``forget_versions`` fades a task's drift evidence with the
policy versions since it came; ``importance_cap`` gives each drawn task a loss weight (`loss_weight`), the ratio of
its share under uniform draws to its share of this sampler's recent draws, capped.

Departure from platoon 0.4.0 (documented, deliberate): 0.4.0 draws its coin, sample and Beta variates from
``random.Random(key)`` one task at a time. Here they come from ``numpy.random.default_rng(key)`` in whole arrays,
so that a decision over a million tasks costs a few milliseconds: the coin (``random()``), then the candidates
(``choice(..., replace=False, shuffle=False)``, or rejection sampling when they are a small part of a pool that is
most of ``N``), then one Beta
draw per candidate, then ties by ``integers``. It stays a deterministic function of (seed, qualified name,
decision count, state, statistics, eligibility), which is what exact resume needs; it does not replay 0.4.0's draws
bit for bit, which DESIGN does not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from platoon.config.components import PassRateOptions
from platoon.policy.samplers.base import Draw, Sampler, SamplerContext, SamplerSetup, TaskStatsView
from platoon.policy.samplers.drift import PRIOR_STRENGTH as DRIFT_PRIOR
from platoon.policy.samplers.drift import DriftModel, informative_chance
from platoon.policy.stats import PRIOR_STRENGTH, GroupRecord, informative_at

_NEVER = np.iinfo(np.int64).max
SPREAD = PassRateOptions.model_fields["near_best"].default
"""``evidence: drift``'s exploit draws, by default, among the candidates whose expected chance to train is within this
of the best candidate's, those drawn fewest times in this window first (see `PassRateSampler._spread`)."""
_STATE_KEYS = ("last_drawn", "window", "window_draws", "previous_window_draws")


class _Keep:
    """The decision's pool as a bool mask over the ids, copied on first write, with its count kept by hand (so that
    knocking out a few tasks costs O(few), not O(N))."""

    __slots__ = ("mask", "count", "_owned")

    def __init__(self, mask: np.ndarray) -> None:
        self.mask, self.count, self._owned = mask, int(np.count_nonzero(mask)), False

    def knock_out(self, indices: np.ndarray) -> None:
        """Remove ``indices`` (each now in the pool, no repeats)."""
        if indices.size:
            if not self._owned:
                self.mask, self._owned = self.mask.copy(), True
            self.mask[indices] = False
            self.count -= int(indices.size)

    def only(self, indices: np.ndarray) -> None:
        self.mask, self._owned = np.zeros(len(self.mask), dtype=bool), True
        self.mask[indices] = True
        self.count = int(indices.size)


def _filter(
    keep: _Keep, busy: np.ndarray, out: np.ndarray, drop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Drop ``busy[drop]`` from the pool; if that would leave nothing, keep instead the pool's tasks with the fewest
    outstanding draws (then all in ``busy``). ``busy``/``out``: the pool's tasks with draws outstanding."""
    removed = busy[drop]
    if removed.size < keep.count:
        keep.knock_out(removed)
        return busy[~drop], out[~drop]
    fewest = out == out.min()
    keep.only(busy[fewest])
    return busy[fewest], out[fewest]


class PassRateSampler(Sampler):
    """Thompson sampling for informative groups, with exploration and a per-window cap; see the module doc."""

    adaptive = True
    entry_slots = False
    options_schema = PassRateOptions

    def __init__(
        self, setup: SamplerSetup, options: PassRateOptions | Mapping[str, Any] | None = None
    ) -> None:
        if options is None or isinstance(options, Mapping):
            options = PassRateOptions.model_validate(dict(options or {}))
        super().__init__(setup, options)
        self.ids = setup.unique_ids
        n = self._n = len(self.ids)
        if n == 0:
            raise ValueError(f"{setup.name}: pass_rate has no tasks to draw")
        self._index: dict[str, int] | None = None
        self._last = np.full(n, -1, dtype=np.int64)
        self._window = 0
        self._window_draws = np.zeros(n, dtype=np.int64)
        self._previous = np.zeros(n, dtype=np.int64)
        self._sizes = self._group_sizes(setup)
        self._sizes_unknown = bool((self._sizes == 0).any())
        one = int(self._sizes[0])
        self._one_size = one if one > 0 and bool((self._sizes == one).all()) else None
        self._never = np.ones(n, dtype=bool)
        self._n_never = n
        self._capped: list[int] = []  # tasks that reached the cap in this window
        self._warned = False
        self._entry_names, codes, group_tasks = self._groups(setup)
        self._model = (
            DriftModel(n, codes, self._entry_names, group_tasks, options.forget_versions)
            if options.evidence == "drift" else None
        )
        self._reset_metrics()

    @staticmethod
    def _groups(setup: SamplerSetup) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
        """The entries of the pool's tasks (a task listed by several: its first's; outside every entry: ``""``),
        each task's place among them, and how many tasks each has."""
        ids = setup.unique_ids
        if setup.level == "entry" and setup.entry in setup.entries:
            return (setup.entry,), np.zeros(len(ids), dtype=np.int64), np.array([len(ids)])
        owner: dict[str, str] = {}
        for name, info in setup.entries.items():
            for t in info.task_ids:
                owner.setdefault(t, name)
        names = tuple(dict.fromkeys(owner.get(t, "") for t in ids))
        at = {name: c for c, name in enumerate(names)}
        codes = np.fromiter((at[owner.get(t, "")] for t in ids), dtype=np.int64, count=len(ids))
        return names, codes, np.bincount(codes, minlength=len(names))

    @staticmethod
    def _group_sizes(setup: SamplerSetup) -> np.ndarray:
        # 0 marks a task outside every entry: its size is read from the statistics at decision time.
        if setup.level == "entry" and setup.entry in setup.entries:
            return np.full(len(setup.unique_ids), setup.entries[setup.entry].group_size, dtype=np.int64)
        size: dict[str, int] = {}
        for info in setup.entries.values():
            for t in info.task_ids:
                size.setdefault(t, info.group_size)
        return np.fromiter(
            (size.get(t, 0) for t in setup.unique_ids), dtype=np.int64, count=len(setup.unique_ids)
        )

    def _sizes_now(self, stats: TaskStatsView | None) -> np.ndarray:
        if not self._sizes_unknown:
            return self._sizes
        return np.where(self._sizes == 0, stats.group_size(None) if stats is not None else 1, self._sizes)

    def _reset_metrics(self) -> None:
        self._m = {
            "decisions": 0,
            "eligible": 0.0,
            "lifted": 0,
            "prior": 0.0,
            "prior_n": 0,
            "age": 0.0,
            "age_n": 0,
        }

    def _roll_window(self, decision: int) -> None:
        window = decision // self._n
        if window == self._window:
            return
        if window == self._window + 1:
            self._previous, self._window_draws = self._window_draws, self._previous
        else:
            self._previous[:] = 0
        self._window_draws[:] = 0
        self._capped = []
        self._window = window

    def next(self, ctx: SamplerContext) -> Draw | None:
        opts: PassRateOptions = self.options
        decision = int(ctx.decision)
        self._roll_window(decision)
        keep = _Keep(ctx.eligible_mask(self.ids))
        if keep.count == 0:
            return None
        stats = ctx.stats
        live = stats is not None and stats.live
        if stats is not None:
            busy, out, groups = stats.outstanding_tasks(self.ids)
            held = keep.mask[busy]
            busy, out, groups = busy[held], out[held], groups[held]
            if busy.size:
                busy, out = _filter(keep, busy, out, groups == 0)  # (a) unseen tasks wait for a first result
                if opts.max_outstanding_per_task is not None:
                    busy, out = _filter(keep, busy, out, out >= opts.max_outstanding_per_task)  # (b)
        if not live and not self._warned:
            self._warned = True
            self.warn(f"{self.setup.name}: no live per-task statistics; drawing by exploration alone")
        lifted = False
        if self._capped:
            capped = np.fromiter(self._capped, dtype=np.int64, count=len(self._capped))
            capped = capped[keep.mask[capped]]
            if capped.size < keep.count:
                keep.knock_out(capped)
            else:
                lifted = True
        rng = np.random.default_rng(ctx.key)
        if self._model is not None and stats is not None:
            self._model.now = max(self._model.now, float(stats.now))
        chosen, reason = -1, "explore"
        if live and rng.random() >= opts.explore:
            blind = stats.without_evidence(self.ids)
            scored = _Keep(keep.mask)
            scored.count = keep.count
            scored.knock_out(blind[keep.mask[blind]])
            cand = self._candidates(scored, opts.candidates, rng)
            if cand.size:
                reason = "exploit"
                g = self._one_size if self._one_size is not None else self._sizes_now(stats)[cand]
                if self._model is None:
                    a, b = stats.posterior_arrays(self.ids, subset=cand)
                    p = rng.beta(a, b)
                    score = 1.0 - p**g - (1.0 - p) ** g
                else:
                    a, b, u1, u0, _ = self._read(stats, cand)
                    p = rng.beta(a, b)
                    score = 1.0 - u1 * p**g - u0 * (1.0 - p) ** g
                    score = self._spread(cand, score, informative_chance(a, b, g, u1, u0), opts.near_best)
                ties = cand[score == score.max()]
                chosen = int(ties[0] if ties.size == 1 else ties[rng.integers(ties.size)])
        if chosen < 0 and opts.explore_order == "reshuffled":
            chosen = self._not_yet_in_window(keep.mask, rng)
        if chosen < 0:
            chosen = self._least_recent(keep.mask, rng)
        score_out = None
        if stats is not None:
            one, size = np.array([chosen]), int(self._sizes_now(stats)[chosen])
            if self._model is None:
                a, b = (float(x[0]) for x in stats.posterior_arrays(self.ids, subset=one))
                score_out, weight = float(informative_at(a, b, size)), PRIOR_STRENGTH
            else:
                a_, b_, u1, u0, w = self._read(stats, one)
                a, b, weight = float(a_[0]), float(b_[0]), float(w[0])
                score_out = float(informative_chance(a_, b_, size, u1, u0)[0])
            self._m["prior"] += weight / (a + b)
            self._m["prior_n"] += 1
            try:
                version = stats.counts(self.ids[chosen]).evidence_version
            except KeyError:  # a task the statistics do not know has no evidence
                version = None
            if version is not None:
                self._m["age"] += max(0.0, float(stats.now) - float(version))
                self._m["age_n"] += 1
        self._m["decisions"] += 1
        self._m["eligible"] += keep.count / self._n
        self._m["lifted"] += int(lifted)
        self._drawn(chosen, decision)
        if self._model is not None:
            self._model.clock = decision + 1
        return Draw(self.ids[chosen], reason, score_out)

    def _spread(self, cand: np.ndarray, score: np.ndarray, expected: np.ndarray, near: float) -> np.ndarray:
        """The Thompson scores of the *near-best* candidates drawn fewest times in this window, -1 for the others.
        Near-best: an expected chance (`informative_chance`) within ``near`` (option ``near_best``, by default
        ``SPREAD``) of the best candidate's.

        Why not the plain Thompson winner: over hundreds of candidates, the highest sampled score nearly always
        belongs to a task whose posterior is wide (one seen once, or never), not to one that is likely to train;
        trying such tasks is what the ``explore`` share is for. Among the near-best, the sampled score still
        decides, after coverage (every near-best task once before any twice)."""
        close = expected >= expected.max() - near
        draws = np.where(close, self._window_draws[cand], np.iinfo(np.int64).max)
        fewest = close & (draws == draws.min())
        return np.where(fewest, score, -1.0)

    def _read(self, stats: TaskStatsView, idx: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(alpha, beta, u1, u0, prior weight)`` of tasks ``idx`` under the drift model. A task the model has not seen reads
        the statistics' posterior (0.4.0's) where they hold evidence of it (after a resume from a state without the
        model, or where nobody feeds `observe`), else the model's prior."""
        model = self._model
        a, b = (np.array(x, dtype=float) for x in stats.posterior_arrays(self.ids, subset=idx))
        seen = model.seen(idx)
        if seen.any():
            a[seen], b[seen] = model.posterior(idx[seen], model.clock)
        blank = ~seen & np.isnan(stats.count_arrays(self.ids).evidence_version[idx])
        if blank.any():
            a[blank], b[blank] = model.prior(idx[blank])
        u1, u0 = model.uniform_shares(model.codes[idx])
        return a, b, u1, u0, np.where(seen | blank, DRIFT_PRIOR, PRIOR_STRENGTH)

    def observe(self, group: GroupRecord) -> None:
        """Feed a settled group to the drift model (``evidence: drift``), with its entry's success threshold."""
        if self._model is None:
            return
        i = self._position(group.task_id)
        if i is None:
            return
        entries = self.setup.entries
        entry = group.entry if group.entry in entries else self._entry_names[int(self._model.codes[i])]
        threshold = entries[entry].success_threshold if entry in entries else 1.0
        self._model.observe(i, group.passes(threshold), group.valid, group.verdict, group.oldest_version())

    def _position(self, task_id: str) -> int | None:
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.ids)}
        return self._index.get(task_id)

    def _drawn(self, i: int, decision: int) -> None:
        if self._last[i] < 0:
            self._never[i] = False
            self._n_never -= 1
        self._last[i] = decision
        self._window_draws[i] += 1
        cap = self.options.max_draws_per_epoch
        if cap is not None and self._window_draws[i] == cap:
            self._capped.append(i)

    def _candidates(self, scored: _Keep, limit: int, rng: np.random.Generator) -> np.ndarray:
        """At most ``limit`` of the ``scored`` tasks, chosen uniformly without replacement."""
        count, mask = scored.count, scored.mask
        if count <= limit:
            return np.flatnonzero(mask) if count else np.zeros(0, dtype=np.int64)
        if count * 8 >= self._n and limit * 4 <= count:
            # A small sample of a pool that is most of N: rejection-sample positions (O(limit)) instead of listing
            # the pool (O(N)). Distinct hits in order of first appearance are a uniform sample without replacement.
            picked = np.zeros(0, dtype=np.int64)
            while picked.size < limit:
                size = int((limit - picked.size) * self._n / count * 1.25) + 16
                batch = rng.integers(self._n, size=size)
                both = np.concatenate([picked, batch[mask[batch]]])
                _, first = np.unique(both, return_index=True)
                picked = both[np.sort(first)]
            return picked[:limit]
        pool = np.flatnonzero(mask)
        return pool[rng.choice(count, size=limit, replace=False, shuffle=False)]

    def _least_recent(self, keep: np.ndarray, rng: np.random.Generator) -> int:
        """The kept task drawn least recently (never drawn: -1), ties at random. A drawn task's last decision is
        unique, so ties happen only among never-drawn tasks."""
        if self._n_never:
            batch = rng.integers(self._n, size=64)
            hits = batch[keep[batch] & self._never[batch]]
            if hits.size:  # rejection sampling: uniform over the kept never-drawn tasks
                return int(hits[0])
            fresh = np.flatnonzero(keep & self._never)
            if fresh.size:
                return int(fresh[0] if fresh.size == 1 else fresh[rng.integers(fresh.size)])
        return int(np.argmin(np.where(keep, self._last, _NEVER)))

    def _not_yet_in_window(self, keep: np.ndarray, rng: np.random.Generator) -> int:
        """A kept task not drawn in this window, uniformly at random; -1 when every kept task has been."""
        fresh = keep & (self._window_draws == 0)
        batch = rng.integers(self._n, size=64)
        hits = batch[fresh[batch]]
        if hits.size:  # rejection sampling first: O(1) while most of the window is still to draw
            return int(hits[0])
        left = np.flatnonzero(fresh)
        return int(left[rng.integers(left.size)]) if left.size else -1

    def loss_weight(self, task_id: str) -> float:
        """With ``importance_cap``: ``min(cap, (1 / N) / q)``, ``q`` the task's share of this window's and the previous
        window's draws (at least one draw); else 1. The runtime scales a step's trained groups' weights to mean 1."""
        cap = self.options.importance_cap
        i = self._position(task_id)
        if cap is None or i is None:
            return 1.0
        total = int(self._window_draws.sum() + self._previous.sum())
        drawn = max(int(self._window_draws[i] + self._previous[i]), 1)
        return min(float(cap), max(total, 1) / (self._n * drawn))

    # -- state
    def state_dict(self) -> dict[str, Any]:
        ids = self.ids

        def as_map(arr: np.ndarray, present: np.ndarray) -> dict[str, int]:
            return {ids[i]: int(arr[i]) for i in np.flatnonzero(present).tolist()}

        state: dict[str, Any] = {
            "last_drawn": as_map(self._last, self._last >= 0),
            "window": int(self._window),
            "window_draws": as_map(self._window_draws, self._window_draws > 0),
            "previous_window_draws": as_map(self._previous, self._previous > 0),
        }
        if self._model is not None and not self._model.fresh():  # a fresh model is 0.4.0's state, no more
            state["model"] = self._model.state(ids)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a `state_dict`; ``{}`` starts afresh. Tasks that left the pool are dropped, new ones never drawn.
        A non-mapping, a missing key, a window that is not an int >= 0, or maps that are not {str: int >= 0} raise
        ValueError (and change nothing). Under ``evidence: drift`` a state without ``model`` (0.4.0's) starts the
        drift model afresh; a malformed ``model`` is a ValueError too."""
        if not isinstance(state, Mapping):
            raise ValueError(f"pass_rate state is a mapping, got {type(state).__name__}")
        n = self._n
        if not state:
            self._last, self._window = np.full(n, -1, dtype=np.int64), 0
            self._window_draws, self._previous = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            if self._model is not None:
                self._model.reset()
            self._derive()
            return
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"pass_rate state lacks {missing}")
        window = state["window"]
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"pass_rate state: window is an int >= 0, got {window!r}")
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.ids)}
        arrays = []
        for key, fill in (("last_drawn", -1), ("window_draws", 0), ("previous_window_draws", 0)):
            m = state[key]
            if not isinstance(m, Mapping):
                raise ValueError(f"pass_rate state: {key} is a mapping, got {type(m).__name__}")
            arr = np.full(n, fill, dtype=np.int64)
            for t, v in m.items():
                if not isinstance(t, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"pass_rate state: {key} maps task ids to ints >= 0, got {t!r}: {v!r}")
                i = self._index.get(t)
                if i is not None:
                    arr[i] = v
            arrays.append(arr)
        model = self._model
        if model is not None:
            model = DriftModel(n, model.codes, model.names, model.group_tasks, model.forget_versions)
            if "model" in state:
                model.load(state["model"], self._index)
        self._last, self._window_draws, self._previous = arrays
        self._window = window
        self._model = model
        self._derive()

    def _derive(self) -> None:
        """Rebuild what follows from the state: the never-drawn tasks and those at the cap in this window."""
        self._never = self._last < 0
        self._n_never = int(np.count_nonzero(self._never))
        cap = self.options.max_draws_per_epoch
        self._capped = [] if cap is None else np.flatnonzero(self._window_draws >= cap).tolist()

    # -- metrics
    def metrics(self, stats: TaskStatsView | None) -> dict[str, float]:
        """Since the last call: ``eligible_share``, ``cap_lifted``, ``prior_share`` (mean ``w/(a+b)`` of the drawn
        tasks, ``w`` their prior's weight), ``evidence_age`` and ``top10_share`` (the top ``max(1, N // 10)`` draw
        counts over the total, on the current window, or the previous one while the current holds fewer than N/2
        draws); under ``evidence: drift`` also, now, ``drift`` (the drift model's, in logits, averaged over the
        pool's tasks) and ``all_fail_uniform`` (the chance it gives a group of all failures to train nothing, the
        same average; 1 with a binary reward)."""
        m, out = self._m, {}
        if m["decisions"]:
            out["eligible_share"] = m["eligible"] / m["decisions"]
            out["cap_lifted"] = m["lifted"] / m["decisions"]
        if m["prior_n"]:
            out["prior_share"] = m["prior"] / m["prior_n"]
        if m["age_n"]:
            out["evidence_age"] = m["age"] / m["age_n"]
        draws = self._window_draws
        if draws.sum() < self._n / 2 and self._previous.any():
            draws = self._previous
        total = int(draws.sum())
        if total > 0:
            k = max(1, self._n // 10)
            out["top10_share"] = float(np.partition(draws, self._n - k)[self._n - k :].sum()) / total
        if self._model is not None:
            out.update(self._model.summary())
        self._reset_metrics()
        return out

    @staticmethod
    def check(options: Any, ctx: Any) -> None:
        """Refuse an entry with group size 1 (at run level every entry, at entry level its own)."""
        entries = _get(ctx, "entries") or {}
        level, own = _get(ctx, "level"), _get(ctx, "entry")
        for label, entry in entries.items():
            if level == "entry" and label != own:
                continue
            if _get(entry, "group_size") == 1:
                raise ValueError(
                    "pass_rate chooses tasks likely to mix passes and failures, which a group of one never does "
                    f"(environments[{label}] has group_size 1); use uniform, or a group size of 2 or more"
                )


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
