"""Atomic file writes, private files for secrets, and the one file lock.

Atomic: a reader sees the old file or the new one, never half of one.
Private: files holding shares, keys or inputs are created 0600 inside 0700
directories, with the mode given to ``open(2)`` itself, so no other user can
read them at any moment, not even between creating and chmod-ing.
Memory: :func:`private_memory` is shared memory that no file system names, for
what processes of one run pass each other (the streamed run's channel buffers).
Locked: :func:`file_lock` is the one inter-process lock (``ARCHITECTURE.md``,
"Locks"); :func:`output_lock` is it on a command's output directory.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from harness.errors import DiskFullError, InputError, stop_signals_deferred

__all__ = ["PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "PRIVATE_UMASK", "SIBLING_ROOM",
           "check_output_dir", "copy_private", "copy_tree_private", "file_lock", "open_private",
           "open_fifo_writer", "output_lock", "parents_made", "private_dir", "private_memory",
           "reserve", "short_writes_as_full_disk",
           "write_atomic", "write_private"]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# For child processes (parties, openssl) that create files of their own in our directories.
PRIVATE_UMASK = 0o077


def _default_mode() -> int:
    # What open() would give: 0o666 less the umask (read by setting and restoring it).
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def short_writes_as_full_disk(path: str | os.PathLike[str]) -> Iterator[None]:
    """Report numpy's short write (``tofile``'s "N requested and M written", an OSError
    without errno) as what it is on a regular file, a full disk (or quota): ENOSPC,
    naming ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.errno is not None or " requested and " not in str(exc):
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc


