"""``ltm run --program local`` streams: real MP-SPDZ parties, no share file, verified."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from harness.analyst import load_run
from harness.clients import ADDITIVE, REPLICATED, Sketch, SyntheticRows, components
from harness.experiments import RunConfig, run

pytestmark = pytest.mark.mpspdz


@pytest.mark.parametrize(("protocol", "parties"), [("semi2k", 3), ("replicated-ring", 3),
                                                   ("spdz2k", 2)])
def test_a_streamed_run_verifies_and_leaves_only_the_aggregates(tmp_path, mp_spdz,
                                                                program_cache, protocol,
                                                                parties):
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program="local",
                    protocol=protocol, parties=parties, clients=40_000, dim=3, rows=20,
                    sparsity=2, seed=5, keep_work=True, noise="none", export_sketch=True)
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["layout"] == {"kind": "streamed", "sketch_seed": 5,
                                              "synthetic_eta": 1.0}
    timings = result["timings"]
    assert timings["stream_workers"] >= 1 and timings["stream_clients_s"] > 0
    assert timings["stream_wall_s"] == timings["prepare_s"]
    # Each server's directory holds its m x d aggregate (or input) and nothing of size n.
    for i in range(parties):
        files = [p for p in (out / "work" / f"P{i}").rglob("*") if p.is_file()
                 and ("Persistence" in p.parts or p.name.startswith("Input-P"))]
        assert files, f"P{i} has no aggregate"
        assert all(p.stat().st_size < 20 * 3 * 2 * 8 * 30 for p in files)
        assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in files)
    # The saved sketch is the counter-based one its seed gives, client by client.
    saved = np.load(out / "sketch.npz")
    recomputed = Sketch.sparse(40_000, 20, 2, seed=5)
    assert np.array_equal(saved["rows"], recomputed.rows)
    assert np.array_equal(recomputed.column(31_337)[0], saved["rows"][:, 31_337])
    # No data.npy: the analyst recomputes the synthetic rows from the recorded seed.
    assert not (out / "data.npy").exists()
    data = load_run(out).data
    assert np.array_equal(SyntheticRows(40_000, 3, 1.0, 5).read(0, 40_000), data)
    output = np.load(out / "output.npy")
    plain = np.zeros((20, 3))
    for i in range(2):
        np.add.at(plain, saved["rows"][i], data * saved["signs"][i][:, None])
    assert np.allclose(output, plain / math.sqrt(2), atol=40_000 * 2 * 2**-16)


def test_an_n_past_the_ring_is_refused_before_anything_is_drawn(tmp_path):
    out = tmp_path / "big"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--program", "local", "--clients",
         str(10**9), "--frac-bits", "40", "--out", str(out), "--no-install"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "past the ring Z_2^64's bound 2^63" in lines[0]
    assert "use --clients <=" in lines[0]
    assert not out.exists()


def test_a_streamed_run_records_the_seed_it_drew(tmp_path, mp_spdz, program_cache):
    out = tmp_path / "drawn"
    result = run(RunConfig(out=out, cache_dir=program_cache, timeout=120, program="local",
                           parties=2, clients=5000, dim=2, rows=10, noise="none",
                           export_sketch=True))
    seed = result["parameters"]["layout"]["sketch_seed"]
    assert result["parameters"]["seed"] is None and isinstance(seed, int)
    saved = json.loads((out / "result.json").read_text())
    assert saved["parameters"]["layout"]["sketch_seed"] == seed
    assert np.array_equal(np.load(out / "sketch.npz")["rows"],
                          Sketch.sparse(5000, 10, 1, seed=seed).rows)


@pytest.mark.parametrize("program", ["local", "reference"])
def test_a_bad_row_of_a_streamed_npy_file_is_one_line_and_no_output(tmp_path, mp_spdz,
                                                                    program):
    # The file is read a chunk at a time while streaming: the chunk holding the bad row
    # fails in a client worker, which stops every process (or, for reference's data
    # owner, in the one process writing its input text); the user sees one line.
    matrix = np.random.default_rng(1).uniform(-1, 1, size=(300_000, 2))
    matrix[234_567, 1] = np.nan
    path = tmp_path / "a.npy"
    np.save(path, matrix)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--program", program, "--data", str(path),
         "--rows", "10", "--noise", "none", "--out", str(out), "--no-install"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == ["ltm: error: data holds a non-finite value at row 234567, column 1; "
                     "clean the data (NaN and infinity cannot be encoded)"], done.stderr
    assert not out.exists()


@pytest.mark.parametrize(("protocol", "parties"), [("semi2k", 3), ("semi2k", 2),
                                                   ("replicated-ring", 3), ("spdz2k", 2)])
def test_a_seeded_run_streams_and_verifies_bit_for_bit(tmp_path, mp_spdz, program_cache,
                                                       protocol, parties):
    out = tmp_path / "out"
    n, d, m, s = 30_000, 3, 20, 2
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program="local",
                    protocol=protocol, parties=parties, clients=n, dim=d, rows=m,
                    sparsity=s, seed=7, keep_work=True, sharing="seeded")
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["sharing"] == "seeded"
    assert result["parameters"]["layout"]["kind"] == "streamed"
    timings = result["timings"]
    assert timings["stream_expand_s"] > 0 and timings["stream_clients_expand_s"] > 0
    assert "expand_s" not in timings  # expanded inside the stream, not after it
    # What each server received: seeds for the components it holds but does not lead.
    fmt = REPLICATED if protocol == "replicated-ring" else ADDITIVE
    comps = components(fmt, parties)
    assert result["client_upload_bytes"] == [comps.upload_bytes(i, n, s * d)
                                             for i in range(parties)]
    # No upload directory, no share file of the clients' rows: only m x d aggregates.
    work = out / "work"
    assert not list(work.rglob("Upload")) and not list(work.rglob("Received-P*"))
    for i in range(parties):
        files = [p for p in (work / f"P{i}").rglob("*") if p.is_file()]
        assert all(p.stat().st_size < m * d * 2 * 8 * 30 for p in files
                   if "Persistence" in p.parts or p.name.startswith("Input-P"))
