"""Finding and checking MP-SPDZ.

Every command that compiles or runs a program goes through :func:`find_mpspdz`
(or :func:`~harness.engine.installer.ensure_mpspdz`, which installs the release on
first use), so there is one place that decides which MP-SPDZ is used
(``--mp-spdz`` > ``$MP_SPDZ_HOME`` > the default location) and one error message
that says how to get it. :mod:`.checkup` reports what is there; :mod:`.installer`
sets up the official binary release.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engine.protocols import DEFAULT_PROTOCOL, PROTOCOLS, binaries
from harness.errors import MpSpdzError

__all__ = [
    "DEFAULT_HOME",
    "ENV_VAR",
    "INSTALL_RECORD",
    "NO_INSTALL_ENV_VAR",
    "OPTIONAL_BINARIES",
    "RELEASE_SHA256",
    "RELEASE_URL",
    "REQUIRED_BINARIES",
    "SHA256_ENV_VAR",
    "SUPPORTED_VERSION",
    "URL_ENV_VAR",
    "MpSpdz",
    "default_home",
    "find_mpspdz",
    "install_disabled",
    "is_executable",
    "locate",
    "problem",
    "release_url",
]

SUPPORTED_VERSION = "0.4.2"
RELEASE_URL = (
    f"https://github.com/data61/MP-SPDZ/releases/download/v{SUPPORTED_VERSION}/"
    f"mp-spdz-{SUPPORTED_VERSION}.tar.xz"
)
# The official release's sha256, checked when it is downloaded from RELEASE_URL. Empty:
# not pinned yet, for want of a digest taken from the official file itself; until it
# is, the install prints the digest it computed and checks one given by the user.
RELEASE_SHA256 = ""
ENV_VAR = "MP_SPDZ_HOME"
SHA256_ENV_VAR = "LTM_MPSPDZ_SHA256"  # the digest the archive must have
URL_ENV_VAR = "LTM_MPSPDZ_URL"  # a mirror of the release (and the tests' local server)
NO_INSTALL_ENV_VAR = "LTM_NO_INSTALL"
INSTALL_RECORD = ".ltm-install.json"

# The default protocol's binary is required; the others only for their --protocol.
REQUIRED_BINARIES = (PROTOCOLS[DEFAULT_PROTOCOL].binary,)
OPTIONAL_BINARIES = tuple(b for b in binaries() if b not in REQUIRED_BINARIES)

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
        if not is_executable(path):
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
        return sorted(p.name for p in self.root.glob("*-party.x") if is_executable(p))

    def describe(self) -> dict[str, Any]:
        """What a result's metadata records about the engine that produced it."""
        return {
            "root": str(self.root),
            "version": self.version,
            "binaries": self.binaries(),
            "compiler": self.compiler.is_file(),
        }


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def locate(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The directory to use and which rule chose it (for messages)."""
    if explicit:
        return Path(explicit).expanduser(), "--mp-spdz"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), ENV_VAR
    return default_home(), "default location"


def problem(root: Path) -> str | None:
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
    root, source = locate(explicit)
    why = problem(root)
    if why:
        raise MpSpdzError(f"MP-SPDZ not found: {root} (from {source}) {why}; {_fix_hint()}")
    return MpSpdz(root.absolute())


def release_url() -> str:
    """The release to download: ``$LTM_MPSPDZ_URL`` (a mirror) or the official one."""
    return os.environ.get(URL_ENV_VAR) or RELEASE_URL


def install_disabled() -> bool:
    """Whether ``$LTM_NO_INSTALL`` forbids installing on first use."""
    return os.environ.get(NO_INSTALL_ENV_VAR, "").strip().lower() not in ("", "0", "no", "false")
