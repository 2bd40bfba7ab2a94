"""The tiny policy: seeded batched sampling (batch-independent), scoring, errors, weights, devices."""

from __future__ import annotations

import collections
import math

import pytest
import torch

from platoon.config.models import ModelConfig
from platoon.live.inference.model import (
    Generation,
    PolicyModel,
    TinyConfig,
    TinyPolicy,
    derive_seed,
    gumbel_noise,
    pad_right,
    resolve_device,
)
from platoon.live.inference.model_kinds import build_causal_policy

PROMPTS = [[1, 10, 12, 2], [1, 5, 2], [1, 30, 31, 2, 7, 3]]


@pytest.fixture(scope="module", params=[(0, False), (4, False), (4, True)], ids=["plain", "shift", "copy"])
def policy(request) -> TinyPolicy:
    """The tiny model, plain, with the causal-convolution taps and with the copying read-out as well (whose state
    the KV cache carries too)."""
    shift, copy = request.param
    p = TinyPolicy(TinyConfig(vocab_size=40, max_len=32, shift=shift, copying=copy), device="cpu", seed=3)
    # The read-out starts at zero (a uniform policy); give it shape so that tests see a peaked distribution.
    with torch.no_grad():
        p.module.head.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
        if copy:  # a pointer that prefers some positions, and a gate half open
            p.module.copy_q.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
            p.module.copy_gate.bias.fill_(0.0)
    return p


def test_masked_logprobs_are_the_scoring_s_at_the_masked_positions(policy):
    seqs = [[1, 10, 12, 2, 5, 6], [1, 5, 2, 7, 0, 0], [1, 30, 31, 2, 7, 3]]
    masks = [[0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]]
    full = policy.policy_logprobs(seqs, masks)
    chosen = torch.tensor(masks) > 0
    assert policy.masked_logprobs(torch.tensor(seqs), torch.tensor(masks)).tolist() == pytest.approx(
        full[chosen].tolist(), abs=1e-5)


def test_size_and_protocol():
    p = TinyPolicy(TinyConfig(vocab_size=31, max_len=64), device="cpu")
    assert isinstance(p, PolicyModel)
    assert 90_000 <= p.parameter_count() <= 120_000
    # A zero read-out: every token equally likely at first.
    lp = p.policy_logprobs([[1, 2, 3]], [[0, 1, 1]])
    assert lp[0, 1:].tolist() == pytest.approx([-math.log(31)] * 2)


def test_same_seed_same_tokens_whatever_the_batch(policy):
    together = policy.sample(PROMPTS, max_new_tokens=5, temperature=1.0, seeds=[11, 12, 13])
    alone = [policy.sample([p], max_new_tokens=5, temperature=1.0, seeds=[s])[0]
             for p, s in zip(PROMPTS, [11, 12, 13], strict=True)]
    padded = policy.sample(PROMPTS[::-1] + [[1] * 20], max_new_tokens=5, temperature=1.0, seeds=[13, 12, 11, 99])
    for a, b, c in zip(together, alone, padded[2::-1], strict=True):
        assert a.tokens == b.tokens == c.tokens
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert a.logprobs == pytest.approx(c.logprobs, abs=1e-5)
    other = policy.sample(PROMPTS, max_new_tokens=5, temperature=1.0, seeds=[21, 22, 23])
    assert [g.tokens for g in other] != [g.tokens for g in together]


def test_logprobs_are_the_sampling_distributions_and_match_scoring(policy):
    for temperature in (1.0, 0.7):
        gens = policy.sample(PROMPTS, max_new_tokens=4, temperature=temperature, seeds=[1, 2, 3])
        seqs = [p + list(g.tokens) for p, g in zip(PROMPTS, gens, strict=True)]
        masks = [[0] * len(p) + [1] * len(g.tokens) for p, g in zip(PROMPTS, gens, strict=True)]
        scored = policy.policy_logprobs(seqs, masks, temperature=temperature)
        for i, (p, g) in enumerate(zip(PROMPTS, gens, strict=True)):
            assert scored[i, len(p):len(p) + len(g.tokens)].tolist() == pytest.approx(g.logprobs, abs=1e-5)
            assert scored[i, :len(p)].abs().sum() == 0


