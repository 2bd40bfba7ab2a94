"""Agents that speak text: conversations (``messages``), renderers that turn them into a model's token ids and parse
completions back (``renderer``), and the tool-calling harness that plays a text environment (``harness``)."""
