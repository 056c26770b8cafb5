"""Result files: versioned JSON, metadata stamps, flat rows, safe output dirs."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

from harness._version import __version__
from harness.errors import InputError
from harness.fileio import write_atomic

__all__ = ["FORMAT_VERSION", "machine_info", "metadata", "output_directory",
           "write_json_atomic", "flat_rows"]

FORMAT_VERSION = 1


def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu": cpu, "cpu_count": os.cpu_count()}


def metadata(*, mp_spdz: dict | None, protocol: str, parties: int) -> dict:
    return {
        "harness_version": __version__,
        "mp_spdz_version": (mp_spdz or {}).get("version"),
        "mp_spdz": mp_spdz,
        "protocol": protocol,
        "parties": parties,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **machine_info(),
    }


def write_json_atomic(path: Path, obj: object) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default)
    write_atomic(path, text + "\n")


def _json_default(obj: object) -> object:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


@contextmanager
def output_directory(out: Path, *, force: bool = False):
    """Yield a staging directory that becomes ``out`` only if the block succeeds.

    An existing non-empty ``out`` is refused unless ``force``; then it is
    replaced only once the new results are complete.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out} already holds results; choose another directory "
                         "or pass --force to replace them")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out)


def flat_rows(result: dict) -> list[dict]:
    """One flat row per party: parameters, measurements, machine info (for pandas)."""
    params = {k: v for k, v in result["parameters"].items() if not isinstance(v, dict | list)}
    noise = result["parameters"].get("noise", {})
    meta = {k: v for k, v in result["metadata"].items() if not isinstance(v, dict | list)}
    rows = []
    for party in result["parties"]:
        rows.append({**params, "noise": noise.get("kind"), **party,
                     "t_mpc_s": result["t_mpc_s"], "c_mpc_mb": result["c_mpc_mb"],
                     "model_c_mpc_mb": result["model_c_mpc_mb"],
                     "verified": result["verification"]["ok"], **meta})
    return rows
