"""The harness a host runs: a wheel of this machine's harness, and installing it there.

The wheel is built from the running harness's own files (a checkout, or an
installed copy), reproducibly: the same files give the same bytes, so nothing
needs to be published anywhere. :func:`harness_digest`, over those files, is
what hosts are compared by (``ltm hosts check`` and ``ltm hosts setup``).

A host gets the wheel with its base dependencies only, as pip resolves them
from the wheel's own metadata: what the hosts run (:mod:`harness.remote.agent`,
the MP-SPDZ installer) needs no extra, so none of the analysis or cloud
libraries is installed there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from harness._version import __version__
from harness.engine import Command, check_call
from harness.errors import LtmError, PartyError
from harness.remote._shell import RemoteShell, put_atomic, shell_path
from harness.remote.hosts import REMOTE_VENV

__all__ = ["HARNESS_HOME", "HarnessBuild", "build_harness", "file_sha256", "harness_digest",
           "install_harness"]

HARNESS_HOME = "~/.local/share/ltm-harness"
_WHEELS = f"{HARNESS_HOME}/wheels"
_INSTALL_TIMEOUT = 1800.0  # pip on a slow host
_BUILD_TIMEOUT = 300.0
# Fixed zip timestamps make the wheel a function of the source: the same tree
# gives the same sha256 on every build.
_SOURCE_DATE_EPOCH = "315532800"
# infra/ sits beside harness/ in a checkout and inside it (harness/infra) once installed.
_PACKAGES = ("harness", "infra", "mpc_programs")
_TOP_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt", "setup.cfg")


def _source_root() -> Path | None:
    """The source tree this harness runs from, if it runs from one (editable or checkout)."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "ltm-harness"' in pyproject.read_text(errors="replace"):
        return root
    return None


def _harness_files() -> list[tuple[str, Path]]:
    """(relative path, file) of everything that goes into the wheel, sorted."""
    root = _source_root()
    if root is not None:
        files = [(name, root / name) for name in _TOP_FILES if (root / name).is_file()]
        for package in _PACKAGES:
            for path in (root / package).rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    files.append((path.relative_to(root).as_posix(), path))
        return sorted(files)
    try:
        dist = importlib.metadata.distribution("ltm-harness")
    except importlib.metadata.PackageNotFoundError:
        raise LtmError("cannot find this harness's source tree or installed files to build a "
                       "wheel from; install it with pip (or run from a checkout)") from None
    files = []
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry)))
        name = entry.as_posix()
        if (name.split("/")[0] in _PACKAGES and path.is_file()
                and "__pycache__" not in entry.parts):
            files.append((name, path))
    return sorted(files)


def harness_digest(files: list[tuple[str, Path]] | None = None) -> str:
    """sha256 over the harness's files: equal digests, equal harness."""
    h = hashlib.sha256(f"ltm-harness {__version__}\n".encode())
    for name, path in files if files is not None else _harness_files():
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class HarnessBuild:
    version: str
    digest: str  # of the source files (cheap; what hosts are compared by)
    wheel: Path | None = None  # built lazily, only when some host needs it
    sha256: str | None = None


def build_harness(out_dir: Path) -> HarnessBuild:
    """A wheel of the running harness in ``out_dir`` (reproducible: same files, same bytes)."""
    files = _harness_files()
    digest = harness_digest(files)
    root = _source_root()
    tree = out_dir / "src"
    if root is not None:
        for name, path in files:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tree / name)
    else:
        _write_installed_tree(tree, files)
    dist = out_dir / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    # pip builds in an isolated environment with the build backend pyproject.toml
    # asks for, whatever setuptools this Python has.
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q",
            "--disable-pip-version-check", "-w", str(dist), str(tree)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        check_call(Command("build-wheel", argv, out_dir, env=env, log_dir=out_dir / "logs"),
                   _BUILD_TIMEOUT)
    except PartyError as exc:
        raise LtmError(f"could not build a wheel of the harness with pip (its build backend, "
                       f"setuptools, comes from the package index): {exc}") from None
    wheels = sorted(dist.glob("ltm_harness-*.whl"))
    if len(wheels) != 1:
        raise LtmError(f"building the harness's wheel left {len(wheels)} wheels in {dist}")
    wheel = wheels[0]
    return HarnessBuild(__version__, digest, wheel, file_sha256(wheel))


def _write_installed_tree(tree: Path, files: list[tuple[str, Path]]) -> None:
    """A buildable tree from an installed (non-editable) harness."""
    for name, path in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, tree / name)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "ltm-harness"\n'
        f'version = "{__version__}"\nrequires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(_installed_requirements())}\n"
        '[project.scripts]\nltm = "harness.cli:main"\n'
        '[tool.setuptools.packages.find]\ninclude = ["harness*", "mpc_programs*"]\n'
        '[tool.setuptools.package-data]\nmpc_programs = ["*.mpc.j2"]\n'
        '"harness.experiments" = ["specs/*.toml", "specs/*.csv"]\n')


def _installed_requirements() -> list[str]:
    """The installed harness's base dependencies (no extra's)."""
    return [r for r in importlib.metadata.requires("ltm-harness") or [] if "extra ==" not in r]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def install_harness(remote: RemoteShell, build: HarnessBuild) -> dict:
    """Upload the wheel and install it into the host's venv; the record of what it is."""
    assert build.wheel is not None and build.sha256 is not None
    wheel = f"{_WHEELS}/{build.wheel.name}"
    sftp = remote.client.open_sftp()
    try:
        put_atomic(sftp, build.wheel, remote.path(wheel), 0o644)
    finally:
        sftp.close()
    venv = shell_path(REMOTE_VENV)
    pip = f"{venv}/bin/pip"
    # pip resolves the wheel's own (base) dependencies: no list of them is kept here.
    # The wheel's version does not change with every edit, so pip is told to
    # replace the harness itself; its dependencies are installed once.
    remote.must(
        f"set -e; [ -x {pip} ] || python3 -m venv {venv}; "
        f"{pip} install -q --no-compile --disable-pip-version-check {shell_path(wheel)}; "
        f"{pip} install -q --no-compile --disable-pip-version-check --no-deps "
        f"--force-reinstall {shell_path(wheel)}; "
        f"mkdir -p \"$HOME/.local/bin\"; ln -sf {venv}/bin/ltm \"$HOME/.local/bin/ltm\"; "
        f"{venv}/bin/ltm --version",
        "installing the harness (python3 -m venv, pip install)", timeout=_INSTALL_TIMEOUT)
    return {"version": build.version, "wheel": build.wheel.name, "wheel_sha256": build.sha256,
            "digest": build.digest}
