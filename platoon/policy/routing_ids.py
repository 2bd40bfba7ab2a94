"""Routing ids (rollout routing replay, R3): which rollouts' model calls came back with one, and what to warn about.

A server with rollout routing replay sends, with each sampled sequence of a mixture-of-experts model, a routing id
that lets the trainer replay the experts the sampler chose; a dense model's service sends none. One
``RoutingIdWatch`` is kept per workflow instance, that is per scope (``train`` or ``eval``) per start of training.
Per rollout that made ``calls`` model calls, ``present`` of them with a routing id (docs/live-runtime.md):

- ``present > 0``, none seen before, and earlier rollouts got none: this is the first rollout to get them; the
  warning names the first three rollouts without them ("and N more");
- ``0 < present < calls``: the rollout's coverage is partial;
- ``present == 0`` after ids were seen: this rollout got none;
- ``present == 0``, none seen, and it is the first such rollout: once per start (the watches of one start share
  ``told``, so training and evaluation say it once between them), a notice at level ``info``, not a warning: the
  service sends no routing ids, as expected for a dense model (for a mixture-of-experts model it means no routing
  replay).

``rollout_ended`` answers what to say as ``(level, message)`` pairs, ``info`` or ``warning``.

A rollout that made no model call tells nothing and is not counted. ``metrics()`` gives
``<scope>/rollout_worker_routing_id_coverage``: the share of the model calls, of the rollouts that ended since the
last read, that got a routing id.
"""

from __future__ import annotations

NAMED = 3
"""Rollouts without routing ids a warning names."""

__all__ = ["RoutingIdWatch"]


class RoutingIdWatch:
    """The routing-id bookkeeping of one scope for one start (see the module docstring)."""

    def __init__(self, scope: str = "train", told: set[str] | None = None) -> None:
        self.scope = scope
        self.told = told if told is not None else set()  # the once-per-start notices said, shared by a start's watches
        self.seen = False
        self.without = 0
        self.without_names: list[str] = []
        self._calls = 0
        self._present = 0

    def rollout_ended(self, rollout: str, *, calls: int, present: int) -> list[tuple[str, str]]:
        """Rollout ``rollout`` ended having made ``calls`` model calls, ``present`` of them with a routing id; what it
        calls for saying, as ``(level, message)``."""
        if not 0 <= present <= calls:
            raise ValueError(f"routing ids: {present} of {calls} calls is not a count of them")
        if calls == 0:
            return []
        self._calls += calls
        self._present += present
        what = "training" if self.scope == "train" else "evaluation"
        out: list[tuple[str, str]] = []
        if present > 0 and not self.seen and self.without:
            named = ", ".join(self.without_names)
            more = f" and {self.without - len(self.without_names)} more" if self.without > len(self.without_names) else ""
            out.append(("warning", f"{what} {rollout} is the first to get routing ids from the model service, after "
                                   f"{self.without} without them ({named}{more})"))
        if 0 < present < calls:
            out.append(("warning", f"{what} {rollout} got routing ids for {present} of its {calls} model calls: "
                                   "rollout routing replay cannot replay the others"))
        if present == 0 and self.seen:
            out.append(("warning", f"{what} {rollout} got no routing id for its {calls} model calls, after the service "
                                   "had sent some: rollout routing replay cannot replay it"))
        if present == 0 and not self.seen and "none" not in self.told:
            self.told.add("none")
            out.append(("info", "the model service sends no routing ids, as expected for a dense model (a "
                                "mixture-of-experts model's would mean no rollout routing replay, R3)"))
        if present > 0:
            self.seen = True
        elif not self.seen:
            self.without += 1
            if len(self.without_names) < NAMED:
                self.without_names.append(rollout)
        return out

    def metrics(self) -> dict[str, float]:
        """``<scope>/rollout_worker_routing_id_coverage`` since the last read (empty when no rollout made a call)."""
        if self._calls == 0:
            return {}
        out = {f"{self.scope}/rollout_worker_routing_id_coverage": self._present / self._calls}
        self._calls = self._present = 0
        return out