def test_sampling_frequencies_follow_the_softmax(policy):
    n = 6000
    gens = policy.sample([[1, 10]] * n, max_new_tokens=1, temperature=1.0, seeds=range(n))
    counts = collections.Counter(g.tokens[0] for g in gens)
    with torch.no_grad():
        probs = torch.softmax(policy.module(torch.tensor([[1, 10]]))[0][0, -1], -1)
    # A chi-square statistic over the tokens expected at least 5 times: 99.9% quantile for < 40 dof is < 75.
    chi2 = sum((counts.get(t, 0) - n * float(q)) ** 2 / (n * float(q)) for t, q in enumerate(probs) if n * q >= 5)
    assert chi2 < 75
    assert gens[0].logprobs[0] == pytest.approx(math.log(float(probs[gens[0].tokens[0]])), abs=1e-5)


def test_rows_with_short_limits_near_the_last_position_run_on_with_a_long_one(policy):
    # row 0 fills the model's 32 positions exactly; row 1's longer limit keeps the batch going past row 0's end
    gens = policy.sample([[1] * 30, [1, 2]], max_new_tokens=[2, 8], temperature=1.0, seeds=[1, 2])
    assert [len(g.tokens) for g in gens] == [2, 8]
    alone = policy.sample([[1] * 30], max_new_tokens=2, temperature=1.0, seeds=[1])[0]
    assert gens[0].tokens == alone.tokens


def test_greedy_per_row_limits_and_stop_sequences(policy):
    gens = policy.sample(PROMPTS, max_new_tokens=[3, 0, 5], temperature=[0.0, 1.0, 1.0], seeds=[1, 2, 3])
    assert [len(g.tokens) for g in gens] == [3, 0, 5]
    assert gens[1] == Generation((), ())
    with torch.no_grad():
        first = int(policy.module(torch.tensor([PROMPTS[0]]))[0][0, -1].argmax())
    assert gens[0].tokens[0] == first
    again = policy.sample(PROMPTS[:1], max_new_tokens=3, temperature=0.0, seeds=[999])[0]
    assert again.tokens == gens[0].tokens
    free = policy.sample(PROMPTS[2:], max_new_tokens=5, temperature=1.0, seeds=[3])[0]
    stop = free.tokens[1]
    stopped = policy.sample(PROMPTS[2:], max_new_tokens=5, temperature=1.0, seeds=[3], stop=[[(stop,)]])[0]
    cut = free.tokens.index(stop) + 1
    assert stopped.tokens == free.tokens[:cut]


def test_a_stop_sequence_of_several_tokens_ends_the_row_that_ends_with_it_and_stays_in_it(policy):
    free = policy.sample(PROMPTS, max_new_tokens=6, temperature=1.0, seeds=[1, 2, 3])
    pair = free[2].tokens[2:4]
    never = (free[0].tokens[0], 39, 39, 39)
    stopped = policy.sample(PROMPTS, max_new_tokens=6, temperature=1.0, seeds=[1, 2, 3],
                            stop=[[never], [], [never, pair]])
    assert stopped[2].tokens == free[2].tokens[:4] and stopped[2].logprobs == free[2].logprobs[:4]
    assert stopped[0] == free[0] and stopped[1] == free[1]  # rows without a match run to their limit
    with pytest.raises(ValueError, match="non-empty ids in 0..39"):
        policy.sample(PROMPTS[:1], max_new_tokens=2, temperature=1.0, seeds=[1], stop=[[()]])


