"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def _default_mode() -> int:
    # What open() would give: 0o666 less the umask (read by setting and restoring it).
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *,
                 mode: int | None = None) -> Path:
    """Write ``data`` to a temporary file beside ``path``, sync it, then rename it over.

    ``mode`` is set before any byte is written (a key file is never readable by
    others, even briefly); by default the file gets open()'s usual permissions
    rather than mkstemp's 0600.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _default_mode() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
