"""``ltm run --mechanism dng|central`` with real MP-SPDZ parties under every protocol.

Tiny sizes (3 x 2 cells, tens of coins): the test aid ``reveal_noise`` makes the MPC
reveal the noise (and central's rounded sketch) too, so every entry is checked bit
for bit: released = (rounded plaintext + noise) << (F - g).
"""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from harness.errors import InputError, TamperDetectedError, VerificationError
from harness.experiments import DIAGNOSTICS, RunConfig, run
from harness.experiments.run import summary
from harness.privacy import Dng, central, least_coins

pytestmark = pytest.mark.mpspdz

PROTOCOLS = [("semi2k", 2), ("replicated-ring", 3), ("ps-rep-ring", 3),
             ("malicious-rep-ring", 3), ("spdz2k", 2)]
# How each protocol's program draws the central noise's coins (its compiler options:
# -Z S where the protocol converts shares locally).
_SPLIT = "locally split shares (the bits of the XOR of a shared random ring element's {0} "
COINS = {"semi2k": _SPLIT, "replicated-ring": _SPLIT, "ps-rep-ring": _SPLIT,
         "malicious-rep-ring": "edaBits (their binary halves",
         "spdz2k": "random bits (MP-SPDZ's arithmetic sint.get_random_bit"}


def _config(tmp_path, cache, name="out", **kw) -> RunConfig:
    base = dict(clients=300, rows=3, dim=2, program="local", seed=5, epsilon=4.0,
                delta=1e-3, timeout=300)
    return RunConfig(out=tmp_path / name, cache_dir=cache, **{**base, **kw})


def _check(result, out, mechanism: str, exact: bool) -> dict:
    v = result["verification"]
    assert v["ok"] and v["mismatches"] == 0 and v["noise_check"]["exact"] is exact
    assert result["parameters"]["mechanism"] == mechanism
    privacy = result["privacy"]
    assert privacy["mechanism"] == mechanism
    assert privacy["certified_epsilon"] <= privacy["requested_epsilon"]
    assert privacy["std_ratio"] == pytest.approx(privacy["noise_std"] / privacy["central_std"])
    saved = json.loads((out / "result.json").read_text())
    # what result.json publishes of the check holds nothing computed from the plaintext;
    # the rest is in diagnostics.json, the owner's alone
    private = ("mean", "mean_z", "variance", "variance_z", "gof_p_value")
    assert saved["verification"]["noise_check"] == \
        {k: x for k, x in v["noise_check"].items() if k not in private}
    diagnostics = out / DIAGNOSTICS
    assert stat.S_IMODE(os.stat(diagnostics).st_mode) == 0o600
    assert json.loads(diagnostics.read_text())["verification.noise_check"] == \
        {k: v["noise_check"][k] for k in private}
    for p in result["parties"]:
        assert p["time_s"] > 0 and p["rounds"] >= 1
    return privacy


@pytest.mark.parametrize(("protocol", "parties"), PROTOCOLS)
def test_central_noise_is_drawn_inside_the_mpc_and_verified_bit_for_bit(
        tmp_path, mp_spdz, program_cache, protocol, parties):
    result = run(_config(tmp_path, program_cache, protocol=protocol, parties=parties,
                         mechanism="central", grid_bits=0, reveal_noise=True))
    privacy = _check(result, tmp_path / "out", "central", exact=True)
    assert privacy["grid_bits"] == 0 and privacy["grid_sensitivity_steps"] == 2
    # the generator names how this protocol's program drew the coins
    assert COINS[protocol].format(parties) in privacy["generator"]
    # the revealed sketch lies on the grid: nothing finer than 2^0 is revealed
    output = np.load(tmp_path / "out" / "output.npy")
    assert np.array_equal(output, np.round(output))
    # the clients sent noise-free rows
    assert result["parameters"]["noise"] == {"kind": "none"}


