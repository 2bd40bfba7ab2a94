"""The trainer's weights on disk for inference servers: one directory per policy version, in Hugging Face layout.

``WeightStore(root, model_dir, keep=)`` writes ``write(state_dict, version)`` as ``root/v000005/model.safetensors``
beside a copy of the checkpoint's ``config.json`` (what a server's loader reads from a ``weights_path``), atomically:
the version is written under ``root/.v000005.partial`` and renamed into place once it is whole and synced, so a
server never loads half a file, and a crash leaves the previous versions as they were. The newest ``keep`` versions
stay (a server still loading one is never the oldest), the rest are removed. Tensors that share storage (tied
embeddings) are written each under its own name, as ``save_pretrained`` would keep a loader's view of them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platoon.runs.atomic import fsync_dir, naming

__all__ = ["WeightStore"]

CONFIG_FILES = ("config.json", "generation_config.json")


class WeightStore:
    """Versions of the trainer's weights under ``root`` (see the module's doc)."""

    def __init__(self, root: str | os.PathLike[str], model_dir: str | os.PathLike[str], *, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.root, self.model_dir, self.keep = Path(root), Path(model_dir), keep

    def path(self, version: int) -> Path:
        return self.root / f"v{version:06d}"

    def write(self, state_dict: Mapping[str, Any], version: int) -> Path:
        """Write ``state_dict`` as ``version`` (replacing a version of that number) and prune; its directory."""
        from safetensors.torch import save_file

        target, partial = self.path(version), self.root / f".v{version:06d}.partial"
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        file = partial / "model.safetensors"
        try:
            save_file(_unshared(state_dict), str(file), metadata={"format": "pt", "platoon_version": str(version)})
            with open(file, "rb") as f:
                os.fsync(f.fileno())
            for name in CONFIG_FILES:
                if (self.model_dir / name).is_file():
                    shutil.copyfile(self.model_dir / name, partial / name)
            fsync_dir(partial)
            if target.exists():
                shutil.rmtree(target)
            os.replace(partial, target)
            fsync_dir(self.root)
        except OSError as exc:
            naming(exc, file)
            raise
        self._prune()
        return target

    def versions(self) -> list[int]:
        """The versions on disk, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(int(p.name[1:]) for p in self.root.iterdir()
                      if p.is_dir() and p.name.startswith("v") and p.name[1:].isdigit())

    def _prune(self) -> None:
        for version in self.versions()[:-self.keep]:
            shutil.rmtree(self.path(version), ignore_errors=True)


def _unshared(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Contiguous CPU tensors, one storage each (``safetensors`` refuses tensors that share one)."""
    seen: set[int] = set()
    out: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        t = tensor.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out