@pytest.mark.parametrize("prompts, limit, match", [
    ([[]], 1, "at least one token"),
    ([[1, 40]], 1, "0..39"),
    ([[1] * 30], 3, "exceeds the model's 32"),
])
def test_requests_the_model_cannot_serve(policy, prompts, limit, match):
    with pytest.raises(ValueError, match=match):
        policy.sample(prompts, max_new_tokens=limit, temperature=1.0, seeds=[0])
    with pytest.raises(ValueError, match="one entry per row"):
        policy.sample([[1], [2]], max_new_tokens=1, temperature=1.0, seeds=[0])


def test_scoring_checks_its_inputs_and_gives_entropy(policy):
    with pytest.raises(ValueError, match="position 0"):
        policy.policy_logprobs([[1, 2]], [[1, 1]])
    with pytest.raises(ValueError, match="differ"):
        policy.policy_logprobs(torch.zeros((1, 3), dtype=torch.long), torch.zeros((1, 2)))
    lp, ent = policy.policy_logprobs([[1, 2, 3], [4, 5]], [[0, 1, 1], [0, 1]], with_entropy=True)
    assert lp.shape == ent.shape == (2, 3)
    assert lp[1, 2] == 0 and ent[1, 2] == 0 and ent[0, 0] == 0
    assert 0 < float(ent[0, 1].detach()) <= math.log(40) + 1e-5
    # Scoring is differentiable; sampling leaves the module in the mode it found it.
    lp.sum().backward()
    assert policy.module.head.weight.grad is not None
    policy.module.zero_grad(set_to_none=True)
    policy.module.train()
    policy.sample([[1]], max_new_tokens=1, temperature=1.0, seeds=[0])
    assert policy.module.training


def test_weights_round_trip_and_state_dict_is_a_detached_copy(policy, tmp_path):
    path = tmp_path / "tiny.pt"
    policy.save(path)
    loaded = TinyPolicy.load(path, device="cpu")
    assert loaded.config == policy.config
    a = policy.sample(PROMPTS, max_new_tokens=3, temperature=1.0, seeds=[4, 5, 6])
    b = loaded.sample(PROMPTS, max_new_tokens=3, temperature=1.0, seeds=[4, 5, 6])
    assert a == b
    state = policy.state_dict()
    state["head.bias"] += 1.0
    assert float(policy.module.head.bias.detach().abs().sum()) == 0.0
    fresh = TinyPolicy(policy.config, device="cpu", seed=99)
    assert fresh.sample(PROMPTS, max_new_tokens=3, temperature=1.0, seeds=[4, 5, 6]) != a
    fresh.load_state_dict(policy.state_dict())
    assert fresh.sample(PROMPTS, max_new_tokens=3, temperature=1.0, seeds=[4, 5, 6]) == a


def test_initialisation_is_a_function_of_the_seed():
    cfg = TinyConfig(vocab_size=12, max_len=8)
    a, b, c = (TinyPolicy(cfg, device="cpu", seed=s) for s in (1, 1, 2))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.state_dict()["tok.weight"], c.state_dict()["tok.weight"])


