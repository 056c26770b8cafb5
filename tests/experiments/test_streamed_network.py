"""Streamed runs through an emulated network, every program and sharing that streams.

``ltm run --network`` with ``local`` seeded, and ``fast`` full or seeded: the
client workers send each chunk over TLS from their namespace to the servers in
theirs, real MP-SPDZ parties compute on what the servers made of it, and the run
verifies bit for bit. (``local`` with full sharing: tests/stream/test_tls_stream.py.)
"""

from __future__ import annotations

import os

import pytest

from harness.clients import ADDITIVE, REPLICATED, components, read_share_file
from harness.experiments import RunConfig, run
from harness.experiments.run import summary

pytestmark = [pytest.mark.root, pytest.mark.mpspdz,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]


@pytest.mark.parametrize(("program", "sharing", "protocol"), [
    ("local", "seeded", "semi2k"), ("local", "seeded", "replicated-ring"),
    ("fast", "full", "semi2k"), ("fast", "seeded", "semi2k"),
    ("fast", "seeded", "replicated-ring")])
def test_a_streamed_network_run_verifies_and_reports_each_stage(tmp_path, mp_spdz,
                                                                program_cache, program,
                                                                sharing, protocol):
    n, d, m, s, parties = 60_000, 3, 20, 2, 3
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program=program,
                    protocol=protocol, parties=parties, clients=n, dim=d, rows=m,
                    sparsity=s, seed=11, sharing=sharing, network="t3.large-baseline",
                    keep_work=True)
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["sharing"] == sharing
    t = result["timings"]
    # The upload crossed each server's link inside the stream, timed by the servers.
    fmt = REPLICATED if protocol == "replicated-ring" else ADDITIVE
    if sharing == "seeded":
        sent = [components(fmt, parties).upload_bytes(i, n, s * d) for i in range(parties)]
    else:
        sent = [n * s * d * 8 * fmt.words] * parties
    assert result["client_upload_bytes"] == sent
    assert result["upload_measured"]
    wire = [p["upload_bytes_sent"] for p in result["parties"]]
    assert all(b >= x > 0 for b, x in zip(wire, sent, strict=True))  # words, and frames
    assert t["stream_upload_bytes"] == max(wire)
    assert 0 < t["stream_upload_s"] <= t["stream_wall_s"] == t["prepare_s"]
    assert t["client_upload_s"] == t["stream_upload_s"]
    parts = t["stream_clients_s"] + t["stream_upload_s"] + t["stream_servers_s"]
    assert t["stream_overlap"] == pytest.approx(parts / t["stream_wall_s"])
    # Seeds were expanded as they came, on both sides: inside the stream, not after it.
    assert ("stream_expand_s" in t) == (sharing == "seeded")
    if sharing == "seeded":
        assert t["stream_expand_s"] > 0 and t["stream_clients_expand_s"] > 0
    assert "expand_s" not in t
    line = next(x for x in summary(result, out).splitlines() if "T_end_to_end" in x)
    assert f"upload {t['stream_upload_s']:.3f}" in line
    assert f"their times add up to {t['stream_overlap']:.2f}x the stream's" in line
    assert ("expanding" in line) == (sharing == "seeded")
    work = out / "work"
    # No outbox: nothing went through files on the clients' side.
    assert not (work / "client" / "outbox").exists()
    assert not list(work.rglob("*.part")) and not list(work.rglob("Received-P*"))
    layout = result["parameters"]["layout"]
    if program == "local":  # no share file of the clients' rows: m x d aggregates only
        assert layout["kind"] == "streamed"
        for i in range(parties):
            files = [p for p in (work / f"P{i}").rglob("*") if p.is_file()
                     and ("Persistence" in p.parts or p.name.startswith("Input-P"))]
            assert files and all(p.stat().st_size < m * d * 2 * 8 * 30 for p in files)
        return
    # fast: each server wrote its blocked share file in its namespace, MP-SPDZ read it.
    assert layout["kind"] == "blocked-per-chunk"
    assert layout["padding_rows"] == layout["file_rows"] - n * s
    for i in range(parties):
        share = work / f"P{i}" / "Persistence" / f"Transactions-P{i}.data"
        assert oct(share.stat().st_mode & 0o777) == "0o600"
        assert read_share_file(share, fmt).size == layout["file_rows"] * d * fmt.words
    assert (work / "public-input").stat().st_size > 0  # server 0's schedule


@pytest.mark.parametrize(("check", "protocol"), [("linf", "semi2k"), ("l2", "replicated-ring")])
def test_a_validated_run_through_the_network_verifies_and_rejects_no_honest_client(
        tmp_path, mp_spdz, program_cache, check, protocol):
    result = run(RunConfig(out=tmp_path / "out", cache_dir=program_cache, timeout=300,
                           program="fast", protocol=protocol, parties=3, clients=4000, dim=3,
                           rows=10, sparsity=2, seed=11, network="t3.large-baseline",
                           validation=check))
    assert result.verification.ok and result.verification.mismatches == 0
    v = result.validation
    assert v["check"] == check and v["rejected_rows"] == 0 == v["expected_rejected_rows"]
    assert result.upload_measured
