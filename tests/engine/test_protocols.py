"""Security models: every protocol's share format, runs, tamper outcomes and bad input.

The MPC tests run real MP-SPDZ parties of every protocol; a missing binary is a
failure (``.ci/run`` checks all five), never a skip.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from harness.cli import main
from harness.clients.prepare import read_share_file
from harness.clients.sharing import ADDITIVE, MALICIOUS_REPLICATED, REPLICATED, replicate
from harness.engine.protocols import PROTOCOLS, unusable_reason
from harness.errors import InputError, MpSpdzError, TamperDetectedError, VerificationError
from harness.experiments.run import RunConfig, run

CLIENT_SHARE_PROTOCOLS = [p for p in PROTOCOLS.values() if p.share_format is not None]
SMALL = {"clients": 203, "rows": 10, "dim": 3, "sparsity": 2, "noise": "none", "seed": 5}


def _cfg(tmp_path, cache, name="out", **kw):
    return RunConfig(out=tmp_path / name, cache_dir=cache, timeout=120, **{**SMALL, **kw})


# ------------------------------------------------------------------- formats (no MP-SPDZ)


def test_headers_are_mp_spdz_type_strings():
    for fmt, text in ((ADDITIVE, b"Z2^64"), (REPLICATED, b"replicated Z2^64"),
                      (MALICIOUS_REPLICATED, b"malicious replicated Z2^64")):
        body = text + struct.pack("<I", 64)
        assert fmt.header == struct.pack("<Q", len(body)) + body
    assert (ADDITIVE.words, REPLICATED.words, MALICIOUS_REPLICATED.words) == (1, 2, 2)


def test_replicated_shares_pair_up_and_sum_to_the_value():
    values = np.array([0, 1, 2**63, 2**64 - 1, 12345], dtype=np.uint64)
    shares = replicate(values)
    assert [s.shape for s in shares] == [(5, 2)] * 3
    # party i holds (a_i, a_{i-1}); a_i is also party i+1's second word
    for i in range(3):
        assert np.array_equal(shares[i][:, 0], shares[(i + 1) % 3][:, 1])
    total = shares[0][:, 0] + shares[1][:, 0] + shares[2][:, 0]
    assert np.array_equal(total, values)
    # fresh CSPRNG masks: two sharings of the same values differ
    assert not np.array_equal(replicate(values)[0], shares[0])


# ------------------------------------------------------------------- real runs


@pytest.mark.mpspdz
@pytest.mark.parametrize("protocol", [p.name for p in CLIENT_SHARE_PROTOCOLS])
@pytest.mark.parametrize("program, input_mode", [("fast", "shares"), ("local", "shares"),
                                                 ("reference", "shares"),
                                                 ("reference", "party")])
def test_every_protocol_and_program_verifies(tmp_path, mp_spdz, program_cache, protocol,
                                             program, input_mode):
    # S = 3 as in Table 3; left to its default, the rep family picks its only count
    parties = 3 if protocol == "semi2k" else None
    result = run(_cfg(tmp_path, program_cache, protocol=protocol, program=program,
                      input_mode=input_mode, parties=parties))
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["parties"] == 3
    assert result["metadata"]["protocol"] == protocol
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["parameters"]["protocol"] == protocol
    values = SMALL["sparsity"] * SMALL["clients"] * SMALL["dim"]
    words = PROTOCOLS[protocol].share_format.words
    upload = result["client_upload_bytes"]
    if input_mode == "party":
        assert upload == [8 * values, 0, 0]
    else:
        # each server receives exactly its own words of every value, nothing else
        assert upload == [8 * words * values] * 3
    assert sum(upload) / 1e6 == pytest.approx(result["model_client_upload_mb"])


@pytest.mark.mpspdz
def test_replicated_server_files_hold_pairs_of_the_protocols_format(tmp_path, mp_spdz,
                                                                     program_cache):
    run(_cfg(tmp_path, program_cache, protocol="malicious-rep-ring", program="reference",
             input_mode="shares", keep_work=True))
    work = tmp_path / "out" / "work"
    words = [read_share_file(work / f"P{i}" / "Persistence" / f"Transactions-P{i}.data",
                             MALICIOUS_REPLICATED).reshape(-1, 2) for i in range(3)]
    for i in range(3):
        # a_i is stored by party i first and by party i+1 second, and nowhere else
        assert np.array_equal(words[i][:, 0], words[(i + 1) % 3][:, 1])
        assert not np.array_equal(words[i][:, 0], words[(i + 2) % 3][:, 1])


# The tamper outcomes: the two malicious protocols abort before anything is revealed;
# the semi-honest ones reveal a wrong sketch, which verification catches. Party 2
# under replicated-ring changes only what party 1 reveals, so this also shows that
# every party's output is verified, not just party 0's.
@pytest.mark.mpspdz
@pytest.mark.parametrize("protocol, program, party", [
    ("semi2k", "fast", 1), ("replicated-ring", "fast", 2), ("replicated-ring", "local", 0),
    ("ps-rep-ring", "fast", 1), ("ps-rep-ring", "local", 2),
    ("malicious-rep-ring", "fast", 0), ("malicious-rep-ring", "reference", 2),
])
def test_tampering_is_detected_or_caught(tmp_path, mp_spdz, program_cache, capsys, protocol,
                                         program, party):
    out = tmp_path / "out"
    argv = ["run", "--protocol", protocol, "--program", program, "--tamper", str(party),
            "--parties", "3", "--out", str(out), "--mp-spdz", str(mp_spdz.root)]
    argv += [f"--{k}={v}" for k, v in SMALL.items()]
    if program == "reference":
        argv += ["--input", "shares"]
    config = RunConfig(out=out, cache_dir=program_cache, timeout=120, protocol=protocol,
                       program=program, tamper=party, parties=3,
                       input_mode="shares", **SMALL)
    if PROTOCOLS[protocol].malicious:
        with pytest.raises(TamperDetectedError, match=f"servers detected tampering: "
                                                      f"{protocol} aborted"):
            run(config)
        assert not out.exists()
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "check hash mismatch" in err
    else:
        with pytest.raises(VerificationError, match="differs from the plaintext computation"):
            run(config)
        assert not out.exists() and (tmp_path / "out.mismatch" / "result.json").exists()
        saved = json.loads((tmp_path / "out.mismatch" / "result.json").read_text())
        assert saved["verification"]["mismatches"] >= 1
        assert saved["parameters"]["tamper"] == party


@pytest.mark.mpspdz
def test_spdz2k_local_inputs_aggregates_or_names_the_build_problem(tmp_path, mp_spdz,
                                                                   program_cache):
    cfg = _cfg(tmp_path, program_cache, protocol="spdz2k", program="local", parties=2)
    reason = unusable_reason("spdz2k", mp_spdz.root)
    if reason:
        # This source build refuses spdz2k at run time; the harness says so, before work.
        with pytest.raises(MpSpdzError, match="USE_KOS = 1 .*ltm mpspdz install"):
            run(cfg)
        assert not (tmp_path / "out").exists()
        return
    result = run(cfg)
    assert result["verification"]["ok"]
    # a server's aggregate is input through the protocol: a wrong one is not detected
    with pytest.raises(VerificationError):
        run(_cfg(tmp_path, program_cache, name="t", protocol="spdz2k", program="local",
                 parties=2, tamper=1))


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "replicated-ring", "--parties", "2"],
     "--protocol replicated-ring runs with exactly 3 parties, got 2"),
    (["--protocol", "ps-rep-ring", "--parties", "4"], "exactly 3 parties, got 4"),
    (["--protocol", "bogus"], "unknown --protocol 'bogus'; choose one of semi2k"),
    (["--parties", "3", "--tamper", "3"], "--tamper 3 is not a party; choose one of 0..2"),
    (["--tamper", "-1"], "--tamper -1 is not a party"),
    (["--tamper", "0", "--input", "party"], "with --input party the servers hold none"),
    (["--protocol", "spdz2k", "--program", "fast"],
     "spdz2k cannot run --program fast on client share files"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert main(["run", "--clients", "200", "--rows", "10", "--out", str(out), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: ") and message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_reproduce_refuses_protocol_options_for_the_security_sweep(tmp_path, capsys):
    assert main(["reproduce", "security", "--protocol", "semi2k", "--out",
                 str(tmp_path / "o")]) == 1
    assert "drop --program and --protocol" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unknown_protocol_in_config_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="unknown --protocol"):
        RunConfig(out=tmp_path / "o", protocol="rep3").validate()


def test_missing_protocol_binary_is_one_line_naming_it(tmp_path, capsys):
    root = tmp_path / "mp"
    (root / "Compiler").mkdir(parents=True)
    (root / "Compiler" / "__init__.py").write_text("")
    (root / "compile.py").write_text("")
    (root / "CHANGELOG.md").write_text("## 0.4.2 (2024)\n")
    (root / "semi2k-party.x").write_text("#!/bin/sh\n")
    (root / "semi2k-party.x").chmod(0o755)
    out = tmp_path / "out"
    assert main(["run", "--protocol", "ps-rep-ring", "--clients", "200", "--rows", "10",
                 "--mp-spdz", str(root), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ps-rep-ring-party.x is missing" in err
    assert "ltm mpspdz install" in err and not out.exists()
