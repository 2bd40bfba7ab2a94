"""Rollouts in the live backend: a training group's rollouts and what the group hands back (``workflow``), the lease
face a workflow sees and the lease host where its blocks meet the driver (``lease``, ``lease_host``), a traced
rollout's lane in ``trace.json`` (``rollout_trace``), and held-out pass@1, in batches or as rollouts
(``evaluate``).

Importing this package imports nothing of its modules: ``platoon.experimental``'s ``rollout_lease`` comes from
``lease``, which imports no torch, and stays that light.
"""
