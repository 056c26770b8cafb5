"""A server's channel buffer: where a client worker writes its chunks for that server.

Two slots, so that the worker fills one while the server reads the other.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from harness.fileio import private_memory
from harness.stream.plan import SLACK as _SLACK

__all__ = ["ChannelBuffer"]


class ChannelBuffer:
    """Two slots of one server's shares, in 0600 shared memory that no file system names.

    Made with no descriptor, it reserves its memory (:func:`harness.fileio.private_memory`)
    for this process alone; made from one (a buffer another process reserved and passed
    on at this one's start), it maps that and closes the descriptor. Either way only the
    one client worker and the one server it is for map it, and the kernel frees it when
    both have ended, however they end. It is memory, not disk, bounded by two chunks.
    """

    def __init__(self, slot_bytes: int, fd: int | None = None, name: str = "ltm-channel") -> None:
        self.slot_bytes = slot_bytes
        size = self.size(slot_bytes)
        if fd is None:
            fd = private_memory(size, name, "a streamed run's channel buffer")
        try:
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    @staticmethod
    def size(slot_bytes: int) -> int:
        """The bytes of a buffer of two slots of ``slot_bytes`` (the cipher's slack included)."""
        return 2 * (slot_bytes + _SLACK)

    def slot(self, b: int, words: int) -> np.ndarray:
        """Slot b's first ``words`` words as uint64 (with the cipher's slack after them)."""
        offset = b * (self.slot_bytes + _SLACK)
        return np.frombuffer(self.map, dtype=np.uint64, count=words, offset=offset)

    def raw(self, b: int, nbytes: int, first: int = 0) -> memoryview:
        """Slot b's bytes from ``first`` on, ``nbytes`` and the cipher's slack after them
        (which, short of the slot's end, are the next bytes' until they are written)."""
        offset = b * (self.slot_bytes + _SLACK) + first
        return memoryview(self.map)[offset: offset + nbytes + _SLACK]

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass  # a view still lives, in a traceback being reported: freed with the process
