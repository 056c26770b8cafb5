"""The accountant's certificates, remembered across runs.

:func:`harness.privacy.accounting.certify` imports dp-accounting, which imports
most of scipy: seconds of start-up, more than a whole run at a million clients
takes. Its answer is a function of the noise's parameters, the harness's own
accounting code and dp-accounting's, so :func:`certificate` keeps it, keyed by
all three, in ``$XDG_CACHE_HOME/ltm-harness/certificates`` (as the compiled
programs are kept): a run with parameters certified before does not import
the accountant at all. A changed line anywhere in :mod:`harness.privacy`, or
another dp-accounting, is another key; an unreadable entry is computed anew.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.machinery
import json
import math
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from harness.fileio import write_atomic
from harness.privacy import accounting as privacy

__all__ = ["calibrated", "central_sigma", "certificate", "certificate_dir", "honest_split"]

# The entries' own format: another one is another key.
_FORMAT = 1


def certificate_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ltm-harness" / "certificates"


def certificate(noise: privacy.CalibratedNoise) -> tuple[float, float]:
    """``privacy.certify(noise)``, from the cache when these parameters were certified."""
    if not dataclasses.is_dataclass(noise) or isinstance(noise, type):
        return privacy.certify(noise)  # nothing to key it by
    fields = _fields(noise)
    return _remembered([type(noise).__qualname__, fields], {"noise": fields},
                       lambda: privacy.certify(noise))


def honest_split(noise: privacy.CalibratedNoise) -> tuple[int, float]:
    """``privacy.guaranteed_honest(noise)``: (H, delta_E), from the cache when known (the
    exact binomial tail's search needs scipy and dp-accounting)."""
    if not dataclasses.is_dataclass(noise) or isinstance(noise, type):
        return privacy.guaranteed_honest(noise)
    def split() -> tuple[float, float]:
        honest, failure = privacy.guaranteed_honest(noise)
        return float(honest), failure

    fields = _fields(noise)
    honest, failure = _remembered(["honest split", type(noise).__qualname__, fields],
                                  {"honest_split": fields}, split)
    return int(honest), failure


def calibrated(noise: Any, what: str, compute: Callable[[], float]) -> float:
    """``compute()``, a calibration of ``noise`` (any dataclass: its fields are the key)
    named ``what``, from the cache when known."""
    if not dataclasses.is_dataclass(noise) or isinstance(noise, type):
        return compute()
    fields = _fields(noise)
    value, _ = _remembered([what, type(noise).__qualname__, fields], {what: fields},
                           lambda: (compute(), 0.0))
    return value


def central_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """``privacy.analytic_gaussian_sigma``, the central model's noise that every run's
    result compares its own with, from the same cache (it too needs dp-accounting)."""
    unit, _ = _remembered(["central sigma", epsilon, delta],
                          {"central_sigma": [epsilon, delta]},
                          lambda: (privacy.analytic_gaussian_sigma(1.0, epsilon, delta), 0.0))
    return sensitivity * unit


def _remembered(what: list, record: dict,
                compute: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """``compute()``, kept under ``what`` (with the code's identity) beside ``record``."""
    digest = hashlib.sha256()
    digest.update(json.dumps([_FORMAT, *what], sort_keys=True, default=repr).encode())
    digest.update(_code_digest())
    path = certificate_dir() / f"{digest.hexdigest()}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        return float(entry["epsilon"]), float(entry["delta"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not computed yet, or an entry that cannot be read: compute anew
    first, second = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # JSON has no infinity: a string keeps "nothing certified" exact.
        write_atomic(path, json.dumps({"epsilon": repr(first), "delta": repr(second),
                                       **record}, sort_keys=True) + "\n")
    except OSError:  # a read-only or full cache costs the next run time, nothing else
        pass
    return first, second


def _fields(noise: Any) -> dict[str, object]:
    return {f.name: _plain(getattr(noise, f.name)) for f in dataclasses.fields(noise)}


def _plain(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


@cache
def _code_digest() -> bytes:
    """The accounting code's identity: every source of this package, and dp-accounting's
    installed files' (an upgrade rewrites them)."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    # PathFinder, not importlib.util.find_spec: that would ask the lazy module in
    # sys.modules for its __spec__, which imports it
    spec = importlib.machinery.PathFinder.find_spec("dp_accounting")
    if spec is not None and spec.origin:
        for found in sorted(Path(spec.origin).parent.rglob("*.py")):
            stat = found.stat()
            digest.update(f"{found}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.digest()
