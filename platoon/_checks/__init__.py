"""Contract checkers behind `platoon.testing` (they may time, spawn subprocesses and read files: not policy code)."""