def test_device_choice(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_build_causal_policy_sizes_the_tiny_model_from_the_config_and_the_tokenizer():
    cfg = ModelConfig(d_model=32, n_layers=1, n_heads=2, device="cpu")
    p = build_causal_policy("tiny", cfg, vocab_size=31, max_len=20, seed=5)
    assert isinstance(p, TinyPolicy)
    assert (p.config.vocab_size, p.config.d_model, p.config.n_layers, p.config.n_heads) == (31, 32, 1, 2)
    assert p.config.max_len == 20
    prior = [0.0] * 30 + [-3.0]
    biased = build_causal_policy("tiny", cfg, vocab_size=31, max_len=20, logit_prior=prior)
    (gen,) = biased.sample([[1, 2]], max_new_tokens=1, temperature=1.0, seeds=[0])
    # the read-out starts at zero weights: the first policy is softmax(prior) whatever the context
    expected = torch.log_softmax(torch.tensor(prior), -1)[gen.tokens[0]]
    assert gen.logprobs[0] == pytest.approx(float(expected), abs=1e-5)
    with pytest.raises(ValueError, match="logit_prior has 2 entries"):
        build_causal_policy("tiny", cfg, vocab_size=31, max_len=20, logit_prior=[0.0, 0.0])
    with pytest.raises(FileNotFoundError, match="'no/such/dir' is neither a local directory holding a checkpoint nor a model id in the Hugging Face cache"):
        build_causal_policy("no/such/dir", cfg, vocab_size=31, max_len=20)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        TinyConfig(vocab_size=10, d_model=30, n_heads=4)


def test_gumbel_noise_is_a_pure_function_of_seed_step_and_token():
    seeds = torch.tensor([0, 1, 2**62, 12345], dtype=torch.int64)
    a = gumbel_noise(seeds, 3, 50)
    assert torch.equal(a, gumbel_noise(seeds, 3, 50))
    assert torch.equal(a[:, :20], gumbel_noise(seeds, 3, 20))
    assert torch.equal(a[2:3], gumbel_noise(seeds[2:3], 3, 50))
    assert not torch.equal(a, gumbel_noise(seeds, 4, 50))
    big = gumbel_noise(torch.arange(400, dtype=torch.int64), 0, 500).flatten()
    # Gumbel(0, 1): mean is the Euler-Mascheroni constant, variance pi^2 / 6.
    assert float(big.mean()) == pytest.approx(0.5772, abs=0.01)
    assert float(big.var()) == pytest.approx(math.pi**2 / 6, abs=0.03)
    assert torch.isfinite(big).all()


def test_derive_seed_and_pad_right():
    assert derive_seed(0, (1, 2), 3) == derive_seed(0, (1, 2), 3)
    assert derive_seed(0, (1, 2), 3) != derive_seed(0, (1, 2), 4)
    assert 0 <= derive_seed("x") < 2**63
    assert pad_right([[1, 2, 3], [4]]).tolist() == [[1, 2, 3], [4, 0, 0]]
    assert pad_right([[0.5], []], value=-1.0, dtype=torch.float32).tolist() == [[0.5], [-1.0]]


def _copy_task_accuracy(copying: bool, steps: int = 200, length: int = 4) -> float:
    """Train to repeat, after a marker, a list of ``length`` items read before it (items 10-39), then an end token;
    then ask for lists of items 40-59, which no training sequence held: the share of lists written right, greedily."""
    p = TinyPolicy(TinyConfig(vocab_size=60, max_len=24, d_model=32, n_layers=1, n_heads=4, copying=copying),
                   device="cpu", seed=0)
    opt = torch.optim.Adam(p.module.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        items = torch.stack([torch.randperm(30, generator=gen)[:length] + 10 for _ in range(32)])
        one, two, three = (torch.full((32, 1), k) for k in (1, 2, 3))
        seq = torch.cat([one, items, two, items, three], 1)
        mask = torch.zeros_like(seq)
        mask[:, length + 2:] = 1  # the copy and its end
        loss = -p.masked_logprobs(seq, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    lists = [(torch.randperm(20, generator=gen)[:length] + 40).tolist() for _ in range(20)]
    gens = p.sample([[1, *items, 2] for items in lists], max_new_tokens=length + 1, temperature=0.0,
                    seeds=list(range(20)))
    return sum(list(g.tokens) == [*items, 3] for g, items in zip(gens, lists, strict=True)) / len(lists)


def test_the_copying_read_out_writes_lists_of_tokens_no_training_sequence_wrote():
    assert _copy_task_accuracy(copying=True) >= 0.9
    assert _copy_task_accuracy(copying=False) == 0.0  # the vocabulary's read-out learnt them unlikely


def test_the_copying_read_out_starts_all_but_at_the_prior():
    p = TinyPolicy(TinyConfig(vocab_size=31, max_len=16, copying=True), device="cpu")
    lp = p.policy_logprobs([[1, 2, 3]], [[0, 1, 1]])
    assert lp[0, 1:].tolist() == pytest.approx([-math.log(31)] * 2, abs=0.03)
