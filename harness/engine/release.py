"""What is in an MP-SPDZ release archive: unpacked safely, set up for this CPU, checked.

The release's own Scripts/tldr.sh is never run: the same steps happen here, so
that they can be checked one by one and fail with a message that says why.
"""

from __future__ import annotations

import lzma
import posixpath
import re
import shutil
import tarfile
import zlib
from pathlib import Path

from harness.engine.mpspdz import (
    ENV_VAR,
    REQUIRED_BINARIES,
    SUPPORTED_VERSION,
    is_executable,
    problem,
)
from harness.errors import MpSpdzError

__all__ = ["extract", "set_up", "verify"]


def _cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags from ``cpuinfo`` (empty if unreadable)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def _cpu_variant() -> str:
    """Which prebuilt binaries suit this CPU, as the release's Scripts/tldr.sh decides."""
    return "adx" if "adx" in _cpu_flags() else "amd64"


def _unsafe_reason(member: tarfile.TarInfo) -> str | None:
    """Why extracting ``member`` could write outside the target directory, if it could."""
    name = member.name
    if name.startswith(("/", "\\")) or posixpath.isabs(name) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "'..' in path"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "special file"
    if member.issym() or member.islnk():
        target = member.linkname
        if posixpath.isabs(target):
            return f"link to absolute path {target}"
        # Symlinks resolve from their own directory, hard links from the archive root.
        base = posixpath.dirname(name) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved == ".." or resolved.startswith("../"):
            return f"link pointing outside the archive ({target})"
    return None


def _top_dir(members: list[tarfile.TarInfo], archive: str) -> str:
    """The release's single top-level directory, which must contain compile.py."""
    tops = set()
    names = set()
    for member in members:
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        if parts:
            tops.add(parts[0])
            names.add("/".join(parts))
    if len(tops) != 1 or f"{next(iter(tops))}/compile.py" not in names:
        raise MpSpdzError(
            f"{archive} is not an MP-SPDZ release: expected one top-level directory "
            f"containing compile.py (got {', '.join(sorted(tops)[:5]) or 'nothing'}); "
            f"download mp-spdz-{SUPPORTED_VERSION}.tar.xz from "
            "https://github.com/data61/MP-SPDZ/releases (not a source-code-only file)"
        )
    return next(iter(tops))


def extract(archive: Path, dest: Path, label: str) -> Path:
    """Safely unpack a release into ``dest``; return its top directory."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                reason = _unsafe_reason(member)
                if reason:
                    raise MpSpdzError(
                        f"refusing to extract {label}: member {member.name!r} is unsafe ({reason})"
                    )
            top = _top_dir(members, label)
            if hasattr(tarfile, "data_filter"):
                # Second line of defence, and it strips setuid bits and odd modes.
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python < 3.10.12; the checks above still apply
                tar.extractall(dest)
    except MpSpdzError:
        raise
    except getattr(tarfile, "FilterError", ()) as exc:
        # The data filter sees what a member-by-member check cannot (links via links).
        raise MpSpdzError(f"refusing to extract {label}: unsafe member ({exc})") from exc
    except tarfile.ReadError as exc:
        # Its message lists every decompressor tried, over several lines.
        raise MpSpdzError(
            f"cannot unpack {label}: not a readable .tar.xz/.tar.gz/.tar archive (corrupt or "
            "truncated?); download the MP-SPDZ release again"
        ) from exc
    except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MpSpdzError(
            f"cannot unpack {label}: {reason}; is it a complete .tar.xz/.tar.gz/.tar "
            "MP-SPDZ release?"
        ) from exc
    return dest / top


def _copy_into(src: Path, dest: Path) -> None:
    """Like ``cp -a src/* dest/``, which is what the release's tldr.sh does."""
    for item in src.iterdir():
        target = dest / item.name
        if item.is_dir() and not item.is_symlink():
            shutil.copytree(item, target, symlinks=True, dirs_exist_ok=True)
        else:
            if target.exists() or target.is_symlink():
                target.unlink()
            shutil.copy2(item, target, follow_symlinks=False)


def set_up(tree: Path, label: str) -> str:
    """Put the binaries for this CPU next to compile.py; return the variant used."""
    variant = _cpu_variant()
    bins = tree / "bin" / f"Linux-{variant}"
    if not bins.is_dir() and variant == "adx":
        # amd64 binaries run on adx CPUs too, just slower.
        variant, bins = "amd64", tree / "bin" / "Linux-amd64"
    if not bins.is_dir():
        raise MpSpdzError(
            f"{label} has no prebuilt binaries (bin/Linux-{variant}/); it looks like a "
            "source-code-only archive: download the release file mp-spdz-"
            f"{SUPPORTED_VERSION}.tar.xz, or build from source and set {ENV_VAR}"
        )
    _copy_into(bins, tree)
    (tree / "Player-Data").mkdir(exist_ok=True)
    return variant


def verify(tree: Path, label: str, variant: str) -> None:
    why = problem(tree)
    if why:
        raise MpSpdzError(f"{label} is not a usable MP-SPDZ release: it {why}")
    for name in REQUIRED_BINARIES:
        if not is_executable(tree / name):
            raise MpSpdzError(
                f"{label} does not provide an executable {name} in bin/Linux-{variant}/; "
                "download the official release or build MP-SPDZ from source"
            )
