"""Agents that speak text: conversations (``messages``), renderers that turn them into a model's token ids and parse
completions back (``renderer``), the tool-calling harness that plays a text environment (``harness``), and the
harness toolchains an environment needs on node-local disk, staged ahead of a run (``toolchain``)."""
