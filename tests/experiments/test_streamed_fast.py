"""``ltm run --program fast`` streams: the servers write their share files as the shares
arrive, laid out per chunk of clients, and real MP-SPDZ parties read them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.clients import read_share_file
from harness.errors import VerificationError
from harness.experiments import RunConfig, run
from harness.stream import RING_CHUNKS, parse_schedule

pytestmark = pytest.mark.mpspdz

SMALL = {"clients": 30_000, "dim": 3, "rows": 20, "sparsity": 2, "seed": 5}


@pytest.mark.parametrize(("protocol", "parties", "sharing"), [
    ("semi2k", 2, "full"), ("semi2k", 3, "full"), ("replicated-ring", 3, "full"),
    # seeded: each server expands the seeds it got and writes the same file
    ("semi2k", 3, "seeded"), ("replicated-ring", 3, "seeded"),
])
def test_a_streamed_fast_run_verifies_from_its_streamed_files(tmp_path, mp_spdz,
                                                              program_cache, protocol,
                                                              parties, sharing):
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program="fast",
                    protocol=protocol, parties=parties, keep_work=True, sharing=sharing,
                    **SMALL)
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    layout = result["parameters"]["layout"]
    assert layout["kind"] == "blocked-per-chunk"
    R, K = layout["block_rows"], layout["chunk_blocks"]
    assert layout["file_rows"] % (R * K) == 0
    assert layout["padding_rows"] == layout["file_rows"] - 30_000 * 2
    assert result["timings"]["stream_wall_s"] == result["timings"]["prepare_s"]
    assert ("stream_expand_s" in result["timings"]) == (sharing == "seeded")
    fmt = cfg.validate().share_format
    chunk_words = R * K * 3 * fmt.words
    for i in range(parties):
        share = out / "work" / f"P{i}" / "Persistence" / f"Transactions-P{i}.data"
        assert oct(share.stat().st_mode & 0o777) == "0o600"
        words = read_share_file(share, fmt)
        # Fed: a ring of engine chunks, which the party read as they were written.
        assert 0 < layout["ring_chunks"] <= RING_CHUNKS
        assert words.size == layout["ring_chunks"] * chunk_words
        # The schedule went through a FIFO; what stays is an empty plain file.
        gate = out / "work" / f"P{i}" / "Programs" / "Public-Input" / "fast"
        assert gate.is_file() and gate.stat().st_size == 0
    # T_MPC is the parties' summing beside the stream; what follows the stream is apart.
    assert all(p["mpc_time_s"] is not None and p["time_s"] > 0 for p in result["parties"])
    assert result["t_end_to_end_s"] == pytest.approx(
        result["timings"]["prepare_s"] + max(p["mpc_time_s"] for p in result["parties"]))


def test_a_fed_fast_run_wraps_its_ring_and_stays_bit_exact(tmp_path, mp_spdz, program_cache):
    # Over a hundred engine chunks through a ring of 64: every slot is rewritten, and a
    # slot rewritten before its party had read it would show in the verification.
    out = tmp_path / "out"
    result = run(RunConfig(out=out, cache_dir=program_cache, timeout=300, program="fast",
                           parties=3, keep_work=True, clients=250_000, dim=10, rows=50,
                           sparsity=3, seed=9))
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    layout = result["parameters"]["layout"]
    R, K = layout["block_rows"], layout["chunk_blocks"]
    assert layout["file_rows"] // (R * K) > 1.5 * RING_CHUNKS == 1.5 * layout["ring_chunks"]
    share = out / "work" / "P1" / "Persistence" / "Transactions-P1.data"
    assert share.stat().st_size < 8 * (RING_CHUNKS * R * K * 10 + 64)


def test_a_tampered_share_of_a_streamed_fast_run_is_reported(tmp_path, program_cache,
                                                             mp_spdz):
    out = tmp_path / "out"
    with pytest.raises(VerificationError, match="differs from the plaintext computation"):
        run(RunConfig(out=out, cache_dir=program_cache, timeout=120, program="fast",
                      parties=3, tamper=1, **SMALL))
    saved = json.loads((tmp_path / "out.mismatch" / "result.json").read_text())
    assert saved["verification"]["mismatches"] >= 1
    assert saved["parameters"]["layout"]["kind"] == "blocked-per-chunk"


# 2^19 values per chunk over s * d = 512: 1024 clients a chunk, three chunks, so that rows
# short of a block are carried from chunk to chunk.
OWNER = {"clients": 3000, "dim": 64, "rows": 10, "sparsity": 8, "seed": 5,
         "calibration": "analytic"}


@pytest.mark.parametrize(("protocol", "parties"), [("semi2k", 2), ("replicated-ring", 3)])
def test_the_data_owners_blocked_text_streams_and_verifies(tmp_path, mp_spdz, program_cache,
                                                          protocol, parties):
    # fast --input party: the data owner writes party 0's input text in the blocked layout,
    # a chunk of clients at a time (whole files, held in memory, before).
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=300, program="fast",
                    input_mode="party", protocol=protocol, parties=parties, keep_work=True,
                    **OWNER)
    assert cfg.validate().route.sink == "owner"
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    n, d, s = 3000, 64, 8
    layout = result["parameters"]["layout"]
    assert layout["kind"] == "party-text-per-chunk" and layout["clients_per_chunk"] == 1024
    R, K = layout["block_rows"], layout["chunk_blocks"]
    assert layout["file_rows"] == layout["engine_chunks"] * R * K
    assert 0 <= layout["padding_rows"] == layout["file_rows"] - n * s
    work = out / "work"
    assert not any((work / f"P{i}" / "Persistence" / f"Transactions-P{i}.data").exists()
                   for i in range(parties))  # the servers received no share
    owner = work / "P0" / "Player-Data" / "Input-P0-0"
    assert oct(owner.stat().st_mode & 0o777) == "0o600"
    values = np.array(owner.read_bytes().split(), dtype=np.int64)
    assert values.size == layout["file_rows"] * d
    assert np.count_nonzero(values) > n * s * d * 0.99  # padding rows are zeros
    schedule = next((work / "P0" / "Programs" / "Public-Input").iterdir())
    ring, block_acc = parse_schedule(schedule.read_bytes(), K)
    assert ring == 0 and block_acc.size == layout["engine_chunks"] * K
    assert result["client_upload_bytes"] == [8 * n * s * d] + [0] * (parties - 1)
