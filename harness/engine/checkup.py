"""``ltm doctor``: what is installed, and how to fix what is not."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from typing import IO

from harness.engine.installer import ensure_mpspdz
from harness.engine.mpspdz import OPTIONAL_BINARIES, REQUIRED_BINARIES, is_executable, locate
from harness.engine.protocols import PROTOCOLS, unusable_reason
from harness.errors import MpSpdzError

__all__ = ["PYTHON_PACKAGES", "compiled_loops", "doctor"]

# Import name -> distribution name (they coincide today; kept apart so a
# package whose names differ does not silently break the version lookup).
PYTHON_PACKAGES = {
    "numpy": "numpy",
    "jinja2": "Jinja2",
    "paramiko": "paramiko",
    "boto3": "boto3",
    "pandas": "pandas",
}


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


def compiled_loops() -> list[tuple[str, str | None]]:
    """The install's compiled loops: each one's name and how it runs, or None where it
    was not built (the clients then take numpy's path: the same values, more slowly)."""
    from harness.clients import compiled_gaussian, compiled_sketch, vector_gaussian
    from harness.stream import compiled_placer

    gaussian = (("four draws at a time (AVX2)" if vector_gaussian() else "one draw at a time")
                if compiled_gaussian() else None)
    sketch = "harness/clients/_sketch.c" if compiled_sketch() else None
    return [("Gaussian sampler", gaussian and f"harness/clients/_gaussian.c, {gaussian}"),
            ("sketch's loops", sketch),
            ("servers' copy into fast's blocks",
             "harness/stream/_blocks.c" if compiled_placer() else None)]


_SLOWER = {"Gaussian sampler": "the clients' noise is drawn through numpy, about twice "
                               "the time",
           "sketch's loops": "the sketch's buckets are drawn through numpy, about twice "
                             "the time",
           "servers' copy into fast's blocks": "fast's servers lay out their share files "
                                               "through numpy, more slowly"}


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
    root, source = locate(explicit)
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
            present = is_executable(mp.root / name)
            healthy = healthy and (present or optional)
            label = f"{name} (optional)" if optional else name
            hint = (
                f"fix: `ltm mpspdz install`, or build it in {mp.root} per MP-SPDZ's README"
                if not present
                else ""
            )
            _line(out, present, label, hint)
        usable: list[str] = []
        unusable: list[str] = []
        for proto in PROTOCOLS.values():
            reason = (unusable_reason(proto.name, mp.root)
                      if is_executable(mp.root / proto.binary) else f"no {proto.binary}")
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

    # Not required: without them a run draws the same values through numpy.
    print("Compiled loops (built by the install, optional):", file=out)
    for name, how in compiled_loops():
        status = "ok" if how else "slower"
        detail = how or (f"not built: {_SLOWER[name]}; fix: reinstall the harness where a C "
                         "compiler is installed (`pip install -e .` in a checkout)")
        print(f"  {status:<8} {name}  {detail}", file=out)

    print(
        "All required components found." if healthy else "Some required components are missing.",
        file=out,
    )
    return healthy
