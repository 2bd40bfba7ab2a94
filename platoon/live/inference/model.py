"""Policies of the live backend: the shared sampling and scoring code, and the built-in tiny causal transformer.

A policy model (``PolicyModel``) does two things for the rest of the backend:

- ``sample(prompts, max_new_tokens=, temperature=, seeds=)``: batched, KV-cached generation that returns each
  row's new tokens with their log-probabilities under the sampling distribution (``log_softmax(logits / T)``);
- ``policy_logprobs(sequences, masks)``: the log-probability of each token of right-padded sequences given the
  tokens before it, differentiable, for the trainer.

Rules it keeps:
- **Sampling is a function of each row's seed, not of its batch.** Row i's t-th token is
  ``argmax(logits / T + Gumbel(seed_i, t))``, with Gumbel noise from a counter-based hash (splitmix64) of
  ``(seed_i, t, token)``; so a request gives the same tokens whether it is batched with 0 or 255 others, and a
  runtime that derives seeds from the run's seed and the rollout's key samples reproducibly whatever the arrival
  order (floating-point sums over a different batch can still move a log-probability in its last bits);
- ``temperature == 0`` samples greedily and reports log-probabilities at temperature 1;
- prompts are left-padded for sampling (positions count real tokens only, pads are masked out as keys); sequences
  for scoring are right-padded, where the causal mask alone keeps pads out;
- the device is chosen once: ``auto`` is CUDA when ``torch.cuda.is_available()``, else the CPU.

``TinyPolicy`` is the built-in model (2 layers, d=64: about 140k parameters for platoon-number-search's words and 256
bytes, 256 positions);
``platoon.live.inference.hf.HFPolicy`` is the same interface over a Hugging Face causal LM;
``platoon.live.inference.model_kinds`` builds the one a ``ModelConfig`` names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CausalPolicy",
    "Generation",
    "PolicyModel",
    "TinyConfig",
    "TinyPolicy",
    "TinyTransformer",
    "derive_seed",
    "gumbel_noise",
    "pad_right",
    "resolve_device",
]


class Generation(NamedTuple):
    """One row's sampled tokens and their log-probabilities under the sampling distribution."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


@runtime_checkable
class PolicyModel(Protocol):
    """What the model service and the trainer need of a model."""

    module: nn.Module
    device: torch.device
    vocab_size: int
    max_len: int | None

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
               temperature: float | Sequence[float], seeds: Sequence[int],
               stop: Sequence[Collection[Sequence[int]]] | None = None) -> list[Generation]:
        ...

    def check_prompts(self, prompts: Sequence[Sequence[int]], limits: Sequence[int]) -> None:
        """Raise ``ValueError`` for a request ``sample`` cannot serve."""
        ...

    def policy_logprobs(self, sequences: Any, masks: Any, *, temperature: float = 1.0,
                        with_entropy: bool = False) -> Any:
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        ...

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        ...


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto``: CUDA when available, else the CPU; otherwise the device named."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any printable parts (sha256 of their repr): the run's seed, a group key, a member, a turn."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# splitmix64 constants as signed 64-bit integers (torch has no uint64 arithmetic).
_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_MIX1 = 0xBF58476D1CE4E5B9 - 2**64
_MIX2 = 0x94D049BB133111EB - 2**64


def _shr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _splitmix(z: torch.Tensor) -> torch.Tensor:
    z = z + _GOLDEN
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


def gumbel_noise(seeds: torch.Tensor, step: int, vocab_size: int) -> torch.Tensor:
    """Gumbel(0, 1) noise of shape ``[len(seeds), vocab_size]``, a pure function of ``(seed, step, token)``."""
    row = _splitmix(seeds.to(torch.int64) ^ _splitmix(torch.full_like(seeds, step, dtype=torch.int64)))
    tokens = torch.arange(vocab_size, device=seeds.device, dtype=torch.int64)
    bits = _splitmix(row[:, None] + tokens[None, :] * _GOLDEN)
    u = (_shr(bits, 11).to(torch.float64) + 0.5) * 2.0**-53
    return -torch.log(-torch.log(u)).to(torch.float32)


