"""The accountant's certificates are remembered across runs, never wrongly.

Real processes: a run's certificate is computed by dp-accounting once, and a later
process with the same parameters reads it without importing dp-accounting (or
scipy, which dp-accounting imports) at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.privacy import NoiseSpec, certificate, certify

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from harness.privacy import NoiseSpec, certificate
noise = NoiseSpec(kind="gaussian", n=int(sys.argv[1]), m=100, d=10, s=1)
epsilon, delta = certificate(noise)
loaded = [name for name in ("dp_accounting", "scipy")
          if name in sys.modules and type(sys.modules[name]).__name__ == "module"]
print(json.dumps({"epsilon": epsilon, "delta": delta, "loaded": loaded}))
"""


def certify_in_process(cache: Path, n: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(n)], cwd=ROOT,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)},
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


def test_a_second_run_reads_the_certificate_without_the_accountant(tmp_path):
    first = certify_in_process(tmp_path, 1_000_000)
    assert "dp_accounting" in first["loaded"]
    again = certify_in_process(tmp_path, 1_000_000)
    assert again["loaded"] == []
    assert (again["epsilon"], again["delta"]) == (first["epsilon"], first["delta"])
    expected = certify(NoiseSpec(kind="gaussian", n=1_000_000, m=100, d=10, s=1))
    assert (again["epsilon"], again["delta"]) == expected
    # other parameters are another entry, certified by the accountant again
    other = certify_in_process(tmp_path, 500_000)
    assert "dp_accounting" in other["loaded"] and other["epsilon"] != first["epsilon"]
    assert len(list((tmp_path / "ltm-harness" / "certificates").glob("*.json"))) == 2


def test_an_unreadable_or_uncertified_entry_is_computed_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    noise = NoiseSpec(kind="gaussian", n=1000, m=100, d=10, s=1, t_prime=10)
    expected = certify(noise)
    assert certificate(noise) == expected
    (entry,) = (tmp_path / "ltm-harness" / "certificates").glob("*.json")
    entry.write_text("{not json")
    assert certificate(noise) == expected
    assert json.loads(entry.read_text())["epsilon"] == repr(expected[0])
    # "nothing certified" survives the round trip as infinity, not as a number
    few = NoiseSpec(kind="gaussian", n=15_000, m=100, d=1, s=10)  # delta_E >= delta
    assert certify(few)[0] == float("inf")
    assert certificate(few) == certify(few)
    assert certificate(few) == certify(few)  # read back from its entry


_CENTRAL_PROBE = """
import json, sys
from harness.privacy import central_sigma
sigma = central_sigma(2.0, float(sys.argv[1]), 1e-6)
loaded = [name for name in ("dp_accounting", "scipy")
          if name in sys.modules and type(sys.modules[name]).__name__ == "module"]
print(json.dumps({"sigma": sigma, "loaded": loaded}))
"""


def test_the_central_sigma_every_result_compares_with_is_remembered_too(tmp_path):
    from harness.privacy import analytic_gaussian_sigma

    def probe(epsilon: float) -> dict:
        done = subprocess.run([sys.executable, "-c", _CENTRAL_PROBE, str(epsilon)], cwd=ROOT,
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
                              capture_output=True, text=True, timeout=300, check=True)
        return json.loads(done.stdout)

    first = probe(1.0)
    assert "dp_accounting" in first["loaded"]
    again = probe(1.0)
    assert again["loaded"] == [] and again["sigma"] == first["sigma"]
    assert again["sigma"] == 2.0 * analytic_gaussian_sigma(1.0, 1.0, 1e-6)
    assert probe(0.5)["sigma"] > again["sigma"]  # another epsilon, another entry
