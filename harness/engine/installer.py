"""Installing MP-SPDZ: the official binary release, on request or on first use.

:func:`install` sets up the release without running its shell scripts, in a
scratch directory beside the target that is swapped in only once it works, so
that a failure half-way never leaves a broken installation behind;
:func:`ensure_mpspdz` is :func:`~harness.engine.mpspdz.find_mpspdz` that installs
the release into the default location when nothing is configured there.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import posixpath
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from harness.engine.mpspdz import (
    ENV_VAR,
    INSTALL_RECORD,
    NO_INSTALL_ENV_VAR,
    RELEASE_SHA256,
    RELEASE_URL,
    SHA256_ENV_VAR,
    SUPPORTED_VERSION,
    MpSpdz,
    default_home,
    find_mpspdz,
    install_disabled,
    locate,
    release_url,
)
from harness.errors import MpSpdzError
from harness.fileio import file_lock, parents_made

__all__ = ["ensure_mpspdz", "install"]

DOWNLOAD_TIMEOUT = 60.0  # seconds without data before a download is abandoned
_CHUNK = 1 << 20


def _expected_sha256(given: str | None, url: str | None) -> tuple[str, str]:
    """(the digest the archive must have, or "", and where that digest comes from).

    ``--sha256``, else ``$LTM_MPSPDZ_SHA256``, else the official release's pinned
    digest when downloading from its URL. A malformed one is refused before any work.
    """
    if given:
        digest, origin = given, "--sha256"
    elif os.environ.get(SHA256_ENV_VAR):
        digest, origin = os.environ[SHA256_ENV_VAR], SHA256_ENV_VAR
    elif url == RELEASE_URL and RELEASE_SHA256:
        digest, origin = RELEASE_SHA256, "the official release's pinned digest"
    else:
        return "", ""
    digest = digest.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise MpSpdzError(f"{origin} must be a sha256 digest, 64 hexadecimal digits, not "
                          f"{given or os.environ.get(SHA256_ENV_VAR)!r}; copy it from where "
                          "you got the release (`sha256sum FILE` prints it)")
    return digest, origin


def _check_sha256(actual: str, expected: str, origin: str, label: str, out: IO[str]) -> None:
    """Print the archive's digest; refuse it, before it is unpacked, unless it is expected."""
    if expected and actual != expected:
        raise MpSpdzError(
            f"{label} has sha256 {actual}, not {expected} ({origin}): it is not the release "
            "you meant to install (damaged, or tampered with); nothing was unpacked. Fetch "
            "it again from the official release page, or fix the digest you gave")
    check = (f"matches {origin}" if expected else
             f"not checked: give --sha256 or {SHA256_ENV_VAR} to check it")
    print(f"  sha256 {actual} ({check})", file=out, flush=True)


def _occupied(root: Path) -> bool:
    """Something (even half a source build) is at ``root``: never install over it."""
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        return True
    return root.is_dir() and any(root.iterdir())


def ensure_mpspdz(
    explicit: str | os.PathLike[str] | None = None,
    *,
    auto_install: bool = True,
    out: IO[str] | None = None,
) -> MpSpdz:
    """Like :func:`find_mpspdz`, but installs the release when nothing is configured.

    Only the default location is ever installed into: an explicit ``--mp-spdz``
    or ``$MP_SPDZ_HOME`` that points at nothing is the user's mistake, and
    anything already at the default location (a source build under way) is
    left alone. ``auto_install=False`` or ``$LTM_NO_INSTALL`` give
    :func:`find_mpspdz`'s error instead. ``out`` (default ``sys.stderr``, so a
    command's own output stays clean) gets the one-line notice and progress.
    """
    root, source = locate(explicit)
    if source != "default location" or not auto_install or install_disabled():
        return find_mpspdz(explicit)
    if _occupied(root):
        return find_mpspdz(explicit)
    out = out or sys.stderr
    with _install_lock(root, out):
        if _occupied(root):  # another process installed it while this one waited
            return find_mpspdz(explicit)
        url = release_url()
        return _install(root.absolute(), None, url, False, out,
                        expected=_expected_sha256(None, url), first_use=True)


def _host() -> tuple[str, str]:
    """(system, machine); a function so tests can pretend to be on x86-64 Linux."""
    return platform.system(), platform.machine()


