"""The simulator: ``platoon simulate`` runs the policy layer on a simulated workload in SimPy time.

- ``setup``: the config (files, presets, overrides), each entry's workload, the tasks, their pool and learning model;
- ``workload``, ``learning``, ``startups``: the workload model (random outcomes as pure functions of the seed and a
  rollout's place, the pass rates and how training moves them, start-ups that share a capacity);
- ``runtime``: the SimPy runtime that drives the dispatcher; ``records``, ``metrics``: its state and its ``sim/...``
  metrics;
- ``run``: a simulated run's directory, checkpoints and exact resume; ``command``: ``platoon simulate``'s body;
- ``baseline``: a bare SimPy model, the yardstick of the simulator's speed.

docs/simulator.md is the user's guide.
"""
