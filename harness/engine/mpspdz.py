"""Finding, checking and installing MP-SPDZ.

Every command that compiles or runs a program goes through :func:`find_mpspdz`
(or :func:`ensure_mpspdz`, which installs the release on first use), so there is
one place that decides which MP-SPDZ is used (``--mp-spdz`` > ``$MP_SPDZ_HOME`` >
the default location) and one error message that says how to get it.
:func:`doctor` reports what is there; :func:`install` sets up the official
binary release without running its shell scripts, so that a failure half-way
never leaves a broken installation behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import lzma
import os
import platform
import posixpath
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from harness.engine.protocols import DEFAULT_PROTOCOL, PROTOCOLS, binaries, unusable_reason
from harness.errors import MpSpdzError

__all__ = [
    "DEFAULT_HOME",
    "RELEASE_URL",
    "SUPPORTED_VERSION",
    "MpSpdz",
    "default_home",
    "doctor",
    "ensure_mpspdz",
    "find_mpspdz",
    "install",
    "install_disabled",
    "release_url",
]

SUPPORTED_VERSION = "0.4.2"
RELEASE_URL = (
    f"https://github.com/data61/MP-SPDZ/releases/download/v{SUPPORTED_VERSION}/"
    f"mp-spdz-{SUPPORTED_VERSION}.tar.xz"
)
ENV_VAR = "MP_SPDZ_HOME"
URL_ENV_VAR = "LTM_MPSPDZ_URL"  # a mirror of the release (and the tests' local server)
NO_INSTALL_ENV_VAR = "LTM_NO_INSTALL"
INSTALL_RECORD = ".ltm-install.json"

# The default protocol's binary is required; the others only for their --protocol.
REQUIRED_BINARIES = (PROTOCOLS[DEFAULT_PROTOCOL].binary,)
OPTIONAL_BINARIES = tuple(b for b in binaries() if b not in REQUIRED_BINARIES)
# Import name -> distribution name (they coincide today; kept apart so a
# package whose names differ does not silently break the version lookup).
PYTHON_PACKAGES = {
    "numpy": "numpy",
    "jinja2": "Jinja2",
    "paramiko": "paramiko",
    "boto3": "boto3",
    "pandas": "pandas",
}

DOWNLOAD_TIMEOUT = 60.0  # seconds without data before a download is abandoned
_CHUNK = 1 << 20

_VERSION_RE = re.compile(r"^## (\d+\.\d+\.\d+)")


def default_home() -> Path:
    """Where ``ltm mpspdz install`` puts MP-SPDZ unless told otherwise.

    A function (not only a constant) so that tests, which change ``HOME`` and
    ``XDG_DATA_HOME``, never see the real user's installation.
    """
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share"
    return Path(base) / "ltm-harness" / "mp-spdz"


DEFAULT_HOME = default_home()


def _fix_hint() -> str:
    return (
        "run `ltm mpspdz install` (downloads the official "
        f"v{SUPPORTED_VERSION} release), `ltm mpspdz install --archive FILE` "
        f"(installs a release tarball already on disk), or set {ENV_VAR} / "
        "--mp-spdz to an existing MP-SPDZ directory"
    )


@dataclass(frozen=True)
class MpSpdz:
    """An MP-SPDZ directory: the compiler plus whatever party binaries it has."""

    root: Path

    @property
    def compiler(self) -> Path:
        return self.root / "compile.py"

    def binary(self, name: str) -> Path:
        """The path of a party binary; an error that says how to get it if absent."""
        path = self.root / name
        if not _is_executable(path):
            raise MpSpdzError(
                f"MP-SPDZ binary {name} is missing (or not executable) in {self.root}; "
                f"run `ltm mpspdz install` for the prebuilt release, or "
                f"build it in {self.root} per MP-SPDZ's README"
            )
        return path

    @property
    def version(self) -> str | None:
        """The newest release named in CHANGELOG.md (source builds have one too)."""
        try:
            text = (self.root / "CHANGELOG.md").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            match = _VERSION_RE.match(line)
            if match:
                return match.group(1)
        return None

    def binaries(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*-party.x") if _is_executable(p))

    def describe(self) -> dict[str, Any]:
        """What a result's metadata records about the engine that produced it."""
        return {
            "root": str(self.root),
            "version": self.version,
            "binaries": self.binaries(),
            "compiler": self.compiler.is_file(),
        }


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _locate(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The directory to use and which rule chose it (for messages)."""
    if explicit:
        return Path(explicit).expanduser(), "--mp-spdz"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), ENV_VAR
    return default_home(), "default location"


def _problem(root: Path) -> str | None:
    """Why ``root`` is not a usable MP-SPDZ directory, or None if it is."""
    if not root.exists():
        return "does not exist"
    if not root.is_dir():
        return "is not a directory"
    if not (root / "compile.py").is_file():
        return "has no compile.py"
    if not (root / "Compiler").is_dir():
        return "has no Compiler/ package"
    return None


def find_mpspdz(explicit: str | os.PathLike[str] | None = None) -> MpSpdz:
    """The MP-SPDZ to use: ``explicit`` (``--mp-spdz``) > ``$MP_SPDZ_HOME`` > default."""
    root, source = _locate(explicit)
    problem = _problem(root)
    if problem:
        raise MpSpdzError(f"MP-SPDZ not found: {root} (from {source}) {problem}; {_fix_hint()}")
    return MpSpdz(root.absolute())


def release_url() -> str:
    """The release to download: ``$LTM_MPSPDZ_URL`` (a mirror) or the official one."""
    return os.environ.get(URL_ENV_VAR) or RELEASE_URL


def install_disabled() -> bool:
    """Whether ``$LTM_NO_INSTALL`` forbids installing on first use."""
    return os.environ.get(NO_INSTALL_ENV_VAR, "").strip().lower() not in ("", "0", "no", "false")


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
    root, source = _locate(explicit)
    if source != "default location" or not auto_install or install_disabled():
        return find_mpspdz(explicit)
    if _occupied(root):
        return find_mpspdz(explicit)
    out = out or sys.stderr
    with _install_lock(root, out):
        if _occupied(root):  # another process installed it while this one waited
            return find_mpspdz(explicit)
        return _install(root.absolute(), None, release_url(), False, out, first_use=True)


# --------------------------------------------------------------------------- doctor


def _package_version(module: str, dist: str) -> str | None:
    """The installed version, or None; found without importing (boto3 is slow)."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _find_openssl() -> str | None:
    return shutil.which("openssl")


def _line(out: IO[str], ok: bool, what: str, detail: str = "") -> None:
    status = "ok" if ok else "MISSING"
    print(f"  {status:<8} {what}{'  ' + detail if detail else ''}", file=out)


def doctor(
    explicit: str | os.PathLike[str] | None = None,
    out: IO[str] | None = None,
    fix: bool = False,
) -> bool:
    """Print what is installed and how to fix what is not; True if all required is there.

    ``fix`` installs the release first when nothing is configured, as
    :func:`ensure_mpspdz` does. ``out`` defaults to the *current* ``sys.stdout``
    (looked up per call, so redirected or captured output works).
    """
    out = out or sys.stdout
    healthy = True
    root, source = _locate(explicit)
    print(f"MP-SPDZ: {root} (from {source})", file=out)
    try:
        mp = ensure_mpspdz(explicit, auto_install=fix, out=out)
    except MpSpdzError as exc:
        healthy = False
        print(f"  MISSING  {exc}", file=out)
    else:
        print(f"  version  {mp.version or 'unknown'}", file=out)
        _line(out, True, "compile.py")
        for name in REQUIRED_BINARIES + OPTIONAL_BINARIES:
            optional = name in OPTIONAL_BINARIES
            present = _is_executable(mp.root / name)
            healthy = healthy and (present or optional)
            label = f"{name} (optional)" if optional else name
            fix = (
                f"fix: `ltm mpspdz install`, or build it in {mp.root} per MP-SPDZ's README"
                if not present
                else ""
            )
            _line(out, present, label, fix)
        usable, unusable = [], []
        for proto in PROTOCOLS.values():
            reason = (unusable_reason(proto.name, mp.root)
                      if _is_executable(mp.root / proto.binary) else f"no {proto.binary}")
            (unusable if reason else usable).append(f"{proto.name} ({reason})" if reason
                                                    else proto.name)
        print(f"  protocols usable: {', '.join(usable) or 'none'}", file=out)
        for line in unusable:
            print(f"  protocol not usable: {line}", file=out)

    print("Python packages:", file=out)
    for module, dist in PYTHON_PACKAGES.items():
        version = _package_version(module, dist)
        healthy = healthy and version is not None
        _line(out, version is not None, module, version or f"fix: pip install {dist}")

    print("Tools:", file=out)
    openssl = _find_openssl()
    healthy = healthy and openssl is not None
    _line(
        out,
        openssl is not None,
        "openssl",
        openssl
        or "fix: install OpenSSL (e.g. `apt-get install openssl`); "
        "it makes each run's SSL certificates",
    )

    print(
        "All required components found." if healthy else "Some required components are missing.",
        file=out,
    )
    return healthy


# -------------------------------------------------------------------------- install


def _host() -> tuple[str, str]:
    """(system, machine); a function so tests can pretend to be on x86-64 Linux."""
    return platform.system(), platform.machine()


def _cpu_flags() -> set[str]:
    """The CPU feature flags from /proc/cpuinfo (empty if unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


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


def _cpu_variant() -> str:
    """Which prebuilt binaries suit this CPU, as the release's Scripts/tldr.sh decides."""
    return "adx" if "adx" in _cpu_flags() else "amd64"


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


class _Progress:
    """A progress bar on a terminal; a line per tenth elsewhere (logs stay short)."""

    WIDTH = 30

    def __init__(self, out: IO[str], total: int) -> None:
        self.out, self.total, self.shown = out, total, -1
        isatty = getattr(out, "isatty", None)
        self.bar = bool(isatty and isatty())

    def update(self, done: int) -> None:
        if not self.total:
            return
        if self.bar:
            percent = done * 100 // self.total
            if percent != self.shown:
                self.shown = percent
                filled = self.WIDTH * done // self.total
                print(
                    f"\r  [{'#' * filled}{'.' * (self.WIDTH - filled)}] {percent:3d}% of "
                    f"{self.total / 1e6:.1f} MB",
                    end="",
                    file=self.out,
                    flush=True,
                )
        else:
            tenth = done * 10 // self.total
            if max(self.shown, 0) < tenth < 10:
                self.shown = tenth
                print(f"  {tenth * 10}% of {self.total / 1e6:.1f} MB", file=self.out)

    def close(self) -> None:
        if self.bar and self.shown >= 0:
            print(file=self.out, flush=True)


def _download(url: str, dest: Path, target: Path, out: IO[str], first_use: bool) -> str:
    """Stream ``url`` to ``dest``; return its sha256."""
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
            progress = _Progress(out, total)
            try:
                with dest.open("wb") as fh:
                    while chunk := response.read(_CHUNK):
                        fh.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        progress.update(done)
            finally:
                progress.close()
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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


def _extract(archive: Path, dest: Path, label: str) -> Path:
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


def _set_up(tree: Path, label: str) -> str:
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


def _verify(tree: Path, label: str, variant: str) -> None:
    problem = _problem(tree)
    if problem:
        raise MpSpdzError(f"{label} is not a usable MP-SPDZ release: it {problem}")
    for name in REQUIRED_BINARIES:
        if not _is_executable(tree / name):
            raise MpSpdzError(
                f"{label} does not provide an executable {name} in bin/Linux-{variant}/; "
                "download the official release or build MP-SPDZ from source"
            )


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


@contextlib.contextmanager
def _install_lock(target: Path, out: IO[str]) -> Iterator[None]:
    """Hold the lock of ``target``'s installation; concurrent installers wait here."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # The lock is on the parent directory itself: no lock file is ever left behind,
    # and the parent outlives every swap of the target.
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Waiting for another process installing MP-SPDZ into {target}", file=out,
                  flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def install(
    prefix: str | os.PathLike[str] | None = None,
    archive: str | os.PathLike[str] | None = None,
    url: str | None = None,
    force: bool = False,
    out: IO[str] | None = None,
) -> MpSpdz:
    """Download (or take ``archive``), unpack, set up and verify a release at ``prefix``.

    ``url`` defaults to :func:`release_url`. All work happens in a scratch
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
    # Checked before the lock too, so a refused --prefix creates no parent directory.
    _check_host()
    _check_prefix(target, force)
    with _install_lock(target, out):
        return _install(target, source_path, url or release_url(), force, out)


def _install(
    target: Path, source_path: Path | None, url: str, force: bool, out: IO[str],
    first_use: bool = False,
) -> MpSpdz:
    """:func:`install` under its lock (``ensure_mpspdz`` holds it already)."""
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

        print("Unpacking", file=out)
        tree = _extract(archive_file, scratch / "unpacked", label)
        variant = _set_up(tree, label)
        _verify(tree, label, variant)
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
    chosen, source = _locate(None)
    if chosen.expanduser().absolute() != target:
        why = f"{ENV_VAR} points to {chosen}" if source == ENV_VAR else "it is not the default"
        print(
            f"Note: {why}; use it with --mp-spdz {target} or `export {ENV_VAR}={target}`",
            file=out,
        )