def _check_host() -> None:
    # The release only ships Linux x86-64 binaries; fail before a long download.
    system, machine = _host()
    if system != "Linux" or machine not in ("x86_64", "AMD64"):
        raise MpSpdzError(
            f"the MP-SPDZ release has prebuilt binaries for x86-64 Linux only, not "
            f"{system} {machine}; build MP-SPDZ from source "
            f"(https://github.com/data61/MP-SPDZ#tldr-source-distribution) and set "
            f"{ENV_VAR} or --mp-spdz to it"
        )


def _existing_install(prefix: Path) -> bool:
    return (prefix / "compile.py").exists() or (prefix / INSTALL_RECORD).exists()


def _check_prefix(prefix: Path, force: bool) -> None:
    """Refuse to overwrite anything but an MP-SPDZ installation (and that only with --force)."""
    if not prefix.exists() and not prefix.is_symlink():
        return
    if not prefix.is_dir():
        raise MpSpdzError(f"cannot install MP-SPDZ into {prefix}: it exists and is not a directory")
    if not any(prefix.iterdir()):
        return
    if not _existing_install(prefix):
        # --force must never wipe an arbitrary directory (think `--prefix ~`).
        raise MpSpdzError(
            f"cannot install MP-SPDZ into {prefix}: it is a non-empty directory that does "
            "not hold an MP-SPDZ installation; choose another --prefix"
        )
    if not force:
        version = MpSpdz(prefix).version or "unknown version"
        raise MpSpdzError(
            f"{prefix} already holds an MP-SPDZ installation ({version}); "
            "use `ltm mpspdz install --force` to replace it"
        )


def _offline_hint(target: Path) -> str:
    """The ways to MP-SPDZ without this download, for the one-line error."""
    name = posixpath.basename(RELEASE_URL)
    return (
        f"instead, download {name} elsewhere and run `ltm mpspdz install --archive FILE`, "
        f"build MP-SPDZ v{SUPPORTED_VERSION} from source into {target} per its README "
        f"(https://github.com/data61/MP-SPDZ#tldr-source-distribution), or set {ENV_VAR} "
        "to an existing MP-SPDZ directory"
    )


def _download(url: str, dest: Path, target: Path, out: IO[str], first_use: bool) -> str:
    """Stream ``url`` to ``dest``; return its sha256.

    A tqdm bar shows the progress on a terminal; in a log (``out`` is no
    terminal) only the line before and the line after are written.
    """
    # Here, not at the top: every run imports this module (ensure_mpspdz), few download.
    import urllib.error
    import urllib.request

    from tqdm import tqdm

    offline = _offline_hint(target)
    digest = hashlib.sha256()
    done = 0
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            total = int(response.headers.get("Content-Length") or 0)
            # One line that says everything before the bar: what, from where, how big, where to.
            size = f"{total / 1e6:.1f} MB" if total else "size unknown"
            what = f"{url} (the MP-SPDZ v{SUPPORTED_VERSION} release, {size}) into {target}"
            line = (
                f"MP-SPDZ is not installed, so this first use installs it: downloading {what} "
                f"(--no-install or {NO_INSTALL_ENV_VAR}=1 turns this off)"
                if first_use
                else f"Downloading {what}"
            )
            print(line, file=out, flush=True)
            with tqdm(total=total or None, unit="B", unit_scale=True, unit_divisor=1000,
                      file=out, disable=not _is_terminal(out), dynamic_ncols=True,
                      mininterval=0.2, leave=True) as bar, dest.open("wb") as fh:
                while chunk := response.read(_CHUNK):
                    fh.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the open connection; unclosed it leaks a socket
        raise MpSpdzError(
            f"download of {url} failed: HTTP {exc.code} {exc.reason}; check the URL, or {offline}"
        ) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise MpSpdzError(f"download of {url} failed: {reason}; {offline}") from exc
    if total and done != total:
        raise MpSpdzError(
            f"download of {url} was cut short ({done} of {total} bytes); retry, or {offline}"
        )
    print(f"  downloaded {done / 1e6:.1f} MB", file=out)
    return digest.hexdigest()


def _is_terminal(out: IO[str]) -> bool:
    isatty = getattr(out, "isatty", None)  # a StringIO or a pytest capture may lack it
    return bool(isatty and isatty())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _move_into_place(tree: Path, prefix: Path, scratch: Path) -> None:
    """Swap the new tree in; the old one is only discarded once the new one is there."""
    if prefix.exists() or prefix.is_symlink():
        old = scratch / "previous"
        os.replace(prefix, old)
        try:
            os.replace(tree, prefix)
        except BaseException:
            os.replace(old, prefix)
            raise
    else:
        os.replace(tree, prefix)