def _not_stopped(history: list[list[int]], choice: list[int], stops: list[list[tuple[int, ...]]],
                    device: torch.device) -> torch.Tensor:
    """Append each row's new token to its history; False for the rows whose history now ends with a stop."""
    keep = []
    for row, token, seqs in zip(history, choice, stops, strict=True):
        row.append(token)
        keep.append(not any(len(row) >= len(s) and tuple(row[-len(s):]) == s for s in seqs))
    return torch.tensor(keep, dtype=torch.bool, device=device)


def pad_right(rows: Sequence[Sequence[float]], *, value: float = 0, dtype: torch.dtype = torch.long,
              device: torch.device | None = None) -> torch.Tensor:
    """Rows of different lengths as one right-padded tensor."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.as_tensor(list(r), dtype=dtype)
    return out if device is None else out.to(device)


class CausalPolicy:
    """Sampling and scoring over two hooks a model provides:

    - ``_step(tokens, positions, attn_mask, cache) -> (logits, cache)``: tokens ``[B, T]`` at ``positions``, with a
      boolean ``attn_mask`` ``[B, 1, T, K]`` (True: may attend) over the cached keys followed by these, cache None
      at the first call;
    - ``_logits(tokens) -> logits``: right-padded full sequences ``[B, T]`` -> ``[B, T, V]``, causal.
    """

    module: nn.Module
    device: torch.device
    vocab_size: int
    max_len: int | None = None

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, attn_mask: torch.Tensor,
              cache: Any) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def _logits(self, tokens: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # --- sampling ----------------------------------------------------------------------------------------------

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
               temperature: float | Sequence[float], seeds: Sequence[int],
               stop: Sequence[Collection[Sequence[int]]] | None = None) -> list[Generation]:
        """Generate for every prompt at once (per-row limits, temperatures, seeds and stop sequences).

        A row stops after ``max_new_tokens`` tokens or once its tokens end with one of its ``stop`` sequences (token-id
        sequences, kept in the completion: a renderer's end-of-turn marker may take several tokens). Raises
        ``ValueError`` on an empty prompt, a token outside the vocabulary, a prompt plus limit past ``max_len``, or
        an empty stop sequence.
        """
        b = len(prompts)
        if b == 0:
            return []
        limits = [max_new_tokens] * b if isinstance(max_new_tokens, int) else [int(m) for m in max_new_tokens]
        temps = [float(temperature)] * b if isinstance(temperature, int | float) else [float(t) for t in temperature]
        if not len(limits) == len(temps) == len(seeds) == b:
            raise ValueError("sample: prompts, max_new_tokens, temperature and seeds must have one entry per row")
        self.check_prompts(prompts, limits)
        device = self.device
        width = max(len(p) for p in prompts)
        # One tensor from nested lists: a row-by-row copy costs more than the forward pass at batch 256.
        tokens = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=device)
        valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts], device=device)
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
        mask = causal[None] & valid[:, None, :]
        # A pad query attends to itself only: its output is never read, and an all-masked row would give NaN.
        mask |= torch.eye(width, dtype=torch.bool, device=device)[None]
        limit_t = torch.tensor(limits, device=device)
        temp_t = torch.tensor(temps, device=device)
        greedy = temp_t <= 0
        seed_t = torch.tensor([int(s) & (2**63 - 1) for s in seeds], dtype=torch.int64, device=device)
        single, multi = self._stops(stop, b)
        history: list[list[int]] = [[] for _ in range(b)]
        alive = limit_t > 0
        lengths = torch.zeros(b, dtype=torch.long, device=device)
        chosen, chosen_lp = [], []
        rows = torch.arange(b, device=device)
        with torch.inference_mode():
            was_training = self.module.training
            self.module.eval()
            try:
                logits, cache = self._step(tokens, positions, mask[:, None], None)
                last = logits[:, -1].float()
                next_pos = positions[:, -1] + 1
                key_valid = valid
                for t in range(max(limits)):
                    scaled = torch.where(greedy[:, None], last, last / temp_t.clamp(min=1e-6)[:, None])
                    logp = torch.log_softmax(scaled, dim=-1)
                    noisy = torch.where(greedy[:, None], last, scaled + gumbel_noise(seed_t, t, last.shape[-1]))
                    choice = noisy.argmax(-1)
                    chosen.append(choice)
                    chosen_lp.append(logp[rows, choice])
                    lengths += alive.long()
                    alive = alive & (limit_t > t + 1)
                    if single is not None:
                        alive = alive & ~single[rows, choice]
                    if multi is not None:
                        alive = alive & _not_stopped(history, choice.tolist(), multi, device)
                    if t + 1 == max(limits) or not bool(alive.any()):
                        break
                    key_valid = torch.cat([key_valid, torch.ones((b, 1), dtype=torch.bool, device=device)], 1)
                    # A row past its own limit runs on with the batch (its tokens are cut off after), so its
                    # position may pass the model's last: clamp it, its output is never read.
                    pos = next_pos if self.max_len is None else next_pos.clamp(max=self.max_len - 1)
                    logits, cache = self._step(choice[:, None], pos[:, None], key_valid[:, None, None, :], cache)
                    last = logits[:, -1].float()
                    next_pos = next_pos + 1
            finally:
                self.module.train(was_training)
        if not chosen:
            return [Generation((), ()) for _ in range(b)]
        toks = torch.stack(chosen, 1).tolist()
        lps = torch.stack(chosen_lp, 1).tolist()
        lens = lengths.tolist()
        return [Generation(tuple(toks[i][: lens[i]]), tuple(lps[i][: lens[i]])) for i in range(b)]

    def _stops(self, stop: Sequence[Collection[Sequence[int]]] | None,
               b: int) -> tuple[torch.Tensor | None, list[list[tuple[int, ...]]] | None]:
        """Rows' stop sequences as a ``[B, V]`` mask of one-token stops (checked on the device) and the longer ones
        per row (checked on the host, only when some row has one)."""
        if stop is None:
            return None, None
        if len(stop) != b:
            raise ValueError(f"sample: {b} prompts but {len(stop)} rows of stop sequences")
        single = None
        multi: list[list[tuple[int, ...]]] = [[] for _ in range(b)]
        for i, row in enumerate(stop):
            for seq in row:
                seq = tuple(int(t) for t in seq)
                if not seq or min(seq) < 0 or max(seq) >= self.vocab_size:
                    raise ValueError(f"sample: a stop sequence must be non-empty ids in 0..{self.vocab_size - 1}")
                if len(seq) == 1:
                    if single is None:
                        single = torch.zeros((b, self.vocab_size), dtype=torch.bool)
                    single[i, seq[0]] = True
                else:
                    multi[i].append(seq)
        return (None if single is None else single.to(self.device)), (multi if any(multi) else None)

    def check_prompts(self, prompts: Sequence[Sequence[int]], limits: Sequence[int]) -> None:
        """Raise ``ValueError`` for an empty prompt, a token outside the vocabulary, or a length past max_len."""
        for p, m in zip(prompts, limits, strict=True):
            if not len(p):
                raise ValueError("sample: a prompt must hold at least one token")
            if m < 0:
                raise ValueError(f"sample: max_new_tokens must be at least 0, got {m}")
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"sample: prompt tokens must lie in 0..{self.vocab_size - 1}")
            if self.max_len is not None and len(p) + m > self.max_len:
                raise ValueError(
                    f"sample: a prompt of {len(p)} tokens plus {m} new ones exceeds the model's {self.max_len}")

    # --- scoring -----------------------------------------------------------------------------------------------

    def policy_logprobs(self, sequences: Any, masks: Any, *, temperature: float = 1.0,
                        with_entropy: bool = False) -> Any:
        """Per-token log-probabilities ``[B, T]`` of right-padded ``sequences`` (tensor or lists of ids).

        ``out[i, t] = log softmax(logits(seq[i, :t]) / T)[seq[i, t]]`` where ``masks[i, t]`` is set, else 0
        (position 0, which nothing predicts, must be unmasked). With ``with_entropy`` also the entropy of that
        distribution at the same positions (0 where unmasked): ``(logprobs, entropy)``. Differentiable.
        """
        seq = sequences if isinstance(sequences, torch.Tensor) else pad_right(sequences)
        mask = masks if isinstance(masks, torch.Tensor) else pad_right(masks, dtype=torch.float32)
        seq, mask = seq.to(self.device), mask.to(self.device, torch.float32)
        if seq.shape != mask.shape:
            raise ValueError(f"policy_logprobs: sequences {tuple(seq.shape)} and masks {tuple(mask.shape)} differ")
        if seq.shape[1] and bool(mask[:, 0].any()):
            raise ValueError("policy_logprobs: position 0 has no prediction; its mask must be 0")
        if self.max_len is not None and seq.shape[1] > self.max_len:
            raise ValueError(f"policy_logprobs: sequences of {seq.shape[1]} tokens exceed the model's {self.max_len}")
        logits = self._logits(seq)[:, :-1].float()
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1)
        token_lp = logp.gather(-1, seq[:, 1:, None]).squeeze(-1)
        zero = torch.zeros((seq.shape[0], 1), device=self.device)
        out = torch.cat([zero, token_lp], 1) * mask
        if not with_entropy:
            return out
        entropy = -(logp.exp() * logp).sum(-1)
        return out, torch.cat([zero, entropy], 1) * mask

    def masked_logprobs(self, sequences: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """``policy_logprobs(sequences, masks)`` at the masked positions only, flattened row by row (temperature 1),
        the read-out computed at those positions alone: over a vocabulary of thousands of words it is most of the
        cost where few tokens are masked (supervised fine-tuning's prompts and tool results). A model without the
        hook ``_logits_at(tokens, chosen)`` (logits at the positions ``chosen`` sets) computes every position's.
        Differentiable."""
        seq, mask = sequences.to(self.device), masks.to(self.device) > 0
        logits_at = getattr(self, "_logits_at", None)
        if logits_at is None:
            return self.policy_logprobs(seq, mask.float())[mask]
        if seq.shape[1] and bool(mask[:, 0].any()):
            raise ValueError("masked_logprobs: position 0 has no prediction; its mask must be 0")
        chosen = mask[:, 1:]
        logits = logits_at(seq[:, :-1], chosen).float()
        return torch.log_softmax(logits, dim=-1).gather(-1, seq[:, 1:][chosen][:, None]).squeeze(-1)

    # --- weights -----------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The module's weights, detached copies on the CPU (safe to publish while training goes on)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.module.load_state_dict(dict(state))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


# --- the built-in tiny transformer ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int
    max_len: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    shift: int = 0
    """Taps of a short causal convolution over the input embeddings (0: none): each position's input also holds
    learned per-channel mixes of the ``shift`` tokens before it, so a decision can read the last few tokens without
    having learnt to attend to them (a "canon" layer; it let the tiny model learn a multi-turn game through chat
    markup, where the decision sits a few marker tokens after what it depends on)."""

    copying: bool = False
    """A copying read-out beside the vocabulary's (a pointer-generator): a pointer head attends from each position
    over the tokens so far (matching features, and the token just written against each position's previous token),
    and the next token's distribution is a gated mixture of the vocabulary's softmax and the pointer's attention on
    each token's occurrences. So the model can write a token it has only read (an item name
    no training task ever wrote) and copy a count exactly. The gate starts nearly shut (``COPY_GATE_START``)."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must be a multiple of n_heads {self.n_heads}")
        if self.shift < 0:
            raise ValueError(f"shift must be at least 0, got {self.shift}")
        if self.vocab_size < 2 or self.max_len < 2:
            raise ValueError("vocab_size and max_len must be at least 2")


COPY_GATE_START = -6.0
"""The copying read-out's gate bias at initialisation: ``sigmoid(-6)``, a 0.25% share for the pointer."""


class _Block(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, cfg.mlp_ratio * d)
        self.fc2 = nn.Linear(cfg.mlp_ratio * d, d)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                cache: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, tuple]:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k = torch.cat([cache[0], k], 2)
            v = torch.cat([cache[1], v], 2)
        if attn_mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x, (k, v)