def write_atomic(path: str | os.PathLike[str],
                 data: str | bytes | Callable[[IO[bytes]], object], *,
                 mode: int | None = None) -> Path:
    """Write ``data`` to a temporary file beside ``path``, sync it, then rename it over.

    ``data`` is the content, or a function that writes it to the open (binary)
    file, for content too large to hold twice in memory. ``mode`` is set before
    any byte is written: ``PRIVATE_FILE_MODE`` for a secret (a key file is never
    readable by others, even briefly); by default the file gets open()'s usual
    permissions rather than mkstemp's 0600.
    """
    path = Path(path)
    if not isinstance(data, (str, bytes)) and not callable(data):
        raise TypeError(f"write_atomic writes str, bytes or a writer, not {type(data).__name__}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _default_mode() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                with short_writes_as_full_disk(path):
                    data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def private_dir(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """``path`` as a directory only its owner can enter; missing parents are made 0700 too.

    An existing ``path`` is narrowed to 0700 (it is ours: a working directory);
    existing parents are left as they are. ``create=False`` makes nothing: ``path``
    must already be a directory itself, not a symbolic link to one (NotADirectoryError
    or FileNotFoundError otherwise), so that nothing is narrowed or written elsewhere.
    """
    path = Path(path)
    if not create:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory (or a link to one)",
                                     str(path))
        os.chmod(path, PRIVATE_DIR_MODE)
        return path
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def open_private(path: str | os.PathLike[str], mode: str = "wb", *, follow: bool = True):
    """``open(path, mode)`` for writing (``w+b``: and reading, as a mapping needs), the file
    0600 from its creation (and if it existed). ``follow=False`` refuses a symbolic link
    at ``path`` (``O_NOFOLLOW``: ELOOP), which would otherwise be narrowed and written
    through to its target."""
    if mode not in ("wb", "ab", "w", "a", "w+b"):
        raise ValueError(f"open_private opens for writing only, not {mode!r}")
    flags = (os.O_RDWR if "+" in mode else os.O_WRONLY) | os.O_CREAT | os.O_CLOEXEC
    flags |= os.O_APPEND if mode.startswith("a") else os.O_TRUNC
    if not follow:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fdopen_owned(fd, mode)


def fdopen_owned(fd: int, mode: str) -> IO:
    """``os.fdopen(fd, mode)``, with ``fd`` closed exactly once whatever happens: by the
    file object once it exists, by this function if it could not be made. A stop
    signal waits until the file owns ``fd`` (raised between the two, it would have the
    object close ``fd`` and the caller's cleanup close it again: EBADF)."""
    fh = None
    try:
        with stop_signals_deferred():
            try:
                fh = os.fdopen(fd, mode)
            except BaseException:
                os.close(fd)
                raise
    except BaseException:  # the stop, raised once the file owned fd: it closes fd
        if fh is not None:
            fh.close()
        raise
    return fh


def open_fifo_writer(path: str | os.PathLike[str]) -> int | None:
    """A write descriptor (non-blocking, close-on-exec) of the FIFO at ``path`` if a
    reader has it open, else None: opening it to write would otherwise wait for one."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


def private_memory(size: int, name: str, what: str) -> int:
    """A descriptor of ``size`` bytes of shared memory, 0600, that no file system names
    (``name`` shows only in ``/proc/PID/fd``; ``what`` it holds, for the message).

    It is a memfd: no path leads to it (only this process's descriptors, and those it
    passes on), and the kernel frees it with the last process that holds or maps it,
    however that process ends, SIGKILL included, so nothing of it outlives a run. It
    is not in ``/dev/shm`` either, whose size (64 MB in a container) does not bound it.
    Its whole size is reserved now: memory that cannot be had is refused here, in one
    line, never met later by a process that writes into its mapping (SIGBUS).
    """
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        reserve(fd, size, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def reserve(fd: int, size: int, what: str, *, offset: int = 0,
            path: str | os.PathLike[str] | None = None) -> None:
    """Reserve bytes ``offset`` to ``offset + size`` of ``fd``'s file now, before it is
    mapped (the file grows to hold them): what cannot be had is refused here, in one
    line, never met by a process that writes into the mapping, which the kernel kills
    (SIGBUS) when a page it touches finds no room.

    Without ``path`` the file is shared memory (:func:`private_memory`): InputError.
    With one, the file at ``path`` is on a disk: DiskFullError when that disk (or its
    quota) is full, naming where and how much ``what`` needs; any other OSError passes.
    """
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as exc:
        if path is None:
            raise InputError(f"cannot reserve {size / 2**20:.1f} MiB of shared memory for "
                             f"{what} ({exc.strerror}); free some memory on this machine "
                             "and run again") from None
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = Path(path).parent
        try:
            free = f", only {shutil.disk_usage(where).free / 2**20:.1f} MiB are free there"
        except OSError:
            free = ""
        full = "the disk is full" if exc.errno == errno.ENOSPC else "the disk quota is used up"
        raise DiskFullError(f"{full} at {where}: {what} needs {size / 2**20:.1f} MiB"
                            f"{free}; free some space, or choose an "
                            "--out on another file system") from None


def write_private(path: str | os.PathLike[str], data: str | bytes) -> Path:
    with open_private(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def copy_private(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    with open(source, "rb") as src, open_private(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return Path(dest)


def copy_tree_private(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Copy the tree ``source`` to the new ``dest``, private from the first byte.

    Every directory is made 0700 and every file 0600 as it is created (symbolic links
    are copied as links), whatever the umask: ``shutil.copytree`` would create them
    with the source's or default modes, readable until they were tightened, and a
    descriptor opened meanwhile stays usable after any chmod. Used for whatever may
    hold shares, keys or inputs, such as a failed run's evidence.
    """
    source, dest = Path(source), Path(dest)
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(errno.EEXIST, "will not copy over an existing path", str(dest))
    private_dir(dest)
    for root, dirs, files in os.walk(source):
        here = dest / Path(root).relative_to(source)
        for name in dirs:
            if (Path(root) / name).is_symlink():
                os.symlink(os.readlink(Path(root) / name), here / name)
            else:
                private_dir(here / name)
        for name in files:
            item = Path(root) / name
            if item.is_symlink():
                os.symlink(os.readlink(item), here / name)
            else:
                copy_private(item, here / name)
    return dest


def _lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextmanager
def file_lock(path: str | os.PathLike[str],
              busy: Callable[[str], object] | None = None) -> Iterator[Path]:
    """Hold the exclusive lock of ``path`` until the block ends; the one lock of the harness.

    The lock is an advisory ``flock`` on :func:`_lock_path` (beside ``path``, so
    ``path`` itself may be created, renamed over or swapped while it is held).
    The file records its holder (pid and command line) and is removed on
    release; a holder that dies loses the lock with its process, whatever it
    leaves behind. A second process finds it held and calls ``busy`` with the
    holder's record, once: if ``busy`` raises, that process is refused; if it
    returns (or there is no ``busy``), the process waits for the lock.
    The parent directory must exist; ``OSError`` from creating the file passes.
    """
    lock = _lock_path(path)
    announced = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _try_lock(fd):
                if not announced and busy is not None:
                    announced = True
                    busy(_holder(fd))
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        # The previous holder may have removed the file between our open and flock.
        if _same_file(fd, lock):
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {_command_line()}\n".encode())
        yield lock
    finally:
        # Unlinked while still held: a waiter that opened it re-checks with _same_file.
        try:
            if _same_file(fd, lock):
                lock.unlink()
        except OSError:
            pass
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _command_line() -> str:
    # `ltm ARGS` for the harness however started; another program (a test) by its own name.
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = argv0.parent.name if argv0.name == "__main__.py" else argv0.name
    return " ".join(["ltm" if name in ("ltm", "harness") else name, *sys.argv[1:]])


@contextmanager
def output_lock(out: str | os.PathLike[str], *, option: str = "--out") -> Iterator[Path]:
    """Hold :func:`file_lock` on the output directory ``out`` for a whole command.

    ``out`` can then appear atomically or be a sweep that is resumed. A second
    command on the same ``out`` is refused at once, naming the holder.
    Creating the parent directories here also turns an ``out`` under a file or in a
    read-only directory into one line, before any work.
    """
    out = check_output_dir(out, option=option)

    def refuse(holder: str) -> None:
        raise InputError(f"{option} {out} is in use by another command ({holder}); "
                         f"wait for it to finish, or choose another {option}")

    with ExitStack() as stack:
        try:
            stack.enter_context(parents_made(out))
            stack.enter_context(file_lock(out, busy=refuse))
        except OSError as exc:
            raise InputError(f"cannot create {option} {out}: {exc.strerror or exc} "
                             f"({exc.filename or out.parent}); choose another {option}") from None
        yield out


@contextmanager
def parents_made(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Create the missing parent directories of ``path`` for the block; remove them after
    if it left them empty (a refusal, a failure, an interrupt).

    Around a ``path`` that was made they are not empty and stay. ``OSError`` from
    creating them passes.
    """
    path = Path(path)
    made = [p for p in path.parents if not os.path.exists(p)]  # deepest first
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield path
    finally:
        for directory in made:
            try:
                directory.rmdir()
            except OSError:
                break


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a process that is just starting"


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


# Room the harness needs beside an output directory NAME for its siblings: the
# staging ``.NAME.partial-XXXXXXXX``, the lock ``.NAME.lock``, ``NAME.mismatch``, a
# temporary ``.NAME.XXXXXXXX.tmp``; with a margin.
SIBLING_ROOM = 24


def check_output_dir(out: str | os.PathLike[str], *, option: str = "--out",
                     whole: bool = True) -> Path:
    """Refuse, before any work, an output directory that could not be created or written.

    ``whole``: the directory is made whole, staged beside it and renamed into place
    (``ltm run``, ``ltm reproduce``, an install's prefix). Then ``.``, ``..`` and
    ``/`` name no directory to create (the staging sibling would land in the
    parent), and the last component needs :data:`SIBLING_ROOM` bytes to spare
    below the file system's limit. Without ``whole`` (files written into an
    existing or new directory, as ``ltm utility`` does) only the limit applies.
    Then looks at ``out`` or its nearest existing ancestor: a file there, or a
    directory this process cannot write, is one line now rather than a traceback
    after the work.
    """
    out = Path(out)
    text = str(out)
    if "\0" in text:
        raise InputError(f"{option} {text!r} holds a NUL character; choose another {option}")
    try:
        os.fsencode(text)
    except UnicodeError:
        raise InputError(f"{option} {text!r} cannot be a file name here (not encodable); "
                         f"choose another {option}") from None
    if whole and out.name in ("", ".", ".."):
        raise InputError(f"{option} must name a directory to create, not {text}; for "
                         f"example {option} results/run-1")
    probe = out
    # os.path.exists, not Path.exists: a name too long for the file system is "not
    # there" (ENAMETOOLONG), for _check_name_lengths to word, not an exception.
    while not os.path.exists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        where = "is" if probe == out else f"lies under {probe}, which is"
        raise InputError(f"{option} {out} {where} a file, not a directory; choose another "
                         f"{option}")
    _check_name_lengths(out, probe, option, SIBLING_ROOM if whole else 0)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{option} {out}: the directory {probe} is not writable; choose "
                         f"another {option}")
    return out


def _check_name_lengths(out: Path, existing: Path, option: str, room: int) -> None:
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    # The components still to be created, the last of which needs room for siblings.
    missing = out.relative_to(existing).parts if out != existing else ()
    parts = [(p, name_max) for p in missing[:-1]] + [(out.name, name_max - room)]
    for part, limit in parts:
        length = len(os.fsencode(part))
        if length > limit:
            room_note = f" ({name_max} less room for the harness's files beside it)" \
                if part == out.name and room else ""
            raise InputError(f"{option}: the name {part[:40]}... is {length} bytes long, but "
                             f"at most {limit} fit here{room_note}; choose a shorter {option}")
