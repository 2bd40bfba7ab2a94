"""Connecting to Ray, for whatever platoon runs on it (``simulate --sweep --ray``, ``rollout_isolation: ray``).

``connect(ray, address)`` connects this process: to ``address``, else the cluster ``RAY_ADDRESS`` names (as ``ray
job submit`` sets it), else a local instance of this machine's CPUs, quiet (no dashboard, Ray's own logging at
WARNING, its start-up notice about token authentication dropped), which ends with this process however it ends
(``platoon.reaper``). It answers the function that disconnects (shutting the local instance
down), or None when the process was connected already: a caller's connection is left as it is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from platoon.reaper import start_reaper

__all__ = ["AUTH_LOGGER", "connect", "init_options"]

# Ray (2.60 at least) starts a local instance with token authentication on, its default, and says so at WARNING on
# every start: that notice is dropped (any other warning of that logger is kept)
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _default_auth_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def init_options(address: str | None) -> dict[str, Any]:
    """``ray.init``'s arguments: the given address, else ``RAY_ADDRESS``'s, else a quiet local instance."""
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    options: dict[str, Any] = {"address": address, "logging_level": logging.WARNING, "log_to_driver": False}
    if address == "local":  # a cluster has its own CPUs and dashboard: these are only for an instance of ours
        options |= {"num_cpus": os.cpu_count() or 1, "include_dashboard": False}
    return options


def connect(ray: ModuleType, address: str | None, **more: Any) -> Callable[[], None] | None:
    """Connect (see the module's doc); ``more``: further ``ray.init`` arguments (a ``runtime_env``)."""
    if ray.is_initialized():
        return None
    options = init_options(address) | {k: v for k, v in more.items() if v}
    # a local instance's processes are Ray's to end, and a SIGKILLed driver leaves some running: the reaper ends them
    reaper = start_reaper() if options["address"] == "local" else None
    notices = logging.getLogger(AUTH_LOGGER)
    notices.addFilter(_default_auth_notice)
    try:
        ray.init(**options)
    except BaseException:
        if reaper is not None:
            reaper.stop()
        raise
    finally:
        notices.removeFilter(_default_auth_notice)

    def disconnect() -> None:
        ray.shutdown()
        if reaper is not None:
            reaper.stop()

    return disconnect