class TinyTransformer(nn.Module):
    """Pre-LayerNorm causal transformer with learned positions and, with ``shift``, a short causal convolution over
    its input embeddings; the read-out's weights start at zero."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.shift = nn.Parameter(torch.zeros(cfg.shift, cfg.d_model)) if cfg.shift else None
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
        if cfg.copying:
            self.copy_q = nn.Linear(cfg.d_model, cfg.d_model)
            self.copy_k = nn.Linear(cfg.d_model, cfg.d_model)
            # the pointer also matches the token just written against each position's previous token (an induction
            # head's rule: copy what followed the last time this token was read), so a copied list moves on
            self.copy_q_token = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
            self.copy_k_previous = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
            self.copy_gate = nn.Linear(cfg.d_model, 1)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, cache: list | None = None) -> tuple[torch.Tensor, list]:
        """Logits of ``tokens`` at ``positions``; ``cache`` (from the previous call) holds each block's keys and
        values, then the last ``shift`` input embeddings, then the copying read-out's keys and token ids."""
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device)[None]
        n = len(self.blocks)
        x = self.tok(tokens)
        recent = None
        if self.shift is not None:
            x, recent = self._shifted(x, attn_mask, None if cache is None else cache[n])
        x = x + self.pos(positions)
        new_cache: list = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, attn_mask, None if cache is None else cache[i])
            new_cache.append(kv)
        h = self.ln(x)
        if not self.cfg.copying:
            return self.head(h), [*new_cache, recent, None]
        cached = None if cache is None else cache[n + 1]
        if attn_mask is None:
            k = h.shape[1] + (0 if cached is None else cached[1].shape[1])
            attn_mask = torch.ones((h.shape[1], k), dtype=torch.bool, device=h.device).tril(k - h.shape[1])[None, None]
        # the last query is a real token: its row says which keys are (left padding is not)
        queries, keys, ids = self._pointer_inputs(h, tokens, cached, attn_mask[:, 0, -1])
        attention = self._pointer(queries, keys, attn_mask[:, 0])
        copied = self._on_tokens(attention, ids[:, None, :].expand(-1, h.shape[1], -1))
        return self._mixed(self.head(h), h, copied), [*new_cache, recent, (keys, ids)]

    def _pointer_inputs(self, h: torch.Tensor, tokens: torch.Tensor, cached: tuple[torch.Tensor, torch.Tensor] | None,
                        real: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The pointer's queries ``[B, T, D]`` at the ``T`` new positions (features ``h``, ids ``tokens``), and its
        keys ``[B, K, D]`` and token ids ``[B, K]`` over every position so far (``cached``: the earlier ones');
        ``real`` ``[B, K]`` (or broadcast): which positions hold a token, not padding."""
        t = tokens.shape[1]
        ids = tokens if cached is None else torch.cat([cached[1], tokens], 1)
        previous = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], 1)[:, -t:]
        follows = torch.cat([torch.zeros_like(real[:, :1]), real[:, :-1]], 1)[:, -t:, None]  # a token before it
        keys = self.copy_k(h) + self.copy_k_previous(self.tok(previous)) * follows.to(h.dtype)
        if cached is not None:
            keys = torch.cat([cached[0], keys], 1)
        return self.copy_q(h) + self.copy_q_token(self.tok(tokens)), keys, ids

    def _pointer(self, queries: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Attention ``[B, T, K]`` from each query over the keys ``allowed`` ``[B, T, K]`` (or broadcast)."""
        scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
        return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)

    def _on_tokens(self, attention: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``attention`` ``[..., K]`` over positions holding ``ids`` ``[..., K]``, summed by token: ``[..., V]``."""
        out = torch.zeros((*attention.shape[:-1], self.cfg.vocab_size), dtype=attention.dtype, device=attention.device)
        return out.scatter_add_(-1, ids, attention)

    def _mixed(self, logits: torch.Tensor, h: torch.Tensor, copied: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the mixture ``(1 - g) softmax(logits) + g copied``, ``g`` the gate read from ``h``."""
        gate = self.copy_gate(h)
        return torch.logaddexp(F.logsigmoid(-gate) + torch.log_softmax(logits.float(), -1),
                               F.logsigmoid(gate) + copied.float().clamp_min(1e-30).log())

    def logits_at(self, tokens: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, V]`` predicting the token after each position where ``chosen`` ``[B, T]`` is set, of
        right-padded ``tokens`` ``[B, T]``: the vocabulary's read-out computed at those positions alone."""
        h = self.features(tokens)
        if not self.cfg.copying:
            return self.head(h[chosen])
        t = tokens.shape[1]
        causal = torch.ones((t, t), dtype=torch.bool, device=h.device).tril()[None]
        queries, keys, _ = self._pointer_inputs(h, tokens, None, causal[:, -1])
        attention = self._pointer(queries, keys, causal)[chosen]  # [N, T]: the chosen positions' alone
        copied = self._on_tokens(attention, tokens[chosen.nonzero()[:, 0]])
        return self._mixed(self.head(h[chosen]), h[chosen], copied)

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """What the read-out (``head``) reads at each position of right-padded ``tokens``."""
        x = self.tok(tokens)
        if self.shift is not None:
            x, _ = self._shifted(x, None, None)
        x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device)[None])
        for block in self.blocks:
            x, _ = block(x, None, None)
        return self.ln(x)

    def _shifted(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                 recent: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``x_t + sum_j shift[j - 1] * x_{t-j}`` for j in 1..shift, with the embeddings before the sequence (and of
        left padding) taken as 0; and the last ``shift`` embeddings, for the next call."""
        b, t, d = x.shape
        k = self.cfg.shift
        if attn_mask is not None:  # the last query is a real token: its row says which keys are (padding is not)
            x = x * attn_mask[:, 0, -1, -t:, None].to(x.dtype)
        past = torch.zeros((b, k, d), dtype=x.dtype, device=x.device) if recent is None else recent
        seq = torch.cat([past, x], 1)  # [B, k + t, D]
        out = x
        for j in range(1, k + 1):
            out = out + self.shift[j - 1] * seq[:, k - j: k - j + t]
        return out, seq[:, -k:]


class TinyPolicy(CausalPolicy):
    """The built-in policy: a ``TinyTransformer`` initialised from ``seed``, on ``device``. Its read-out weights start
    at zero, so the first policy is ``softmax(logit_prior)`` whatever the context (None: uniform); a tokenizer says
    which of its tokens a model should start out speaking (``TinyTokenizer.logit_prior``)."""

    def __init__(self, config: TinyConfig, *, device: str | torch.device = "auto", seed: int = 0,
                 logit_prior: Sequence[float] | None = None) -> None:
        self.config = config
        self.vocab_size = config.vocab_size
        self.max_len = config.max_len
        self.device = resolve_device(device)
        module = TinyTransformer(config)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in module.named_parameters():
                if name.startswith("head."):
                    p.zero_()
                elif p.dim() >= 2:
                    p.normal_(0.0, 0.02, generator=gen)
                elif name.endswith("bias"):
                    p.zero_()
            if module.shift is not None:  # gains of the order of the token's own: the taps are read from the start
                module.shift.normal_(0.0, 0.5, generator=gen)
            if config.copying:  # the pointer's share starts at 0.25%: the first policy is, all but, the prior's
                module.copy_gate.bias.fill_(COPY_GATE_START)
            if logit_prior is not None:
                if len(logit_prior) != config.vocab_size:
                    raise ValueError(f"logit_prior has {len(logit_prior)} entries for {config.vocab_size} tokens")
                module.head.bias.copy_(torch.tensor([float(x) for x in logit_prior]))
        self.module = module.to(self.device)

    def _step(self, tokens, positions, attn_mask, cache):
        return self.module(tokens, positions, attn_mask, cache)

    def _logits(self, tokens):
        return self.module(tokens)[0]

    def _logits_at(self, tokens, chosen):
        return self.module.logits_at(tokens, chosen)

    def save(self, path: str | Path) -> None:
        torch.save({"config": asdict(self.config), "state": self.state_dict()}, Path(path))

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "auto") -> TinyPolicy:
        data = torch.load(Path(path), map_location="cpu", weights_only=True)
        policy = cls(TinyConfig(**data["config"]), device=device)
        policy.load_state_dict(data["state"])
        return policy
