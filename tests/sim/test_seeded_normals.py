"""Vectorised per-name normals: equal (==, not approx) to numpy's one-generator-per-task draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from platoon.config.sim import SimConfig
from platoon.sim.learning import SALT_DIFFICULTY, SALT_HELDOUT, SALT_LENGTH, EntryTasks, _task_normal
from platoon.sim.seeded_normals import (
    _pcg64_first_outputs,
    _seed_sequence_states,
    _uint32_words,
    _ziggurat_tables,
    name_words,
    word_normals,
)

SEEDS = [0, 1, 2**32 + 5, 2**64 - 1, -3]
SALTS = [SALT_DIFFICULTY, SALT_LENGTH, SALT_HELDOUT]
IDS = [f"env/{n}" for n in range(600)] + ["", "é/ü", "a" * 300]
# Words below 2**32 are one uint32 of entropy, not two; no short id list has a sha word that small, so these go in
# as words directly.
EDGE_WORDS = [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]


def numpy_normal(seed: int, salt: int, word: int) -> float:
    return float(np.random.default_rng([seed % 2**64, salt, word]).standard_normal())


@pytest.mark.parametrize("seed", SEEDS)
def test_equals_the_per_task_draw(seed):
    words = name_words(IDS)
    for salt in SALTS:
        got = word_normals(seed, salt, words)
        assert got.dtype == np.float64
        assert got.tolist() == [_task_normal(seed, salt, t) for t in IDS]


@pytest.mark.parametrize("seed", SEEDS)
def test_equals_numpy_for_small_and_large_words(seed):
    words = np.array(EDGE_WORDS, dtype=np.uint64)
    for salt in SALTS:
        assert word_normals(seed, salt, words).tolist() == [numpy_normal(seed, salt, w) for w in EDGE_WORDS]


def test_the_ziggurats_other_branch_is_exercised():
    """The test ids include draws the first ziggurat try rejects (numpy redraws those), and they still agree."""
    ki, _ = _ziggurat_tables()
    entropy = np.array([_uint32_words(0) + [SALT_DIFFICULTY] + _uint32_words(int(w)) for w in name_words(IDS)],
                       dtype=np.uint32)
    raw = _pcg64_first_outputs(_seed_sequence_states(entropy))
    rejected = ((raw >> np.uint64(9)) & np.uint64(2**52 - 1)) >= ki[(raw & np.uint64(0xFF)).astype(np.intp)]
    assert 0 < rejected.sum() < len(IDS) // 20


def test_seeding_steps_equal_numpy():
    rows = [[0, 5, 7], [1, 2, 3, 4], [5, 1, 2**32 - 1, 9, 9], [2**32 - 1] * 4]
    for row in rows:
        entropy = np.array([row], dtype=np.uint32)
        seed_sequence = np.random.SeedSequence(row)
        assert _seed_sequence_states(entropy)[0].tolist() == seed_sequence.generate_state(4, np.uint64).tolist()
        assert _pcg64_first_outputs(_seed_sequence_states(entropy))[0] == np.random.PCG64(row).random_raw()


def test_uint32_words_split_like_seed_sequence():
    assert _uint32_words(0) == [0]
    assert _uint32_words(2**32 - 1) == [2**32 - 1]
    assert _uint32_words(2**32 + 5) == [5, 1]


def test_empty():
    assert name_words([]).shape == (0,)
    assert word_normals(3, SALT_DIFFICULTY, name_words([])).shape == (0,)


def test_build_keeps_the_per_task_values():
    sim = SimConfig.model_validate({"population": {"tasks": 300, "difficulty_mean": 0.5, "difficulty_sd": 1.7},
                                    "rollout": {"length_sigma": 0.8}})
    e = EntryTasks.build("env", sim, seed=11, task_ids=None)
    assert e.difficulty.tolist() == [0.5 + 1.7 * _task_normal(11, SALT_DIFFICULTY, t) for t in e.task_ids]
    assert e.length.tolist() == [math.exp(0.8 * _task_normal(11, SALT_LENGTH, t)) for t in e.task_ids]
    flat = EntryTasks.build("env", SimConfig.model_validate({"population": {"tasks": 3}}), seed=0, task_ids=None)
    assert flat.length.tolist() == [1.0, 1.0, 1.0]
