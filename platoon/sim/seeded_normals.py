"""One standard normal per name, for many names at once, bit for bit what numpy gives one generator at a time.

The simulator draws a task's difficulty (and length) from ``np.random.default_rng([seed, salt, word])
.standard_normal()``, ``word`` being the first 8 bytes of the sha256 of the task's id, big-endian. Building a
generator per task costs about 15 us, which is most of a million-task pool's start-up. Here the same three steps run
on whole arrays, following numpy's own code (``numpy/random/bit_generator.pyx``, ``src/pcg64/pcg64.h``,
``src/distributions/distributions.c``):

1. ``SeedSequence(entropy).generate_state(4, uint64)`` (pool size 4), with uint32 arithmetic;
2. PCG64's seeding from those words and its first step and XSL-RR output, with 128-bit values as (hi, lo) uint64;
3. the ziggurat's first try, which returns 99.3 % of the time; the other draws go through numpy itself.

The ziggurat's tables are not reachable from Python, so ``_ziggurat_tables`` reads them off the installed numpy by
handing its generator chosen outputs. Everything is exact integer arithmetic or the one float product numpy does,
so the values equal numpy's; tests/sim/test_seeded_normals.py holds that against numpy.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

_MASK32 = 0xFFFF_FFFF
_MASK128 = (1 << 128) - 1
# SeedSequence's hash constants (bit_generator.pyx).
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_POOL_SIZE = 4
# PCG64's multiplier (pcg64.h: PCG_DEFAULT_MULTIPLIER_128).
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_U32, _U64 = np.uint32, np.uint64


def name_words(names: Sequence[str]) -> np.ndarray:
    """Each name's first 8 sha256 bytes as a big-endian uint64: the ``word`` of ``default_rng([seed, salt, word])``."""
    digests = b"".join(hashlib.sha256(n.encode("utf-8")).digest()[:8] for n in names)
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def word_normals(seed: int, salt: int, words: np.ndarray) -> np.ndarray:
    """``[default_rng([seed % 2**64, salt, int(w)]).standard_normal() for w in words]`` as a float64 array, exactly;
    ``words`` a uint64 array (`name_words`), ``salt`` a non-negative int."""
    seed = int(seed) % (1 << 64)
    head = _uint32_words(seed) + _uint32_words(salt)
    out = np.empty(len(words))
    wide = words > _U64(_MASK32)  # numpy gives such a word two uint32s, a smaller one one: two entropy lengths
    for rows, n_word in ((np.flatnonzero(~wide), 1), (np.flatnonzero(wide), 2)):
        entropy = np.empty((len(rows), len(head) + n_word), dtype=_U32)
        entropy[:, :len(head)] = head
        entropy[:, len(head)] = (words[rows] & _U64(_MASK32)).astype(_U32)
        if n_word == 2:
            entropy[:, len(head) + 1] = (words[rows] >> _U64(32)).astype(_U32)
        out[rows] = _pcg64_standard_normals(_seed_sequence_states(entropy), seed, salt, words[rows])
    return out


def _uint32_words(n: int) -> list[int]:
    """A non-negative int as SeedSequence splits it: little-endian uint32 words, one word for 0."""
    words = [n & _MASK32]
    while n > _MASK32:
        n >>= 32
        words.append(n & _MASK32)
    return words


def _hash_constants(init: int, mult: int, count: int) -> list[tuple[int, int]]:
    """SeedSequence's running hash constant: per use, the (xor, multiply) pair it contributes."""
    pairs, h = [], init
    for _ in range(count):
        nxt = (h * mult) & _MASK32
        pairs.append((h, nxt))
        h = nxt
    return pairs


