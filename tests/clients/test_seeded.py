"""Seeded sharing (``--sharing seeded``): formats, independence, uploads and real runs."""

from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.clients import libcrypto
from harness.clients.seeded import components, expand
from harness.experiments.run import RunConfig, run


def test_expand_is_a_deterministic_function_of_each_seed():
    seeds = np.frombuffer(bytes(range(64)), np.uint8).reshape(2, 32)
    first, second = expand(seeds, 10), expand(seeds, 10)
    assert np.array_equal(first, second) and first.shape == (2, 10)
    assert not np.array_equal(first[0], first[1])
    # a longer expansion starts with the shorter one: word i depends on the seed alone
    assert np.array_equal(expand(seeds, 25)[:, :10], first)


def test_expand_is_aes_256_ctr_under_the_seed():
    # libcrypto through ctypes where it loads, the cryptography package elsewhere: one stream
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    seeds = np.frombuffer(bytes(range(96)), np.uint8).reshape(3, 32)
    for k, words in enumerate(expand(seeds, 41)):
        stream = Cipher(algorithms.AES(seeds[k].tobytes()), modes.CTR(bytes(16))).encryptor()
        assert words.tobytes() == stream.update(bytes(8 * 41))
    assert libcrypto() is not None  # the fast path is the one measured


SMALL = {"clients": 203, "rows": 10, "dim": 3, "sparsity": 3, "noise": "gaussian",
         "epsilon": 5.0, "seed": 5}


@pytest.mark.mpspdz
@pytest.mark.parametrize(("protocol", "program", "parties"), [
    ("semi2k", "fast", 2), ("semi2k", "local", 3), ("semi2k", "reference", 2),
    ("replicated-ring", "local", 3), ("ps-rep-ring", "fast", 3),
    ("malicious-rep-ring", "local", 3),
])
def test_seeded_runs_verify(tmp_path, mp_spdz, program_cache, protocol, program, parties):
    cfg = RunConfig(out=tmp_path / "out", cache_dir=program_cache, timeout=120,
                    protocol=protocol, program=program, parties=parties,
                    input_mode="shares", sharing="seeded", **SMALL)
    result = run(cfg)
    assert result["verification"]["ok"]
    assert result["parameters"]["sharing"] == "seeded"
    t = result["timings"]
    assert not result["upload_measured"]
    # Streamed: each server expanded its seeds as they arrived, inside the stream's
    # wall time (prepare_s), which T_end_to_end counts once.
    assert all(p.get("expand_s") is None for p in result["parties"]) and "expand_s" not in t
    assert 0 < t["stream_expand_s"] <= t["stream_servers_s"] <= t["prepare_s"]
    if program == "local":  # its T_MPC includes the servers' summing in the stream
        assert result["t_end_to_end_s"] < t["prepare_s"] + result["t_mpc_s"]
    elif program == "fast":  # its parties summed the stream as it came: then what followed
        assert result["t_end_to_end_s"] == pytest.approx(
            t["prepare_s"] + max(p["mpc_time_s"] for p in result["parties"]))
    else:  # reference: the stream wrote the files, then the MPC read them
        assert result["t_end_to_end_s"] == pytest.approx(t["prepare_s"] + result["t_mpc_s"],
                                                         abs=0.01)
    # each server: full words for the clients that lead with its components, seeds else
    n, s, d = SMALL["clients"], SMALL["sparsity"], SMALL["dim"]
    comps = components(cfg.share_format, parties)
    assert result["client_upload_bytes"] == [comps.upload_bytes(i, n, s * d)
                                             for i in range(parties)]


@pytest.mark.mpspdz
def test_seeded_tampering_is_still_detected(tmp_path, mp_spdz, program_cache):
    from harness.errors import TamperDetectedError

    cfg = RunConfig(out=tmp_path / "out", cache_dir=program_cache, timeout=120,
                    protocol="ps-rep-ring", parties=3, sharing="seeded", tamper=1, **SMALL)
    with pytest.raises(TamperDetectedError, match="ps-rep-ring"):
        run(cfg)


@pytest.mark.parametrize(("argv", "message"), [
    (["--sharing", "seeded", "--input", "party"], "--sharing seeded compresses"),
])
def test_seeded_bad_input_is_one_line(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    code = main(["run", "--clients", "200", "--rows", "10", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("ltm: error: ") and message in err
    assert err.count("\n") == 1 and not out.exists()
