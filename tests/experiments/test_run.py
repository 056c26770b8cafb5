"""End-to-end runs with real MP-SPDZ parties, verified bit for bit."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from harness.analyst import load_run
from harness.clients import vector_gaussian
from harness.clients.sketch import Sketch
from harness.experiments import FORMAT_VERSION, RunConfig, run
from harness.experiments.run import summary

pytestmark = pytest.mark.mpspdz


def _run(tmp_path, cache, name="out", **kw):
    kw.setdefault("noise", "none")
    kw.setdefault("seed", 7)
    kw.setdefault("export_sketch", True)  # the checks below read it, independently
    cfg = RunConfig(out=tmp_path / name, cache_dir=cache, timeout=120, **kw)
    return run(cfg), tmp_path / name


def _synthetic_data(out):
    """A synthetic run's rows: not written (data.npy), recomputed from its seed."""
    assert not (out / "data.npy").exists()
    return load_run(out).data


def _plain_sketch(out, data):
    """T computed from the saved sketch with floats, independent of the harness."""
    sk = np.load(out / "sketch.npz")
    rows, signs = sk["rows"], sk["signs"]
    s, n = rows.shape
    m = int(sk["m"])
    t = np.zeros((m, data.shape[1]))
    for i in range(s):
        np.add.at(t, rows[i], data * signs[i][:, None])
    return t / math.sqrt(s)


@pytest.mark.parametrize(("parties", "program", "input_mode"), [
    (2, "fast", "shares"), (3, "fast", "shares"), (4, "fast", "shares"),
    (2, "fast", "party"), (3, "reference", "party"), (2, "reference", "shares"),
    (2, "local", "shares"), (4, "local", "shares"),
])
def test_programs_and_modes_verify(tmp_path, mp_spdz, program_cache, parties, program,
                                   input_mode):
    # n = 1003 is not a multiple of m = 10, and s = 3 > 1
    result, out = _run(tmp_path, program_cache, parties=parties, program=program,
                       input_mode=input_mode, clients=1003, rows=10, dim=3, sparsity=3)
    assert result["verification"] == {**result["verification"], "ok": True, "mismatches": 0}
    assert [p["party"] for p in result["parties"]] == list(range(parties))
    for p in result["parties"]:
        assert p["time_s"] > 0 and p["rounds"] >= 1 and p["global_data_sent_mb"] > 0
    data = _synthetic_data(out)
    output = np.load(out / "output.npy")
    assert output.shape == (10, 3) and output.dtype == np.float64
    # fixed point with 16 fraction bits: error below 2^-16 per summand
    assert np.allclose(output, _plain_sketch(out, data), atol=1003 * 3 * 2**-16)
    saved = json.loads((out / "result.json").read_text())
    assert saved["format_version"] == FORMAT_VERSION == 7
    # no noise drawn (noise "none"), by the clients' workers or the data owner's writer
    assert saved["noise_observed"]["sampler"] == "none"
    assert saved["metadata"]["protocol"] == "semi2k" and saved["metadata"]["parties"] == parties
    assert saved["metadata"]["harness_version"] and saved["metadata"]["date"]
    sk = np.load(out / "sketch.npz")
    assert sk["rows"].shape == (3, 1003) and sk["signs"].shape == (3, 1003)
    assert not (out / "work").exists()


def test_shares_mode_uploads_one_share_per_entry_to_each_server(tmp_path, mp_spdz,
                                                                  program_cache):
    result, _ = _run(tmp_path, program_cache, parties=3, clients=500, rows=5, dim=2,
                     sparsity=2)
    assert result["client_upload_bytes"] == [8 * 2 * 500 * 2] * 3
    assert result["model_c_mpc_mb"] == pytest.approx(3 * 8 * (2 * 500 * 2 + 5 * 2) / 1e6)


def test_dense_sketch_run(tmp_path, mp_spdz, program_cache):
    result, out = _run(tmp_path, program_cache, clients=200, rows=10, dim=2, dense=True)
    assert result["verification"]["ok"] and result["parameters"]["sparsity"] == 10
    sk = Sketch.load(out / "sketch.npz")
    for i in range(10):
        assert (np.bincount(sk.rows[i], minlength=10) == 20).all()


def test_data_file_sets_n_and_d(tmp_path, mp_spdz, program_cache):
    data = np.random.default_rng(0).uniform(-1, 1, size=(321, 4))
    np.save(tmp_path / "a.npy", data)
    result, out = _run(tmp_path, program_cache, data=tmp_path / "a.npy", rows=8, sparsity=2)
    assert (result["parameters"]["clients"], result["parameters"]["dim"]) == (321, 4)
    assert np.array_equal(np.load(out / "data.npy"), data)


@pytest.mark.parametrize(("noise", "calibration"), [
    ("gaussian", "corollary"), ("gaussian", "analytic"), ("laplace", "corollary"),
    ("skellam", "corollary")])
