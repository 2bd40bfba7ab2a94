"""The trainer's and a rollout worker's ends of one local connection: pickled messages in length-prefixed frames.

Each side reads its end on its own event loop (``asyncio`` streams over one end of a ``socket.socketpair``), so a
worker's model calls reach the trainer's loop as any other rollout's do. A message is a tuple whose first item names
it. ``recv`` returns None once the other side has closed its end (or died: the kernel closes a dead process's
sockets), which is how a worker learns that its trainer is gone.

An exception crosses as itself when it pickles and unpickles, else as a ``RuntimeError`` that names its type and
holds its message and traceback (``portable``).
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import traceback
from typing import Any

__all__ = ["Channel", "portable"]

_HEADER = struct.Struct("!Q")


class Channel:
    """One end of a worker's connection (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(reader, writer)

    def send(self, *message: Any) -> None:
        """Queue ``message`` (a tuple, its name first); a closed connection drops it."""
        if self._writer.is_closing():
            return
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.write(_HEADER.pack(len(data)) + data)

    async def recv(self) -> tuple | None:
        """The next message, or None once the other end is closed."""
        try:
            size = _HEADER.unpack(await self._reader.readexactly(_HEADER.size))[0]
            return pickle.loads(await self._reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            pass

    def close(self) -> None:
        self._writer.close()


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ``RuntimeError`` naming its type, with its message and traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any failure to pickle means: send a description instead
        text = "".join(traceback.format_exception(exc))
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__} in a rollout worker: {exc}\n{text}")
