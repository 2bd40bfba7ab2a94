"""platoon: asynchronous RL training of LLM agents, with the dispatch policy as a shared, deterministic layer.

The policy layer (``platoon.policy``) is sans-I/O; it runs inside the SimPy simulator (``platoon.sim``) and the
live asyncio + PyTorch backend (``platoon.live``). Both write the same run directory (``platoon.runs``).
"""

__version__ = "0.4.0"