def _seed_sequence_states(entropy: np.ndarray) -> np.ndarray:
    """Row ``r`` of an (n, L) uint32 array -> ``SeedSequence(row r's words).generate_state(4, uint64)``: (n, 4)."""
    n, length = entropy.shape
    extra = max(0, length - _POOL_SIZE)
    consts = iter(_hash_constants(_INIT_A, _MULT_A, _POOL_SIZE ** 2 + _POOL_SIZE * extra))

    def hashmix(value: np.ndarray) -> np.ndarray:
        xor, mult = next(consts)
        value = (value ^ _U32(xor)) * _U32(mult)
        return value ^ (value >> _U32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = _U32(_MIX_MULT_L) * x - _U32(_MIX_MULT_R) * y
        return result ^ (result >> _U32(16))

    with np.errstate(over="ignore"):
        zeros = np.zeros(n, dtype=_U32)
        pool = [hashmix(entropy[:, i] if i < length else zeros) for i in range(_POOL_SIZE)]
        for src in range(_POOL_SIZE):
            for dst in range(_POOL_SIZE):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(_POOL_SIZE, length):
            for dst in range(_POOL_SIZE):
                pool[dst] = mix(pool[dst], hashmix(entropy[:, src]))
        state = []
        for i, (xor, mult) in enumerate(_hash_constants(_INIT_B, _MULT_B, 2 * _POOL_SIZE)):
            value = (pool[i % _POOL_SIZE] ^ _U32(xor)) * _U32(mult)
            state.append((value ^ (value >> _U32(16))).astype(_U64))
    return np.stack([state[2 * i] | (state[2 * i + 1] << _U64(32)) for i in range(_POOL_SIZE)], axis=1)


def _mul_hi64(x: np.ndarray, y: int) -> np.ndarray:
    """The high 64 bits of each 64x64-bit product, from 32-bit halves."""
    x0, x1 = x & _U64(_MASK32), x >> _U64(32)
    y0, y1 = _U64(y & _MASK32), _U64(y >> 32)
    p00, p01, p10, p11 = x0 * y0, x0 * y1, x1 * y0, x1 * y1
    mid = (p00 >> _U64(32)) + (p01 & _U64(_MASK32)) + (p10 & _U64(_MASK32))
    return p11 + (p01 >> _U64(32)) + (p10 >> _U64(32)) + (mid >> _U64(32))


def _pcg_step(hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """``state * MULT + inc`` mod 2**128 on (hi, lo) uint64 pairs."""
    m_hi, m_lo = _PCG_MULT >> 64, _PCG_MULT & ((1 << 64) - 1)
    prod_lo = lo * _U64(m_lo)
    prod_hi = _mul_hi64(lo, m_lo) + lo * _U64(m_hi) + hi * _U64(m_lo)
    return _add128(prod_hi, prod_lo, inc_hi, inc_lo)


def _add128(a_hi: np.ndarray, a_lo: np.ndarray, b_hi: np.ndarray, b_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = a_lo + b_lo
    return a_hi + b_hi + (lo < a_lo).astype(_U64), lo


def _pcg64_first_outputs(states: np.ndarray) -> np.ndarray:
    """Each row's ``PCG64(SeedSequence(...)).random_raw()``, from its ``generate_state(4, uint64)`` row."""
    with np.errstate(over="ignore"):
        # pcg64_set_seed: s = (v0 << 64) | v1, inc = ((v2 << 64) | v3) << 1 | 1; srandom_r then steps twice.
        inc_hi = (states[:, 2] << _U64(1)) | (states[:, 3] >> _U64(63))
        inc_lo = (states[:, 3] << _U64(1)) | _U64(1)
        hi, lo = _add128(inc_hi, inc_lo, states[:, 0], states[:, 1])
        hi, lo = _pcg_step(hi, lo, inc_hi, inc_lo)
        hi, lo = _pcg_step(hi, lo, inc_hi, inc_lo)  # the draw: step, then XSL-RR output
        value, rot = hi ^ lo, hi >> _U64(58)
        return (value >> rot) | (value << ((-rot.astype(np.int64)) & 63).astype(_U64))


def _pcg64_standard_normals(states: np.ndarray, seed: int, salt: int, words: np.ndarray) -> np.ndarray:
    """Each row's first ``standard_normal()``: the ziggurat's first try where it returns, else numpy's own draw."""
    ki, wi = _ziggurat_tables()
    raw = _pcg64_first_outputs(states)
    idx = (raw & _U64(0xFF)).astype(np.intp)
    sign = (raw >> _U64(8)) & _U64(1)
    rabs = (raw >> _U64(9)) & _U64((1 << 52) - 1)
    x = rabs.astype(np.float64) * wi[idx]
    x[sign == 1] *= -1.0
    for i in np.flatnonzero(rabs >= ki[idx]):
        x[i] = np.random.default_rng([seed, salt, int(words[i])]).standard_normal()
    return x


@functools.cache
def _ziggurat_tables() -> tuple[np.ndarray, np.ndarray]:
    """numpy's ``ki_double`` and ``wi_double``, read off its generator.

    ``random_standard_normal`` splits one uint64 into idx (8 bits), sign (1) and rabs (52), returns
    ``±rabs * wi[idx]`` at once when ``rabs < ki[idx]`` and otherwise draws again. So ``ki[idx]`` is the first
    rabs whose draw takes a second output (a binary search), and ``wi[idx]`` is the value drawn for rabs 1.
    Where ``ki[idx] <= 1`` wi is never needed (0 * anything is 0) and stays 0.
    """
    probe = _RawProbe()
    ki = np.array([_first_slow_rabs(probe, idx) for idx in range(256)], dtype=_U64)
    wi = np.array([probe.draw((1 << 9) | idx)[0] if ki[idx] > 1 else 0.0 for idx in range(256)])
    ki.flags.writeable = wi.flags.writeable = False  # cached for the process: shared by every caller
    return ki, wi


def _first_slow_rabs(probe: _RawProbe, idx: int) -> int:
    lo, hi = 0, 1 << 52  # invariant: rabs < lo returns at once, rabs >= hi does not
    while lo < hi:
        mid = (lo + hi) // 2
        if probe.draw((mid << 9) | idx)[1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


class _RawProbe:
    """A numpy generator made to output a chosen uint64 next: with inc 1, a state whose high word is 0 outputs its
    low word (XSL-RR rotates by the top 6 bits), so the state before is (low - inc) / MULT mod 2**128."""

    _INC = 1

    def __init__(self) -> None:
        self._bit_generator = np.random.PCG64(0)
        self._generator = np.random.Generator(self._bit_generator)
        self._mult_inverse = pow(_PCG_MULT, -1, 1 << 128)

    def draw(self, raw: int) -> tuple[float, bool]:
        """``standard_normal()`` when the next output is ``raw``, and whether it used only that output."""
        after = raw
        before = ((after - self._INC) * self._mult_inverse) & _MASK128
        self._bit_generator.state = {"bit_generator": "PCG64", "state": {"state": before, "inc": self._INC},
                                     "has_uint32": 0, "uinteger": 0}
        value = float(self._generator.standard_normal())
        return value, self._bit_generator.state["state"]["state"] == after
