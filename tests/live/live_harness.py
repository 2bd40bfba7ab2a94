"""Fakes and a virtual clock for tests of the live runtime (no torch model, no real waiting).

- ``VirtualLoop``: an asyncio event loop whose clock jumps to the next timer whenever nothing is ready, so scripted
  rollout durations (``asyncio.sleep``) cost no real time; while work runs in a thread (``asyncio.to_thread``) the
  clock stands still and the loop waits for it for real. ``run_virtual(coro)`` runs a coroutine on a fresh one.
- ``FakeService``: a model service that answers at once with seeded tokens; ``FakeTrainer``: records the datums of
  each step (plain or ``async`` ``train_step``, with an optional scripted duration).
- ``ScriptedWorkflow``: a ``GroupRolloutWorkflow`` whose ``arun_episode_single`` sleeps a scripted duration and
  returns a scripted reward (or raises), optionally signalling its first model call and leaving a background
  teardown.
- ``check_event_log``: a resumed run's event log holds every draw's fate once and every position once.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dispatch_harness  # noqa: F401  (tests/policy's scripted runtime, for comparisons; tests/conftest.py puts it on the path)

from platoon.live.rollouts.lease import background_teardown, first_model_call
from platoon.live.rollouts.workflow import GroupRolloutWorkflow, GroupRow, Rollout
from platoon.live.training.datums import Trajectory, Turn


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self) -> None:
        self.real = selectors.DefaultSelector()
        self.loop: VirtualLoop | None = None

    def register(self, fileobj, events, data=None):
        return self.real.register(fileobj, events, data)

    def unregister(self, fileobj):
        return self.real.unregister(fileobj)

    def modify(self, fileobj, events, data=None):
        return self.real.modify(fileobj, events, data)

    def get_map(self):
        return self.real.get_map()

    def close(self) -> None:
        self.real.close()

    def select(self, timeout=None):
        loop = self.loop
        assert loop is not None
        if time.monotonic() > loop.deadline:
            raise TimeoutError("the virtual-clock test ran past its real-time limit")
        if loop.threads > 0:  # work off the loop: the clock stands still while it runs
            return self.real.select(0.05 if timeout is None else min(timeout, 0.05))
        events = self.real.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            return self.real.select(0.05)
        loop.virtual += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, real_timeout_s: float = 30.0) -> None:
        selector = _VirtualSelector()
        super().__init__(selector=selector)
        selector.loop = self
        self.virtual = 0.0
        self.threads = 0
        self.deadline = time.monotonic() + real_timeout_s

    def time(self) -> float:
        return self.virtual

    def run_in_executor(self, executor, func, *args):
        self.threads += 1
        fut = super().run_in_executor(executor, func, *args)
        fut.add_done_callback(self._thread_done)
        return fut

    def _thread_done(self, _fut) -> None:
        self.threads -= 1


def run_virtual(coro, *, real_timeout_s: float = 30.0):
    loop = VirtualLoop(real_timeout_s)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


@dataclass(frozen=True)
class Sample:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    version: int


class FakeService:
    """Answers each ``sample`` at once (or after ``delay_s``) with one token drawn from its seed."""

    def __init__(self, vocab: int = 16, delay_s: float = 0.0) -> None:
        self.vocab, self.delay_s = vocab, delay_s
        self.version = 0
        self.published: list[int] = []
        self.calls = 0

    async def sample(self, context, *, max_new_tokens=1, temperature=1.0, seed=0, stop=()):
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        token = 7 + seed % (self.vocab - 7)
        return Sample((token,), (-1.0,), self.version)

    def publish(self, weights, version: int) -> None:
        self.version = version
        self.published.append(version)


class FakeTrainer:
    """Records each step's datums; ``duration(n_datums)`` seconds of (virtual) training when ``asynchronous``."""

    def __init__(self, duration: Callable[[int], float] | None = None, publish_s: float = 0.0) -> None:
        self.steps: list[tuple[int, list]] = []
        self.duration = duration

    def train_step(self, datums, *, version: int) -> dict[str, float]:
        self.steps.append((version, list(datums)))
        return {"datums": float(len(datums))}

    def policy_state_dict(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {"steps": len(self.steps)}


class AsyncTrainer(FakeTrainer):
    async def train_step(self, datums, *, version: int) -> dict[str, float]:  # type: ignore[override]
        if self.duration is not None:
            await asyncio.sleep(self.duration(len(datums)))
        return FakeTrainer.train_step(self, datums, version=version)


class SleepyService(FakeService):
    def __init__(self, publish_s: float = 0.0) -> None:
        super().__init__()
        self.publish_s = publish_s

    async def publish(self, weights, version: int) -> None:  # type: ignore[override]
        if self.publish_s:
            await asyncio.sleep(self.publish_s)
        FakeService.publish(self, weights, version)


@dataclass(frozen=True)
class Outcome:
    """A scripted rollout: runs ``seconds``, scores ``reward``; raises ``error`` at its end when set; leaves a
    background teardown of ``teardown_s``."""

    seconds: float
    reward: float = 0.0
    error: BaseException | None = None
    teardown_s: float = 0.0
    first_call_s: float | None = None  # when set, its first model call is this many seconds into ``seconds``


def trajectory(row: GroupRow, reward: float, seconds: float | None = None, version: int | None = None) -> Trajectory:
    turn = Turn((1, 2), (3 + (row.member or 0),), (-0.5,), row.version if version is None else version)
    return Trajectory(row.task_id, (turn,), reward, reward >= 1.0, seconds)


class ScriptedWorkflow(GroupRolloutWorkflow):
    """``script(row) -> Outcome`` for each member; ``log`` records (time, what, key, member)."""

    def __init__(self, script: Callable[[GroupRow], Outcome], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script
        self.log: list[tuple[float, str, tuple[int, int], int | None]] = []

    async def arun_episode_single(self, row: GroupRow) -> Rollout:
        loop = asyncio.get_running_loop()
        out = self.script(row)
        version = getattr(self.service, "version", row.version)  # the policy the rollout samples from
        self.log.append((loop.time(), "start", row.key, row.member))
        try:
            if out.first_call_s is not None:
                await asyncio.sleep(out.first_call_s)
                first_model_call()
                self.log.append((loop.time(), "first_call", row.key, row.member))
                await asyncio.sleep(out.seconds - out.first_call_s)
            else:
                await asyncio.sleep(out.seconds)
        except asyncio.CancelledError:
            self.log.append((loop.time(), "cancelled", row.key, row.member))
            raise
        if out.teardown_s:
            background_teardown(asyncio.sleep(out.teardown_s))
        if out.error is not None:
            self.log.append((loop.time(), "raise", row.key, row.member))
            raise out.error
        self.log.append((loop.time(), "end", row.key, row.member))
        return Rollout(trajectory(row, out.reward, out.seconds, version))


def live_runtime(d, workflow, trainer, service, *, start_limit=None, schedule=None, members=None, **kwargs):
    """A ``LiveRuntime`` over dispatcher ``d``, its driver built with these settings (as ``build_policy`` does;
    ``schedule``: a ``platoon.policy.driver.Schedule``, None: no evaluation and only the launch and final saves)."""
    from platoon.live.runtime import LiveRuntime
    from platoon.policy.driver import Driver

    driver = Driver(d, start_limit=start_limit, members=members, schedule=schedule, runtime="live")
    return LiveRuntime(driver, workflow, trainer, service, **kwargs)


def die_after_row(monkeypatch, step: int) -> None:
    """The next run in this process dies (KeyboardInterrupt) right after it writes step ``step``'s metrics row, once
    (a resume afterwards runs on)."""
    from platoon.runs.session import RunSession

    original, died = RunSession.write_row, []

    def dying(self, decision, outbox):
        original(self, decision, outbox)
        if decision.row["step"] == step and not died:
            died.append(True)
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(RunSession, "write_row", dying)


def save_tiny_llama(path, *, vocab_size: int = 64, context: int = 128):
    """Write a small randomly initialised Hugging Face causal LM (seeded) to the directory ``path`` and return it: a
    local checkpoint for ``train.model_name``, no downloads. Needs transformers (callers skip without it)."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(str(path))
    return path


def check_event_log(events: list[dict], *, steps: int, batch_size: int) -> None:
    """Every draw key gets exactly one fate, except a key that a later draw ``reissues`` (it gets none, and its
    reissue carries its position on); every position of the run's order ends exactly once."""
    drawn: dict[tuple[int, int], dict] = {}
    reissued: set[tuple[int, int]] = set()
    fates: dict[tuple[int, int], list[str]] = {}
    for e in events:
        key = (e.get("start"), e.get("seq"))
        if e["event"] == "draw":
            assert key not in drawn, f"draw {key} twice"
            drawn[key] = e
            if "reissues" in e:
                old = tuple(e["reissues"])
                assert old in drawn and old not in reissued, f"{key} reissues {old}, which is not an open draw"
                assert drawn[old]["position"] == e["position"] and drawn[old]["task_id"] == e["task_id"]
                assert old not in fates, f"{old} was reissued after its fate {fates[old]}"
                reissued.add(old)
        elif e["event"] == "fate":
            assert key in drawn, f"fate of {key}, never drawn"
            fates.setdefault(key, []).append(e["fate"])
    for key in drawn:
        if key in reissued:
            assert key not in fates, f"reissued {key} has a fate {fates[key]}"
        else:
            assert len(fates.get(key, [])) == 1, f"{key} has fates {fates.get(key)}"
    final = [drawn[k]["position"] for k in drawn if k not in reissued]
    assert sorted(final) == list(range(steps * batch_size)), "a position was trained twice or never"


def save_word_tokenizer(path, words):
    """Write a word-level Hugging Face tokenizer of ``words`` (and ``[UNK]``, id 0) to the directory ``path``, built
    here (no downloads): a checkpoint's own tokenizer for ``role_colon``."""
    import tokenizers
    import transformers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(words))}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(path))
    return path


def train_then_sigkill(run, args, env, *, after_rows: int, within_s: float, ready=lambda run: True,
                       command: str = "train"):
    """Start ``platoon <command> --out run`` (``train``, ``sft``) with ``args`` in a process and ``SIGKILL`` it once its ``metrics.jsonl``
    holds ``after_rows`` rows and ``ready(run)`` holds (failing if it ends first or takes longer than
    ``within_s``); the killed process."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from platoon.runs import read_jsonl

    proc = subprocess.Popen([sys.executable, "-m", "platoon", command, "--out", str(run), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(read_jsonl(metrics)) >= after_rows and ready(run):
            break
        time.sleep(0.01)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc
