"""A dng run whose servers' Poissons have means past 1e16, where numpy's own Poisson
sampler draws about 1.6 times the variance: the release is the certified noise, as
the run's own check of it (mean, variance, goodness of fit over 2000 cells) says."""

from __future__ import annotations

import pytest

from harness.experiments import RunConfig, run

pytestmark = pytest.mark.mpspdz


def test_a_dng_run_at_large_poisson_means_releases_the_noise_it_certifies(
        tmp_path, mp_spdz, program_cache):
    result = run(RunConfig(out=tmp_path / "out", cache_dir=program_cache, clients=2000,
                           rows=100, dim=20, program="local", mechanism="dng", epsilon=0.01,
                           delta=1e-6, seed=3, timeout=600))
    privacy = result["privacy"]
    assert privacy["server_mu"] / 2 > 1e16  # numpy's sampler: variance x 1.64 here
    assert privacy["certified_epsilon"] <= 0.01
    check = result["verification"]["noise_check"]
    assert result["verification"]["ok"] and check["ok"] and check["cells"] == 2000
    # the run's own bounds are |z| < 8; the exact sampler sits well inside them
    assert abs(check["variance_z"]) < 5 and abs(check["mean_z"]) < 5