@contextmanager
def _install_lock(target: Path, out: IO[str]) -> Iterator[None]:
    """Hold the lock of ``target``'s installation; concurrent installers wait here."""
    def waiting(holder: str) -> None:
        print(f"Waiting for another process installing MP-SPDZ into {target}", file=out,
              flush=True)

    # A failed install leaves no parent directory it made behind either.
    with parents_made(target), file_lock(target, busy=waiting):
        yield


def install(
    prefix: str | os.PathLike[str] | None = None,
    archive: str | os.PathLike[str] | None = None,
    url: str | None = None,
    force: bool = False,
    out: IO[str] | None = None,
    sha256: str | None = None,
) -> MpSpdz:
    """Download (or take ``archive``), unpack, set up and verify a release at ``prefix``.

    ``url`` defaults to :func:`release_url`. The archive's sha256 is printed, and
    must equal ``sha256`` (else ``$LTM_MPSPDZ_SHA256``, else the official release's
    pinned digest when it is downloaded from its URL) where one is given: a mismatch
    is refused before anything is unpacked. All work happens in a scratch
    directory next to ``prefix`` (same file system, so the final rename is
    atomic); on any failure it is removed and an existing installation is left
    as it was. Concurrent installs into one prefix run one after the other.
    ``out`` defaults to the current ``sys.stdout``.
    """
    out = out or sys.stdout
    target = Path(prefix).expanduser().absolute() if prefix else default_home().absolute()
    source_path = Path(archive).expanduser().absolute() if archive else None
    if source_path is not None and not source_path.is_file():
        raise MpSpdzError(f"archive {source_path} does not exist or is not a file")
    url = url or release_url()
    expected = _expected_sha256(sha256, None if source_path else url)
    # Checked before the lock too, so a refused --prefix creates no parent directory.
    _check_host()
    _check_prefix(target, force)
    with _install_lock(target, out):
        return _install(target, source_path, url, force, out, expected=expected)


def _install(
    target: Path, source_path: Path | None, url: str, force: bool, out: IO[str],
    expected: tuple[str, str] = ("", ""), first_use: bool = False,
) -> MpSpdz:
    """:func:`install` under its lock (``ensure_mpspdz`` holds it already)."""
    from harness.engine.release import extract, set_up, verify

    _check_host()
    _check_prefix(target, force)

    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.install-", dir=target.parent))
    try:
        if source_path is None:
            archive_file = scratch / "download.tar"
            sha256 = _download(url, archive_file, target, out, first_use)
            source, label = url, url
        else:
            archive_file = source_path
            print(f"Using archive {source_path}", file=out)
            sha256 = _sha256(source_path)
            source, label = str(source_path), str(source_path)
        _check_sha256(sha256, *expected, f"the download of {url}" if source_path is None
                      else f"archive {source_path}", out)

        print("Unpacking", file=out)
        tree = extract(archive_file, scratch / "unpacked", label)
        variant = set_up(tree, label)
        verify(tree, label, variant)
        version = MpSpdz(tree).version
        record = {
            "source": source,
            "sha256": sha256,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "version": version,
            "binaries": f"Linux-{variant}",
        }
        (tree / INSTALL_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        _move_into_place(tree, target, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    mp = MpSpdz(target)
    print(
        f"Installed MP-SPDZ {version or 'of unknown version'} (Linux-{variant} binaries: "
        f"{', '.join(mp.binaries())}) in {target}",
        file=out,
    )
    if version != SUPPORTED_VERSION:
        print(
            f"Warning: ltm-harness is tested with MP-SPDZ {SUPPORTED_VERSION}, "
            f"this is {version or 'an unknown version'}",
            file=out,
        )
    _print_usage_hint(target, out)
    return mp


def _print_usage_hint(target: Path, out: IO[str]) -> None:
    # Say how to use it when plain `ltm ...` would pick another directory.
    chosen, source = locate(None)
    if chosen.expanduser().absolute() != target:
        why = f"{ENV_VAR} points to {chosen}" if source == ENV_VAR else "it is not the default"
        print(
            f"Note: {why}; use it with --mp-spdz {target} or `export {ENV_VAR}={target}`",
            file=out,
        )
