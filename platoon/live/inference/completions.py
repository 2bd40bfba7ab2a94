"""One completion request to a vLLM server, as the trainer's service and a rollout worker both make it.

The wire format lives here so that the two places that talk to a server say the same thing: ``completion_payload``
(tokens in: the prompt's ids, one log-probability per sampled token, the renderer's stops as the only ones; its
arguments checked, ``ValueError``), ``post_json`` (a server's JSON answer; ``ServerFailed`` when it does not
answer, times out or answers 5xx, ``InferenceError`` when it refuses, 4xx), ``first_choice`` and ``sample_of``
(tokens out: exactly the ids the server sampled and their log-probabilities, cut at a stop of several tokens).
Which server a request goes to, and which policy version it ran on, the trainer's ``VLLMService`` decides.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platoon.live.launch.errors import TrainError

__all__ = ["InferenceError", "Placement", "ServerFailed", "completion_payload", "first_choice", "post_json", "routing_id",
           "sample_of", "words"]

Stops = tuple[tuple[int, ...], ...]


class InferenceError(TrainError):
    """A request no server could answer, or one a server refused."""


class ServerFailed(Exception):
    """A server's failure to answer (connection, timeout, 5xx): the server is marked down, the request retried."""


@dataclass(frozen=True)
class Placement:
    """Where and on what a request ran, as the trainer's service decided and saw it: the policy ``version`` (the
    oldest), the ``versions`` when an update fell inside it, the server (its index) and its load meanwhile, and the
    answer's routing id."""

    version: int
    versions: tuple[int, ...] = ()
    server: int | None = None
    concurrency: float = 0.0
    routing_id: str | None = None

    def sample(self, tokens: tuple[int, ...], logprobs: tuple[float, ...]) -> Any:
        from platoon.live.inference.service import Sample

        return Sample(tokens, logprobs, self.version, routing_id=self.routing_id, versions=self.versions,
                      server=self.server, concurrency=self.concurrency)


def completion_payload(served_name: str, prompt_tokens: Sequence[int], *, max_new_tokens: int, temperature: float,
                       seed: int | None, stop: Collection[Sequence[int]]) -> tuple[dict[str, Any], Stops]:
    """The ``/v1/completions`` body of a request and its stops (``seed`` None: to be set before it is sent);
    ``ValueError`` for arguments no server could serve."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"sample: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"sample: temperature must be at least 0, got {temperature!r}")
    stops = tuple(tuple(int(t) for t in s) for s in stop)
    if any(not s for s in stops):
        raise ValueError("sample: a stop sequence must be non-empty")
    payload = {
        "model": served_name, "prompt": [int(t) for t in prompt_tokens], "max_tokens": max_new_tokens,
        "temperature": float(temperature), "seed": None if seed is None else int(seed) % 2**63, "logprobs": 0,
        "return_tokens_as_token_ids": True, "return_token_ids": True, "ignore_eos": True, "skip_special_tokens": False,
        "stop_token_ids": sorted({s[0] for s in stops if len(s) == 1}),
    }
    return payload, stops


async def post_json(client: Any, url: str, path: str, timeout_s: float, **kwargs: Any) -> Any:
    """The JSON of the server at ``url``'s answer to ``path`` (``client``: an ``httpx.AsyncClient`` based there);
    ``ServerFailed`` when it does not answer within ``timeout_s`` (the whole answer's, not each read's), answers
    5xx or not JSON, ``InferenceError`` when it refuses (4xx)."""
    import httpx

    try:
        async with asyncio.timeout(timeout_s):
            r = await client.post(path, **kwargs)
    except httpx.TransportError as exc:
        raise ServerFailed(words(exc)) from None
    except TimeoutError:
        raise ServerFailed(f"no answer to {path} within {timeout_s:g} s") from None
    if r.status_code >= 500:
        raise ServerFailed(f"HTTP {r.status_code} from {path}: {r.text[:300]}")
    if r.status_code >= 400:
        raise InferenceError(f"inference server {url} refused {path} (HTTP {r.status_code}): {r.text[:300]}")
    try:
        return r.json() if r.content else None
    except ValueError:
        raise ServerFailed(f"an answer of {path} that is not JSON: {r.text[:200]}") from None


def first_choice(body: Any) -> Mapping[str, Any]:
    """The one choice of a ``/v1/completions`` answer; ``ServerFailed`` for an answer without one."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not choices:
        raise ServerFailed(f"an answer without choices: {str(body)[:200]}")
    return choices[0]


def sample_of(choice: Mapping[str, Any], max_tokens: int, stops: Stops) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The sampled ids of ``choice`` and their log-probabilities, cut at the first stop of several tokens;
    ``InferenceError`` when the server's answer does not hold one log-probability per id, or too many ids."""
    from platoon.live.inference.service import cut_at_stop

    tokens = tuple(int(t) for t in choice.get("token_ids") or ())
    logprobs = tuple(float(x) for x in ((choice.get("logprobs") or {}).get("token_logprobs") or ()))
    if len(tokens) != len(logprobs) or len(tokens) > max_tokens:
        raise InferenceError(f"a server answered {len(tokens)} tokens and {len(logprobs)} log-probabilities "
                             f"(at most {max_tokens} asked for)")
    long_stops = [s for s in stops if len(s) > 1]
    cut = cut_at_stop(tokens, long_stops) if long_stops else tokens
    return cut, logprobs[:len(cut)]


def routing_id(choice: Mapping[str, Any]) -> str | None:
    """The server's ``routed_experts`` as the sample's routing id (a compact, stable string); None: none sent."""
    routed = choice.get("routed_experts")
    if routed is None:
        return None
    return hashlib.sha256(json.dumps(routed, separators=(",", ":")).encode()).hexdigest()[:32]


def words(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
