"""--validate and --poison: each client's row checked inside the MPC, lying clients.

The runs are real MP-SPDZ parties of every protocol, verified bit for bit (the
accepted clients' plaintext sketch); bad input is one line from the command line.
The bound itself is tests/clients/test_input_bound.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.clients import FAILURE_BITS
from harness.engine.protocols import PROTOCOLS
from harness.experiments.run import RunConfig, run

ROOT = Path(__file__).parents[2]
ALLOWED = 2.0**-FAILURE_BITS


# ------------------------------------------------------------------- bad input (the CLI)


def _ltm(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "run", "--out", str(tmp_path / "out"),
                           "--clients", "2000", "--rows", "10", "--dim", "3", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LTM_NO_INSTALL": "1"})


@pytest.mark.mpspdz
@pytest.mark.parametrize(("args", "says"), [
    (("--validate", "linf", "--program", "local"),
     "--validate linf checks each client's row inside the MPC, and --program local's servers "
     "sum their shares before it"),
    (("--validate", "l2", "--frac-bits", "30"), "does not fit the 64-bit ring's check"),
    (("--poison", "2001"), "--poison 2001 asks more clients to lie than the run has (2000)"),
])
def test_bad_input_is_one_line_before_anything_starts(tmp_path, mp_spdz, args, says):
    done = _ltm(tmp_path, *args)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("ltm: error: ") and says in done.stderr
    assert done.stderr.count("\n") == 1 and "; " in done.stderr  # the problem; the way out
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------- real runs

SMALL = {"clients": 200, "rows": 10, "dim": 3, "noise": "none", "seed": 7}
# spdz2k's comparisons cost 0.1 s each in preprocessing: its runs are smaller.
SPDZ2K = {"clients": 20, "rows": 4, "dim": 2, "noise": "none", "seed": 7}


def _run(tmp_path, cache, protocol, **kw):
    spec = PROTOCOLS[protocol]
    size = SPDZ2K if protocol == "spdz2k" else SMALL
    # spdz2k's shares carry MACs no client can write: the data owner types the rows in.
    input_mode = "party" if spec.share_format is None else None
    parties = 3 if protocol == "semi2k" else None
    return run(RunConfig(out=tmp_path / kw.pop("name", "out"), cache_dir=cache, timeout=300,
                         input_mode=input_mode, parties=parties, **{**size, **kw}))


@pytest.mark.mpspdz
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_validated_runs_verify_and_reject_exactly_the_lying_clients(
        tmp_path, mp_spdz, program_cache, protocol):
    honest = _run(tmp_path, program_cache, protocol, validation="linf", name="honest")
    assert honest.verification.ok and honest.validation is not None
    assert honest.validation["rejected_rows"] == 0 == honest.validation["expected_rejected_rows"]
    assert honest.validation["bound"] == 1.0  # plain rows: eta exactly
    lied = _run(tmp_path, program_cache, protocol, validation="l2", poison=2, name="lied")
    # the accepted clients' sketch, bit for bit, and the two liars rejected
    assert lied.verification.ok and lied.verification.mismatches == 0
    assert lied.validation["rejected_rows"] == 2 and len(lied.parameters.poisoned) == 2
    saved = json.loads((tmp_path / "lied" / "result.json").read_text())
    assert saved["parameters"]["validate"] == "l2"
    assert saved["parameters"]["poisoned"] == lied.parameters.poisoned
    assert saved["validation"]["rejected_rows"] == 2
    assert saved["validation"]["honest_rejection_bound"] == ALLOWED


@pytest.mark.mpspdz
def test_validation_rejects_noisy_honest_clients_never_and_liars_in_every_copy(
        tmp_path, mp_spdz, program_cache):
    result = run(RunConfig(out=tmp_path / "out", cache_dir=program_cache, clients=2000,
                           rows=10, dim=3, sparsity=2, seed=3, protocol="replicated-ring",
                           validation="linf", poison=3, sharing="seeded"))
    assert result.verification.ok
    v = result.validation
    assert v["rejected_rows"] == 3 * 2 and v["z"] > 7  # each liar's two copies
    assert v["bound_lattice"] == 2**16 + v["noise_bound_lattice"]


@pytest.mark.mpspdz
@pytest.mark.parametrize("input_mode", ["shares", "party"])
def test_the_reference_program_checks_each_row_it_reads(tmp_path, mp_spdz, program_cache,
                                                          input_mode):
    result = run(RunConfig(out=tmp_path / "out", cache_dir=program_cache, program="reference",
                           input_mode=input_mode, protocol="ps-rep-ring", validation="linf",
                           poison=1, timeout=300, **SMALL))
    assert result.verification.ok and result.validation["rejected_rows"] == 1


@pytest.mark.mpspdz
def test_without_validation_the_liars_count_and_the_sketch_is_verified_as_sent(
        tmp_path, mp_spdz, program_cache):
    result = _run(tmp_path, program_cache, "replicated-ring", poison=3)
    assert result.verification.ok and result.validation is None
    assert len(result.parameters.poisoned) == 3
    output = np.load(tmp_path / "out" / "output.npy")
    assert np.abs(output).max() > 1e12  # the liars' words moved their cells past any use
