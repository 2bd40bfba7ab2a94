"""The environments platoon can open by name: the built-in and every installed extension's, with where each comes
from (``platoon env list``).

Listing imports every installed extension (``platoon.config.registry.load_extensions``), so an extension whose
requirement on platoon excludes the running version is refused here too: ``ExtensionError`` naming both versions,
unless ``PLATOON_IGNORE_EXTENSION_REQUIREMENTS`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

import platoon.live.envs.number_search  # noqa: F401  (registers the built-in)
from platoon.config import registry

__all__ = ["EnvironmentListing", "list_environments", "listing_table"]


@dataclass(frozen=True)
class EnvironmentListing:
    """One named environment: its class (``module:Class``), the distribution that provides it and its version, the
    entry point that registered it (None for the built-in or a package's), and whether it speaks text."""

    name: str
    ref: str
    distribution: str | None
    version: str | None
    entry_point: str | None
    speaks_text: bool


def list_environments() -> list[EnvironmentListing]:
    """Every registered environment, by name."""
    out = []
    for name in registry.registered_names("environment"):
        cls = registry.lookup("environment", name)
        origin = registry.component_origin("environment", name, cls.__module__)
        out.append(EnvironmentListing(name, f"{cls.__module__}:{cls.__qualname__}", origin.distribution,
                                      origin.version, origin.entry_point, bool(getattr(cls, "speaks_text", False))))
    return out


def listing_table(rows: list[EnvironmentListing]) -> str:
    """The listing as aligned columns: name, distribution, version, protocol, class."""
    table = [("NAME", "DISTRIBUTION", "VERSION", "SPEAKS", "CLASS")]
    table += [(r.name, r.distribution or "-", r.version or "-", "text" if r.speaks_text else "tokens", r.ref)
              for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
                     for row in table)
