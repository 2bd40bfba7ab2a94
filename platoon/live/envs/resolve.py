"""Resolving an entry's environment: ``env`` (a registered name or ``module:Class``) and ``service_kwargs`` to an instance.

It sits above the built-in (``number_search``, itself above the protocol in ``base``) and imports it: the built-in
registers its name when imported, so ``number_search`` resolves here whatever else was imported first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import platoon.live.envs.number_search  # noqa: F401  (registers the built-in)
from platoon.config import registry
from platoon.config.component_resolution import find_class
from platoon.config.errors import ExtensionError
from platoon.live.envs.text import is_text_environment

__all__ = ["resolve_environment"]


def resolve_environment(env: str, options: Mapping[str, Any] | None = None, *, package: str | None = None) -> Any:
    """An environment instance from an entry's ``env`` (a registered name, ``name@version``, or ``module:Class``) and
    ``service_kwargs``.

    ``package`` is imported first (it may register the name). An unknown name raises ``ExtensionError`` with the
    registry's did-you-mean message, and so does a class that is not a text environment (``is_text_environment``);
    options the class does not take raise ``TypeError`` from its constructor.
    """
    if package:
        registry.import_package(package)
    # name@version: the config's rules checked the version of a core one
    cls = find_class("environment", env if ":" in env else env.partition("@")[0])
    instance = cls(**dict(options or {}))
    if not is_text_environment(instance):
        raise ExtensionError(f"environment {env!r} does not speak the text protocol (its class sets no "
                             "speaks_text = True; docs/writing-a-text-environment.md)")
    return instance
