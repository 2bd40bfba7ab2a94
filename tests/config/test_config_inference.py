"""``train.inference``'s rules, in the config's one report: vllm takes servers or launch, one of the two, and a
Hugging Face checkpoint; builtin takes neither."""

from __future__ import annotations

from config_kit import complete
from test_config_rules import problems

from platoon.config import load_config


def test_vllm_with_neither_servers_nor_launch_and_the_tiny_model_is_two_problems(tmp_path):
    assert problems(tmp_path, "train: {model_name: tiny, inference: {engine: vllm}}") == [
        "train.inference.engine: vllm takes the URLs of running servers (servers) or a launch spec (launch), one "
        "of the two",
        "train.model_name: tiny is the built-in model; a vLLM server serves a Hugging Face checkpoint (a local "
        "directory)",
    ]


def test_vllm_with_both_and_a_bad_url_and_builtin_with_servers_are_refused(tmp_path):
    text = """
        train:
          model_name: /models/m
          inference: {engine: vllm, servers: [localhost:8000, localhost:8000], launch: {python: /venv/bin/python}}
    """
    assert problems(tmp_path, text) == [
        "train.inference.engine: vllm takes the URLs of running servers (servers) or a launch spec (launch), one "
        "of the two",
        "train.inference.servers.0: 'localhost:8000' is not an http:// or https:// URL",
        "train.inference.servers.1: 'localhost:8000' is not an http:// or https:// URL",
        "train.inference.servers: lists a server more than once",
    ]
    assert problems(tmp_path, "train: {inference: {servers: ['http://h:1']}}") == [
        "train.inference.servers: only with engine: vllm (the builtin engine is the trainer's own model)"]


def test_a_launch_spec_loads_with_its_defaults(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(complete("""
        train: {model_name: /models/m, inference: {engine: vllm, launch: {python: /venv/bin/python, servers: 2}}}
    """))
    launch = load_config(path).train.inference.launch
    assert (launch.servers, launch.port, launch.host, launch.start_timeout_seconds) == (2, 8100, "127.0.0.1", 900.0)