@pytest.mark.parametrize(("protocol", "parties"), [("semi2k", 2), ("replicated-ring", 3)])
def test_central_noise_on_its_scaled_grid_is_verified_bit_for_bit(
        tmp_path, mp_spdz, program_cache, protocol, parties):
    """The default grid: the sketch times a public scale, truncated so that one client
    moves an entry by the fewest steps (eta 0.37: no power of two fits)."""
    result = run(_config(tmp_path, program_cache, protocol=protocol, parties=parties,
                         mechanism="central", eta=0.37, epsilon=1.0, reveal_noise=True))
    privacy = _check(result, tmp_path / "out", "central", exact=True)
    assert privacy["grid_scale"] > 1
    least = least_coins(privacy["grid_sensitivity_steps"], 2, 1.0, 1e-3)
    assert least is not None and least <= privacy["coins_per_cell"] <= 1.05 * least
    assert privacy["rounding_error_bound"]["variance_vs_noise"] <= 0.01
    assert privacy["std_ratio"] <= 1.02
    # what is revealed is whole grid steps
    steps = np.load(tmp_path / "out" / "output.npy") / privacy["grid_step"]
    assert np.allclose(steps, np.round(steps), rtol=0, atol=1e-6)


@pytest.mark.parametrize("reveal_noise", [False, True])
def test_the_coarsest_grid_bits_allowed_verifies(tmp_path, mp_spdz, program_cache,
                                                 reveal_noise):
    """--grid-bits -44 at --frac-bits 16 truncates 60 bits: the values revealed are
    grid steps, so nothing of the noise is shifted out of the ring (noise of a std
    about 16 steps, in 200 cells: shifted back by 60 bits it would wrap)."""
    result = run(_config(tmp_path, program_cache, protocol="semi2k", parties=2, rows=20,
                         dim=10, epsilon=0.5, mechanism="central", grid_bits=-44,
                         reveal_noise=reveal_noise))
    privacy = _check(result, tmp_path / "out", "central", exact=reveal_noise)
    assert privacy["grid_bits"] == -44 and privacy["grid_sensitivity_steps"] == 1
    assert privacy["grid_step"] == 2.0**44


@pytest.mark.parametrize(("protocol", "parties"), PROTOCOLS)
def test_each_servers_noise_is_input_and_verified_bit_for_bit(
        tmp_path, mp_spdz, program_cache, protocol, parties):
    result = run(_config(tmp_path, program_cache, protocol=protocol, parties=parties,
                         mechanism="dng", reveal_noise=True))
    privacy = _check(result, tmp_path / "out", "dng", exact=True)
    honest = 1 if protocol in ("semi2k", "spdz2k") else 2
    assert (privacy["servers"], privacy["honest_servers"]) == (parties, honest)
    # and exactly the servers' own draws, by their digests
    assert result["verification"]["noise_check"]["digest_match"] is True


def test_many_coins_in_lanes_and_rounds(tmp_path, mp_spdz, program_cache, monkeypatch):
    # small popcounts and rounds, so that a tiny run has several of each
    monkeypatch.setattr(central, "_POPCOUNT_COINS", 128)
    monkeypatch.setattr(central, "_ROUND_COINS", 6 * 64 * 2 * 2)
    result = run(_config(tmp_path, program_cache, protocol="replicated-ring", parties=3,
                         mechanism="central", grid_bits=3, reveal_noise=True))
    privacy = _check(result, tmp_path / "out", "central", exact=True)
    layout = privacy["coin_layout"]
    assert layout["lanes"] > 1 and layout["rounds"] > 1 and layout["edabits"] > 1


def test_without_the_test_aid_the_release_is_checked_against_the_noise(
        tmp_path, mp_spdz, program_cache):
    result = run(_config(tmp_path, program_cache, protocol="replicated-ring", parties=3,
                         mechanism="central", grid_bits=1, rows=40, dim=5, clients=2000))
    _check(result, tmp_path / "out", "central", exact=False)
    c = result["verification"]["noise_check"]
    assert c["cells"] == 200 and c["gof_p_value"] > 1e-9
    text = summary(result, tmp_path / "out")
    assert "the release minus the plaintext sketch is the noise" in text
    assert "central noise std" in text and "the central Gaussian's" in text
    # what nobody knows cannot be checked exactly: the summary says so
    assert c["digest_match"] is None
    assert "(statistical only: a small change, such as one word, hides in the noise)" in text


# Semi-honest protocols reveal what a changed word makes of the release; under dng the
# servers' digests of their own noise find it, which the statistics cannot. (Under the
# replicated ones the neighbour that shares the word also sees another sketch.)
@pytest.mark.parametrize(("protocol", "parties", "tamper"),
                         [("semi2k", 2, 1), ("semi2k", 3, 0)])