def test_noise_statistics_in_the_revealed_sketch(tmp_path, mp_spdz, program_cache, noise,
                                                 calibration):
    """The revealed sketch minus the noiseless sketch is the summed noise: its
    per-entry variance must match count * sigma^2 / s from the calibration; the
    revealed ring elements equal the plaintext's, noise included, bit for bit.

    Tolerances are five standard errors, from each distribution's kurtosis: the
    Laplace mechanism's Gamma(1/(n/m)) differences are so heavy-tailed (excess
    kurtosis 3 (n/m)) that a fixed 15% bound on their sample variance failed
    about one run in twenty."""
    n, m, d = 4000, 20, 20
    kw = {"dense": True} if noise == "laplace" else {"sparsity": 2}
    # delta large enough that R_D does not zero the output at this small n
    result, out = _run(tmp_path, program_cache, noise=noise, clients=n, rows=m, dim=d,
                       delta=0.5, epsilon=50.0, frac_bits=12, calibration=calibration, **kw)
    assert result["verification"] == {**result["verification"], "ok": True, "mismatches": 0}
    info = result["parameters"]["noise"]
    privacy = result["privacy"]
    assert (privacy["requested_epsilon"], privacy["requested_delta"]) == (50.0, 0.5)
    assert 0 < privacy["certified_epsilon"] <= 50.0 * (1 + 1e-6)
    assert privacy["certified_epsilon"] == info["certified_epsilon"]
    assert privacy["generator"].startswith("randomgen.AESCounter")
    if noise == "skellam":  # integer noise on the run's own lattice
        assert info["frac_bits"] == 12 and info["client_mu"] > 0
        assert info["variance"] == pytest.approx(info["client_mu"] / 4.0**12)
        assert privacy["calibration"] == "skellam-rdp" and "RDP" in privacy["accountant"]
    elif noise == "gaussian":
        assert info["calibration"] == privacy["calibration"] == calibration
        # the analytic calibration spends the whole epsilon; the corollary wastes some here
        assert (privacy["certified_epsilon"] == pytest.approx(50.0)) == \
            (calibration == "analytic")
    line = summary(result, out).splitlines()[-2]
    assert line.startswith("  privacy: requested epsilon 50, delta 0.5; certified epsilon ")
    assert info["zero_output"] is False
    excess = 3 / info["gamma_shape"] if noise == "laplace" else 0.0
    observed = result["noise_observed"]
    # entry-level sampler check over s*n*d draws
    draws = result["parameters"]["sparsity"] * n * d
    assert abs(observed["noise_mean"]) < 5 * math.sqrt(info["variance"] / draws)
    rel = 5 * math.sqrt((2 + excess) / draws)
    # the statistics are of the noise as released, rounded to the lattice
    assert observed["released"] is True and privacy["on_lattice"] is True
    # how the workers drew it: the compiled sampler for Gaussian noise, numpy's otherwise
    compiled = ("compiled, four draws at a time" if vector_gaussian()
                else "compiled, one draw at a time")
    assert observed["sampler"] == (compiled if noise == "gaussian" else "numpy")
    assert observed["noise_var"] == pytest.approx(info["released_variance"], rel=rel)
    # output-level check: T - T_0 has variance (bucket count) * variance / s
    data = _synthetic_data(out)
    diff = np.load(out / "output.npy") - _plain_sketch(out, data)
    sk = np.load(out / "sketch.npz")
    s = sk["rows"].shape[0]
    counts = np.bincount(sk["rows"].ravel(), minlength=m)
    z2 = diff**2 / (counts[:, None] * info["variance"] / s)
    spread = 5 * math.sqrt((2 + excess / counts.min()) / (m * d))
    assert 1 - spread < z2.mean() < 1 + spread
    assert abs(diff.mean()) < 5 * math.sqrt(counts.mean() * info["variance"] / s / (m * d))


def test_zero_output_when_too_few_clients(tmp_path, mp_spdz, program_cache):
    result, out = _run(tmp_path, program_cache, noise="gaussian", clients=300, rows=10, dim=2)
    assert result["parameters"]["noise"]["zero_output"] is True
    assert np.count_nonzero(np.load(out / "output.npy")) == 0


_END_TO_END = re.compile(r"  T_end_to_end (\S+) s = stream (\S+) \(.*\) \+ (T_MPC|MPC) (\S+)"
                         r"( \(opening the sums\)| after it \(T_MPC (\S+): the parties summed "
                         r"the stream as it came\))?")


@pytest.mark.parametrize("program", ["fast", "local"])
def test_the_summary_s_end_to_end_names_the_term_after_the_stream(tmp_path, mp_spdz,
                                                                  program_cache, program):
    """The term after a stream is only the MPC that follows it: after the parties summed
    the stream as it came (fast, whose T_MPC, their summing, ran beside the stream),
    or the opening of the servers' sums (local, whose T_MPC includes those sums):
    never a figure named like T_MPC that differs from it. The terms add up to
    T_end_to_end."""
    result, out = _run(tmp_path, program_cache, program=program, parties=2, clients=3000,
                       rows=10, dim=3)
    assert "stream_wall_s" in result.timings  # both programs stream on this machine
    lines = summary(result, out).splitlines()
    t_mpc = next(x for x in lines if x.startswith("  T_MPC "))
    found = _END_TO_END.fullmatch(next(x for x in lines if "T_end_to_end" in x))
    assert found, lines
    total, stream, term, after, opening, beside = found.groups()
    assert float(total) == pytest.approx(float(stream) + float(after), abs=0.0015)
    if program == "fast":
        assert term == "MPC" and opening.startswith(" after it") and beside
        assert t_mpc.startswith(f"  T_MPC {beside} s (slowest party);")
        assert float(after) == pytest.approx(
            max(p.mpc_time_s for p in result.parties), abs=0.0015)
    else:
        assert term == "MPC" and opening
        assert "its aggregation while the shares arrived included" in t_mpc
        assert float(after) == pytest.approx(
            max(p.mpc_time_s for p in result.parties), abs=0.0015)
        assert float(after) < result.t_mpc_s
