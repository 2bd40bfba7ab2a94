"""The ``vllm`` engine of a run (``train.inference``): its servers, launched or given, and the service over them.

``VLLMEngine(cfg, model, version)`` is the run's model service. Until ``start(directory, ...)`` it holds only the
config; ``start`` (the runtime calls it before step 0) launches the servers when the config says so (``Launched``,
their logs in ``directory``; None: a scratch directory of its own, gone at ``aclose``, for a run that writes none) and waits for them with a progress line, builds the ``VLLMService`` over them (its
weights under ``train.inference.weights_dir``, else ``directory/weights``), checks each server and pushes the
model's weights, so that every rollout samples the policy the trainer holds, a resumed run's included. ``aclose``
stops what it launched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from platoon.live.inference.completions import Placement
from platoon.live.inference.direct import DirectTarget
from platoon.live.inference.launch import Launched
from platoon.live.inference.service import Sample
from platoon.live.inference.vllm import VLLMService
from platoon.live.inference.weights import WeightStore

__all__ = ["VLLMEngine"]

Log = Callable[[str, str], None]
Activity = Callable[[str], contextlib.AbstractContextManager[Callable[[str], None]]]


@contextlib.contextmanager
def _no_activity(description: str) -> Iterator[Callable[[str], None]]:
    yield lambda status: None


class VLLMEngine:
    """vLLM servers as a run's model service (see the module's doc)."""

    def __init__(self, cfg: Any, model: Any, version: int = 0) -> None:
        from platoon.live.inference.hf import resolve_model

        self.inference = cfg.train.inference
        self.served_name = cfg.train.model_name
        self.model_dir = resolve_model(cfg.train.model_name)
        self.seed = cfg.train.seed
        self.model = model
        self._version = int(version)
        self.service: VLLMService | None = None
        self.launched: Launched | None = None
        self._scratch: Any = None

    @property
    def version(self) -> int:
        return self.service.version if self.service is not None else self._version

    async def start(self, directory: Path | None, *, log: Log | None = None, activity: Activity | None = None) -> None:
        """Bring the servers up and the service over them (see the module's doc)."""
        if directory is None:
            import tempfile

            self._scratch = tempfile.TemporaryDirectory(prefix="platoon-inference-")
            directory = Path(self._scratch.name)
        inf = self.inference
        urls = list(inf.servers)
        if inf.launch is not None:
            self.launched = await asyncio.to_thread(Launched.start, inf.launch, self.model_dir, self.served_name,
                                                    directory)
            urls = self.launched.urls
            with (activity or _no_activity)(f"vLLM: starting {len(urls)} server(s)") as status:
                took = await self.launched.wait_healthy(
                    inf.launch.start_timeout_seconds,
                    on_wait=lambda ready, s: status(f"{ready}/{len(urls)} up after {s:.0f} s (logs: {directory})"))
            if log is not None:
                log("info", f"vLLM: {len(urls)} server(s) up in {took:.0f} s ({', '.join(urls)}; logs in {directory})")
        weights = WeightStore(Path(inf.weights_dir).expanduser() if inf.weights_dir else directory / "weights",
                              self.model_dir, keep=inf.keep_weights)
        self.service = VLLMService(urls, served_name=self.served_name, weights=weights,
                                   initial_weights=self.model.state_dict, version=self._version, seed=self.seed,
                                   in_flight=inf.in_flight, request_timeout_s=inf.request_timeout_seconds,
                                   retries=inf.retries, down_after_s=inf.down_after_seconds,
                                   recheck_s=inf.recheck_seconds)
        await self.service.start()

    def _started(self) -> VLLMService:
        if self.service is None:
            raise RuntimeError("the vLLM engine is used before its start()")
        return self.service

    async def sample(self, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                     seed: int | None = None, stop: Collection[Sequence[int]] = ()) -> Sample:
        return await self._started().sample(prompt_tokens, max_new_tokens=max_new_tokens, temperature=temperature,
                                            seed=seed, stop=stop)

    async def sample_placed(self, post: Callable[[str, int], Any], *, seed: int | None = None) -> Placement:
        return await self._started().sample_placed(post, seed=seed)

    @property
    def direct_target(self) -> DirectTarget | None:
        """What a rollout worker needs to post its own calls to the servers; None before the start."""
        return self.service.direct_target if self.service is not None else None

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        await self._started().publish(state_dict, version)

    def step_metrics(self) -> dict[str, float]:
        return self.service.step_metrics() if self.service is not None else {}

    @property
    def last_pause_s(self) -> float | None:
        """The last publish's pause (new requests held while the servers reloaded); None before the first."""
        return self.service.last_pause_s if self.service is not None else None

    async def aclose(self) -> None:
        try:
            if self.service is not None:
                await self.service.aclose()
        finally:
            if self.launched is not None:
                await asyncio.to_thread(self.launched.stop)
                self.launched = None
            if self._scratch is not None:
                self._scratch.cleanup()
                self._scratch = None
