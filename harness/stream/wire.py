"""What a streamed run's TLS connections carry, read against a deadline and checked field by field.

A connection carries a hello (the worker's index), then frames: ``(CHUNK, k, words,
fields)`` followed by the message's further fields and the chunk's words, and one
``(END, count, 0, fields)``, which the server acknowledges once it has read it, if
it and the chunks before it are the ones the plan announces. A
field is an integer or a numeric array (a chunk's slot counts), decoded as plain
numbers, never unpickled: a client cannot make a server run anything.

Whoever holds the clients' key may still send anything. So every read has the
stream's deadline (a sender trickling a byte at a time cannot hold a server past
``--timeout``), a field is read into a buffer of its announced size, bounded by the
plan before a byte of it is read (linear time, bounded memory), and a frame becomes
one of the stream's messages only if each of its fields has the type, dtype and
shape the plan expects: else :class:`Malformed`, with the reason.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from typing import Any

import numpy as np

from harness.stream.plan import StreamPlan

__all__ = ["ACK", "FRAME", "HELLO", "MAGIC", "DeadlineReader", "Malformed", "chunk_frame",
           "counts_limit", "end_frame", "pack_fields", "read_fields", "read_message"]

HELLO = struct.Struct("!4sI")
MAGIC = b"LTMs"
FRAME = struct.Struct("!BQQB")  # kind, chunk index (or count at the end), words, fields
CHUNK, END = 1, 2
ACK = b"ok"
_INT, _ARRAY = b"i", b"a"
_LEN = struct.Struct("!Q")
_MAX_HEADER = 4096  # an array field's dtype and shape, as JSON


class Malformed(Exception):
    """What an authenticated client sent is not a message of the stream (the reason)."""


class DeadlineReader:
    """Reads from ``sock`` until ``deadline`` (``time.monotonic()``) at the latest, in all.

    The socket's own timeout bounds one read only: a sender trickling a byte at a
    time would renew it forever. Here each read may wait only for what is left.
    """

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def exactly(self, n: int) -> bytearray:
        """``n`` bytes, read into one buffer of that size (linear in n)."""
        buf = bytearray(n)
        self.into(memoryview(buf))
        return buf

    def into(self, view: memoryview) -> None:
        """Fill ``view``; a connection that ends first is a :class:`ConnectionError`."""
        got, n = 0, len(view)
        while got < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the stream's deadline passed")
            self.sock.settimeout(left)
            k = self.sock.recv_into(view[got:])
            if not k:
                # Said in bytes still owed: "0 of 8 bytes" beside the stream's "2 of 8
                # chunks" read as a count of chunks.
                raise ConnectionError(f"the connection closed with {n - got} bytes of a "
                                      "message still to come")
            got += k


def pack_fields(fields: Any) -> bytes:
    """A message's fields past its fixed ones: integers, or numeric arrays."""
    out = []
    for field in fields:
        if isinstance(field, np.ndarray):
            array = np.ascontiguousarray(field)
            header = json.dumps([array.dtype.str, list(array.shape)]).encode()
            out += [_ARRAY, _LEN.pack(len(header)), header, _LEN.pack(array.nbytes),
                    array.tobytes()]
        else:
            out += [_INT, struct.pack("!q", int(field))]
    return b"".join(out)


def chunk_frame(k: int, words: int, fields: list[Any]) -> bytes:
    return FRAME.pack(CHUNK, k, words, len(fields)) + pack_fields(fields)


def end_frame(count: int, fields: Any) -> bytes:
    return FRAME.pack(END, count, 0, len(fields)) + pack_fields(fields)


def read_fields(reader: DeadlineReader, count: int, limit: int) -> tuple[list[Any], int]:
    """The fields :func:`pack_fields` wrote, as plain numbers, and their bytes on the
    wire. An array's dtype, shape and size are checked before its bytes are read, and
    it may hold ``limit`` bytes at most."""
    fields: list[Any] = []
    size = 0
    for _ in range(count):
        tag = bytes(reader.exactly(1))
        if tag == _INT:
            fields.append(struct.unpack("!q", reader.exactly(8))[0])
            size += 9
            continue
        if tag != _ARRAY:
            raise Malformed(f"a field of unknown kind {tag!r}")
        (length,) = _LEN.unpack(reader.exactly(_LEN.size))
        if length > _MAX_HEADER:
            raise Malformed(f"an array field's header of {length} bytes")
        header = reader.exactly(length)
        try:
            kind, dims = json.loads(header)
            dtype = np.dtype(str(kind))
            shape = tuple(int(x) for x in dims)
        except Exception as exc:  # any malformed header: refused, whatever numpy says
            raise Malformed(f"a malformed array field ({type(exc).__name__})") from None
        (nbytes,) = _LEN.unpack(reader.exactly(_LEN.size))
        # In Python integers: a shape whose product wraps in int64 cannot pass.
        if (dtype.kind not in "biuf" or min(shape, default=0) < 0 or nbytes > limit
                or nbytes != dtype.itemsize * math.prod(shape)):
            raise Malformed(f"an array field of {dtype} {shape} in {nbytes} bytes")
        array = np.frombuffer(reader.exactly(nbytes), dtype=dtype).reshape(shape)
        fields.append(array)
        size += 1 + 2 * _LEN.size + length + nbytes
    return fields, size


def read_message(reader: DeadlineReader, plan: StreamPlan) -> tuple[tuple, int]:
    """The next frame as the stream's message, ``("chunk", k, words, counts)`` or
    ``("end", count)`` (the caller adds a chunk's slot), and its bytes on the wire
    before a chunk's words. Anything else is a :class:`Malformed` that names it."""
    kind, k, words, count = FRAME.unpack(reader.exactly(FRAME.size))
    if kind not in (CHUNK, END):
        raise Malformed(f"a frame of unknown kind {kind}")
    what = f"chunk {k}" if kind == CHUNK else f"an end of {k} chunks"
    try:
        fields, size = read_fields(reader, count, counts_limit(plan))
    except Malformed as exc:
        raise Malformed(f"{what} with {exc}") from None
    if kind == END:
        if fields:
            raise Malformed(f"{what} with {len(fields)} fields, not none")
        return ("end", k), FRAME.size + size
    if len(fields) != 1:
        raise Malformed(f"{what} with {len(fields)} fields, not its slot counts alone")
    (counts,) = fields
    if (not isinstance(counts, np.ndarray) or counts.dtype.kind not in "iu"
            or counts.shape != (2 * plan.m,)):
        got = (f"an array of {counts.dtype} {counts.shape}"
               if isinstance(counts, np.ndarray) else "an integer")
        raise Malformed(f"{what} with {got} as its slot counts, not {2 * plan.m} integers")
    return ("chunk", k, words, counts), FRAME.size + size


def counts_limit(plan: StreamPlan) -> int:
    """The largest array field a stream of ``plan`` carries: a chunk's 2m counts."""
    return 8 * 2 * plan.m
