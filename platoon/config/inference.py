"""``train.inference``: the engine rollouts sample from (this project's own section; platoon 0.4.0 has none).

``engine: builtin`` (the default) is the trainer's own model behind the batching service: the embedded demo. ``engine:
vllm`` samples from vLLM servers, either running ones (``servers``: their URLs) or ones platoon starts itself
(``launch``: the Python that has vLLM, how many, their ports and arguments), and pushes the trainer's weights to them
after each step (``platoon.live.inference``, docs/inference-engines.md). Rules between its keys and the rest of the
config are ``problems`` (checked with the config's other rules, in its one report).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from platoon.config.base import ConfigModel
from platoon.config.problems import Problem


class LaunchConfig(ConfigModel):
    """vLLM servers platoon starts with the run and stops with it (their logs under ``<run>/inference/``)."""

    python: str = Field(
        ..., min_length=1,
        description="The Python executable of the environment vLLM is installed in (it usually lives in its own): "
        "each server runs as `PYTHON -m vllm.entrypoints.openai.api_server`.",
    )
    servers: int = Field(1, ge=1, le=64, description="How many servers to start, each on the trainer's machine.")
    host: str = Field("127.0.0.1", min_length=1, description="The address the servers listen on.")
    port: int = Field(8100, ge=1024, le=65535 - 64, description="The first server's port; server i listens on "
                                                                "port + i.")
    args: list[str] = Field(
        default_factory=list,
        description="More arguments of the server, e.g. [--max-model-len, '1024', --dtype, float32]; platoon sets "
        "--model, --served-model-name, --host and --port itself.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="More environment variables of the servers, e.g. {VLLM_CPU_KVCACHE_SPACE: "
        "'1'} (platoon sets VLLM_SERVER_DEV_MODE=1 for the weight-sync endpoints)."
    )
    start_timeout_seconds: float = Field(
        900.0, gt=0, le=86_400, description="How long a server may take to answer /health before the run stops "
        "(a CPU build compiles for minutes).",
    )


class InferenceConfig(ConfigModel):
    """The engine rollouts sample from, and how the trainer's weights reach it."""

    engine: Literal["builtin", "vllm"] = Field(
        "builtin", description="builtin: the trainer's own model behind the batching service; vllm: vLLM servers.",
    )
    servers: list[str] = Field(
        default_factory=list, description="vllm: the base URLs of running servers (http://host:port), started with "
        "VLLM_SERVER_DEV_MODE=1 and serving train.model_name; or launch instead.",
    )
    launch: LaunchConfig | None = Field(None, description="vllm: servers platoon starts and stops with the run.")
    weights_dir: str | None = Field(
        None, min_length=1,
        description="Where the trainer writes each version's weights for the servers to load (Hugging Face layout); "
        "a path the servers see under the same name. Null: <run>/inference/weights.",
    )
    keep_weights: int = Field(3, ge=1, le=1000, description="The newest versions' weights kept on disk.")
    in_flight: Literal["abort", "keep"] = Field(
        "abort",
        description="Requests in flight across a weight update: abort (re-sent on the new weights) or keep (they go "
        "on; a sample records the versions its tokens came from, staleness counting from the oldest).",
    )
    request_timeout_seconds: float = Field(600.0, gt=0, le=86_400, description="One request's limit on a server.")
    retries: int = Field(3, ge=0, le=100, description="How often a failed request is tried again, on another server "
                                                      "when there is one.")
    down_after_seconds: float = Field(
        120.0, gt=0, le=86_400, description="When no server has answered for this long, the run stops (at its last "
        "checkpoint), naming each server and its error.",
    )
    recheck_seconds: float = Field(10.0, gt=0, le=3600, description="A failed server is tried again after this long.")
    correction: Literal["auto", "off", "tis"] = Field(
        "auto",
        description="Training-inference mismatch: tis weighs each token by the trainer's probability over the "
        "sampler's, truncated at tis_cap; off trains on the sampler's log-probabilities as they are. auto: tis "
        "with vllm, off with builtin.",
    )
    tis_cap: float = Field(2.0, ge=1.0, le=1e6, description="The truncation of tis's weights.")

    def corrects(self) -> bool:
        """Whether the trainer applies truncated importance sampling (``correction`` resolved for the engine)."""
        return self.correction == "tis" or (self.correction == "auto" and self.engine == "vllm")

    def server_count(self) -> int:
        """How many vLLM servers rollouts sample from (those listed or launched); 1 for the builtin engine."""
        if self.engine != "vllm":
            return 1
        return len(self.servers) if self.servers else (self.launch.servers if self.launch is not None else 1)


def problems(inference: InferenceConfig, model_name: str) -> list[Problem]:
    """The section's rules between keys: a vllm engine has exactly one of servers and launch and a Hugging Face
    checkpoint to serve; builtin takes neither."""
    at = "train.inference"
    out: list[Problem] = []
    if inference.engine == "builtin":
        for key in ("servers", "launch", "weights_dir"):
            if getattr(inference, key):
                out.append(Problem(f"{at}.{key}", "only with engine: vllm (the builtin engine is the trainer's own "
                                                  "model)"))
        return out
    if bool(inference.servers) == (inference.launch is not None):
        out.append(Problem(f"{at}.engine", "vllm takes the URLs of running servers (servers) or a launch spec "
                                           "(launch), one of the two"))
    for i, url in enumerate(inference.servers):
        if not url.startswith(("http://", "https://")):
            out.append(Problem(f"{at}.servers.{i}", f"{url!r} is not an http:// or https:// URL"))
    if len(set(inference.servers)) != len(inference.servers):
        out.append(Problem(f"{at}.servers", "lists a server more than once"))
    if model_name == "tiny":
        out.append(Problem("train.model_name", "tiny is the built-in model; a vLLM server serves a Hugging Face "
                                               "checkpoint (a local directory)"))
    return out


__all__ = ["InferenceConfig", "LaunchConfig", "problems"]
