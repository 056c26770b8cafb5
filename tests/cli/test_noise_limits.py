"""Numbers every option accepts alone, whose combination no noise can carry: refused in
one line by ``ltm run`` (the real command, MP-SPDZ installed) before anything starts,
instead of a run that fails after its stream (a Poisson past numpy's range, an
overflow in the accountant, a lattice that rounds every value to 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.mpspdz

SMALL = ["--program", "local", "--clients", "2000", "--rows", "10", "--dim", "4",
         "--seed", "1", "--timeout", "120"]


@pytest.mark.parametrize(("args", "needles"), [
    # the servers' Poissons would need a mean of 2^235 (numpy: "lam value too large")
    (["--mechanism", "dng", "--epsilon", "1e-3", "--delta", "1e-30"],
     ["beyond the 2^62 an exact draw reaches", "raise --epsilon or --delta"]),
    (["--mechanism", "dng", "--eta", "1e6"], ["an exact draw reaches", "lower --frac-bits"]),
    (["--mechanism", "dng", "--frac-bits", "52"], ["an exact draw reaches"]),
    # the accountant overflowed (dng), or a bound of "--clients <= 0" was named (central)
    (["--mechanism", "dng", "--eta", "1e300"],
     ["could sum past 2^63 in one bucket", "use a smaller --eta"]),
    (["--mechanism", "central", "--eta", "1e300"],
     ["could sum past 2^62 in one bucket", "use a smaller --eta"]),
    (["--mechanism", "central", "--eta", "1e14"], ["use --frac-bits 4, or a smaller --eta"]),
    (["--mechanism", "dng", "--eta", "1e12", "--clients", "100000"],
     ["an exact draw reaches"]),
    # every value rounds to 0: no sensitivity to calibrate to (a ValueError, a log of 0)
    (["--mechanism", "dng", "--eta", "1e-9"],
     ["below half a step of the lattice", "use --frac-bits 29 or more"]),
    (["--mechanism", "central", "--eta", "1e-300"],
     ["below half a step of the lattice", "rescale the data to a larger --eta"]),
    # the lattice's accountant failed inside dp-accounting (an IndexError)
    (["--calibration", "corollary", "--epsilon", "1e5"],
     ["--epsilon must lie in (0, 100] for gaussian noise"]),
    (["--epsilon", "1e5"], ["--epsilon must lie in [0.0001, 100] for gaussian noise"]),
    # "use --frac-bits 0 or less, or raise --epsilon" where no --frac-bits helps
    (["--noise", "laplace", "--dense", "--eta", "1e300"],
     ["too wide for the lattice", "raise --epsilon, or lower --eta"]),
])
def test_numbers_no_noise_can_carry_are_refused_before_the_run(tmp_path, mp_spdz, args,
                                                              needles):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "harness", "run", *SMALL, *args, "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "LTM_NO_INSTALL": "1",
                               "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("ltm: error: ") and done.stderr.count("\n") == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr
    assert "--clients <= 0" not in done.stderr and "or less" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no --out, no cache