def test_a_tampered_dng_run_is_caught_by_the_servers_digests(
        tmp_path, mp_spdz, program_cache, protocol, parties, tamper):
    with pytest.raises(VerificationError) as err:
        run(_config(tmp_path, program_cache, protocol=protocol, parties=parties,
                    mechanism="dng", tamper=tamper, rows=40, dim=5, clients=2000))
    message = str(err.value)
    assert "\n" not in message
    assert "is not the noise the servers drew: the sum of their digests of it differs" in message
    assert not (tmp_path / "out").exists() and (tmp_path / "out.mismatch").exists()
    saved = json.loads((tmp_path / "out.mismatch" / "result.json").read_text())
    check = saved["verification"]["noise_check"]
    assert saved["verification"]["ok"] is False and check["digest_match"] is False
    # the change is far inside the noise: every statistic alone would have passed it
    check = json.loads((tmp_path / "out.mismatch" / DIAGNOSTICS).read_text())[
        "verification.noise_check"]
    assert check["gof_p_value"] > 1e-9 and abs(check["mean_z"]) < 8
    assert abs(check["variance_z"]) < 8
    assert saved["parameters"]["tamper"] == tamper


def test_untampered_dng_says_its_release_is_exactly_the_servers_draws(
        tmp_path, mp_spdz, program_cache):
    result = run(_config(tmp_path, program_cache, mechanism="dng", rows=40, dim=5,
                         clients=2000))
    _check(result, tmp_path / "out", "dng", exact=False)
    assert result["verification"]["noise_check"]["digest_match"] is True
    assert "exactly the noise the servers drew" in result["verification"]["method"]
    text = summary(result, tmp_path / "out")
    assert "and exactly the servers' own draws by their digests" in text


def test_a_tampered_central_run_under_a_malicious_protocol_still_aborts(
        tmp_path, mp_spdz, program_cache):
    with pytest.raises(TamperDetectedError, match="the servers detected tampering"):
        run(_config(tmp_path, program_cache, protocol="malicious-rep-ring", parties=3,
                    mechanism="central", grid_bits=0, tamper=1))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("kw", "words"), [
    ({"mechanism": "central", "program": "fast"}, "use --program local"),
    ({"mechanism": "dng", "noise": "laplace"}, "the clients send noise-free rows"),
    ({"mechanism": "central", "epsilon": 0.01, "grid_bits": 8}, "coins per cell"),
    ({"mechanism": "ltm", "grid_bits": 2}, "--mechanism central"),
    ({"mechanism": "laplace"}, "unknown --mechanism"),
    ({"mechanism": "central", "clients": 2**40, "eta": 100.0}, "past 2^62"),
    # nobody knows central's noise: a changed word in it could not be seen
    ({"mechanism": "central", "tamper": 0}, "--tamper under the semi-honest semi2k cannot "
                                            "be detected with --mechanism central"),
    ({"mechanism": "central", "tamper": 0, "protocol": "replicated-ring", "parties": 3},
     "use --mechanism dng (checked against the servers' digests of their noise), a "
     "malicious protocol, or drop --tamper"),
])
def test_a_mechanism_the_run_cannot_carry_is_refused_in_one_line(tmp_path, kw, words):
    cfg = _config(tmp_path, None, **kw)
    with pytest.raises(InputError) as err:
        run(cfg)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_noise_unlike_the_certified_one_fails_the_run_loudly(tmp_path, mp_spdz, program_cache,
                                                            monkeypatch):
    # Every server draws three times the standard deviation it should: the release is
    # still revealed, but the check against the certified noise must refuse it.
    draw = Dng.sample
    monkeypatch.setattr(Dng, "sample",
                        lambda self, rng, shape: 3 * draw(self, rng, shape))
    with pytest.raises(VerificationError, match="is not the dng noise the accountant "
                                                "certified") as err:
        run(_config(tmp_path, program_cache, mechanism="dng", rows=40, dim=5, clients=2000))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() and (tmp_path / "out.mismatch").exists()
    saved = json.loads((tmp_path / "out.mismatch" / DIAGNOSTICS).read_text())
    assert saved["verification.noise_check"]["variance_z"] > 8
