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

What was drawn when (windows, the cap, the exploration orders, their saved form) is `DrawHistory`'s
(``platoon.policy.samplers.draw_history``); the evidence model of ``evidence: drift`` is ``drift``'s; this module
keeps the decision itself, the scores, the loss weights and the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from platoon.config.components import PassRateOptions
from platoon.policy.samplers.base import Draw, Sampler, SamplerContext, SamplerSetup, TaskStatsView
from platoon.policy.samplers.draw_history import DrawHistory
from platoon.policy.samplers.drift import PRIOR_STRENGTH as DRIFT_PRIOR
from platoon.policy.samplers.drift import DriftModel, informative_chance
from platoon.policy.stats import PRIOR_STRENGTH, GroupRecord, informative_at

SPREAD = PassRateOptions.model_fields["near_best"].default
"""``evidence: drift``'s exploit draws, by default, among the candidates whose expected chance to train is within this
of the best candidate's, those drawn fewest times in this window first (see `PassRateSampler._spread`)."""


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
        self.history = DrawHistory(n, options.max_draws_per_epoch)
        self._sizes = self._group_sizes(setup)
        self._sizes_unknown = bool((self._sizes == 0).any())
        one = int(self._sizes[0])
        self._one_size = one if one > 0 and bool((self._sizes == one).all()) else None
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

    def next(self, ctx: SamplerContext) -> Draw | None:
        opts: PassRateOptions = self.options
        decision = int(ctx.decision)
        history = self.history
        history.roll(decision)
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
        if history.capped:
            capped = np.fromiter(history.capped, dtype=np.int64, count=len(history.capped))
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
            chosen = history.not_yet_in_window(keep.mask, rng)
        if chosen < 0:
            chosen = history.least_recent(keep.mask, rng)
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
        history.drawn(chosen, decision)
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
        draws = np.where(close, self.history.window_draws[cand], np.iinfo(np.int64).max)
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

    def loss_weight(self, task_id: str) -> float:
        """With ``importance_cap``: ``min(cap, (1 / N) / q)``, ``q`` the task's share of this window's and the previous
        window's draws (at least one draw); else 1. The runtime scales a step's trained groups' weights to mean 1."""
        cap = self.options.importance_cap
        i = self._position(task_id)
        if cap is None or i is None:
            return 1.0
        drawn, total = self.history.recent_share(i)
        return min(float(cap), max(total, 1) / (self._n * drawn))

    # -- state
    def state_dict(self) -> dict[str, Any]:
        state = self.history.state(self.ids)
        if self._model is not None and not self._model.fresh():  # a fresh model is 0.4.0's state, no more
            state["model"] = self._model.state(self.ids)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a `state_dict`; ``{}`` starts afresh. Tasks that left the pool are dropped, new ones never drawn.
        A non-mapping, a missing key, a window that is not an int >= 0, or maps that are not {str: int >= 0} raise
        ValueError (and change nothing). Under ``evidence: drift`` a state without ``model`` (0.4.0's) starts the
        drift model afresh; a malformed ``model`` is a ValueError too."""
        if not isinstance(state, Mapping):
            raise ValueError(f"pass_rate state is a mapping, got {type(state).__name__}")
        if not state:
            self.history.reset()
            if self._model is not None:
                self._model.reset()
            return
        if self._index is None:
            self._index = {t: i for i, t in enumerate(self.ids)}
        *arrays, window = self.history.parsed(state, self._index)
        model = self._model
        if model is not None:
            model = DriftModel(self._n, model.codes, model.names, model.group_tasks, model.forget_versions)
            if "model" in state:
                model.load(state["model"], self._index)
        self.history.assign(*arrays, window)
        self._model = model

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
        top = self.history.top_share(max(1, self._n // 10))
        if top is not None:
            out["top10_share"] = top
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
