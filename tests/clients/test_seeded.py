"""Seeded sharing (``--sharing seeded``): formats, independence, uploads and real runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.clients import libcrypto
from harness.clients import seeded as seeded_module
from harness.clients.encoding import FixedPoint
from harness.clients.layout import Layout
from harness.clients.noise import NoiseSpec
from harness.clients.prepare import ShareSink, prepare_inputs, read_share_file
from harness.clients.seeded import (
    SEED_BYTES,
    SeededSink,
    components,
    expand,
    expand_file,
    expand_party,
    save_plan,
    upload_files,
)
from harness.clients.sharing import ADDITIVE, REPLICATED
from harness.clients.sketch import Sketch
from harness.experiments.run import RunConfig, run


def _prepare_seeded(tmp_path, data, fmt, parties, s=2, m=4, blocked=True):
    n, d = data.shape
    sketch = Sketch.generate(n, m, s, seed=3)
    layout = Layout.blocked(sketch, d, share_words=fmt.words) if blocked \
        else Layout.plain(sketch, d)
    dirs = [tmp_path / f"P{i}" for i in range(parties)]
    sink = SeededSink(dirs, layout, fmt, n, s, d)
    noise = NoiseSpec("none", n=n, m=m, d=d, s=s, epsilon=1.0, delta=1e-6, eta=1.0)
    prepared = prepare_inputs(data, sketch, layout, noise, FixedPoint(16), sink,
                              np.random.default_rng(0))
    files = []
    for i, party_dir in enumerate(dirs):
        path = party_dir / "Persistence" / f"Transactions-P{i}.data"
        path.parent.mkdir(parents=True)
        expand_party(i, party_dir, path, layout, fmt, parties, n, s)
        assert not (party_dir / "Upload").exists()  # the upload is gone once expanded
        words = read_share_file(path, fmt).reshape(layout.total_rows, d, fmt.words)
        files.append(words)
    return sketch, layout, prepared, sink, files


@pytest.mark.parametrize(("fmt", "parties"), [(ADDITIVE, 2), (ADDITIVE, 4), (REPLICATED, 3)])
@pytest.mark.parametrize("blocked", [True, False])
def test_expanded_shares_sum_to_the_encoded_rows(tmp_path, fmt, parties, blocked):
    data = np.random.default_rng(1).uniform(-1, 1, size=(57, 3))
    sketch, layout, _, _, files = _prepare_seeded(tmp_path, data, fmt, parties,
                                                  blocked=blocked)
    comps = components(fmt, parties)
    # One copy of every component, whichever server's word holds it.
    total = np.zeros((layout.total_rows, 3), dtype=np.uint64)
    for comp in range(comps.count):
        party = next(i for i, held in enumerate(comps.held) if comp in held)
        total += files[party][:, :, comps.held[party].index(comp)]
    real = layout.file_slot >= 0
    clients = layout.file_slot[real] % sketch.n
    assert np.array_equal(total[real], FixedPoint(16).encode(data[clients]))
    assert not total[~real].any()
    if fmt is REPLICATED:  # a_i is held by server i (word 0) and server i+1 (word 1)
        for i in range(3):
            assert np.array_equal(files[i][:, :, 0], files[(i + 1) % 3][:, :, 1])


def test_uploads_are_seeds_and_a_third_of_the_full_words(tmp_path):
    data = np.zeros((40, 5))
    _, _, prepared, _, _ = _prepare_seeded(tmp_path, data, ADDITIVE, 3, s=3)
    # client j sends component j mod 3 in full: 14, 13 and 13 of the 40 clients
    full = [8 * 3 * 5 * f for f in (14, 13, 13)]
    seeds = [SEED_BYTES * (40 - f) for f in (14, 13, 13)]
    assert prepared.upload_bytes == [full[i] + seeds[i] for i in range(3)]
    _, _, prepared, _, _ = _prepare_seeded(tmp_path / "r", data, REPLICATED, 3, s=3)
    # server i holds components i and i - 1
    assert prepared.upload_bytes == [full[i] + seeds[i] + full[i - 1] + seeds[i - 1]
                                     for i in range(3)]


@pytest.mark.parametrize("fmt", [ADDITIVE, REPLICATED])
def test_each_server_receives_a_third_of_its_full_upload(tmp_path, fmt):
    # Bytes per server, seeded against full sharing of the same data at S = 3: the
    # full words of the clients it leads for, a seed for each of the others.
    n, d, s = 60, 16, 4
    data = np.random.default_rng(5).uniform(-1, 1, size=(n, d))
    sketch = Sketch.generate(n, 4, s, seed=3)
    layout = Layout.blocked(sketch, d, share_words=fmt.words)
    noise = NoiseSpec("none", n=n, m=4, d=d, s=s, epsilon=1.0, delta=1e-6, eta=1.0)
    sinks = {"full": ShareSink([tmp_path / f"F{i}.data" for i in range(3)], fmt),
             "seeded": SeededSink([tmp_path / f"P{i}" for i in range(3)], layout, fmt, n, s,
                                  d)}
    sent = {name: prepare_inputs(data, sketch, layout, noise, FixedPoint(16), sink,
                                 np.random.default_rng(0)).upload_bytes
            for name, sink in sinks.items()}
    assert sent["full"] == [8 * fmt.words * s * n * d] * 3
    for i in range(3):
        assert sent["seeded"][i] == sent["full"][i] // 3 + fmt.words * (2 * n // 3) * SEED_BYTES
        assert sent["seeded"][i] == sum(f.stat().st_size
                                        for f in upload_files(tmp_path / f"P{i}"))
    assert max(sent["seeded"]) / max(sent["full"]) < 0.38  # 1/3, plus 32 of 512 bytes


def test_two_clients_with_equal_data_get_unrelated_shares(tmp_path):
    # Equal rows, no noise: only the clients' own seeds tell their shares apart.
    data = np.full((64, 4), 0.25)
    sketch, layout, _, _, files = _prepare_seeded(tmp_path, data, ADDITIVE, 3, s=1)
    row_of = {int(slot) % sketch.n: pos for pos, slot in enumerate(layout.file_slot)
              if slot >= 0}
    for words in files:  # the seeded servers' and the full server's alike
        a, b = words[row_of[0], :, 0], words[row_of[1], :, 0]
        assert not np.array_equal(a, b)
        # unrelated: not a shift of each other either
        assert len(set((a - b).tolist())) == a.size
    seeds = (tmp_path / "P0" / "Upload")
    assert not seeds.exists()
    # The seeds come from os.urandom: a second preparation of the same data differs.
    _, _, _, _, again = _prepare_seeded(tmp_path / "again", data, ADDITIVE, 3, s=1)
    assert not np.array_equal(again[0], files[0])


@pytest.mark.parametrize(("fmt", "parties"), [(ADDITIVE, 3), (REPLICATED, 3)])
def test_a_server_elsewhere_expands_from_the_plan_alone(tmp_path, fmt, parties, monkeypatch):
    # What a server on its own host runs: the counted upload is exactly the files it gets
    # (no padding rows), and the public plan gives the same share file as the layout here.
    data = np.random.default_rng(2).uniform(-1, 1, size=(300, 3))
    n, d, s = 300, 3, 2
    sketch = Sketch.generate(n, 8, s, seed=4)
    layout = Layout.blocked(sketch, d, block_rows=16, share_words=fmt.words)
    assert layout.total_rows > layout.real_rows  # padding is there, and is not sent
    noise = NoiseSpec("none", n=n, m=8, d=d, s=s, epsilon=1.0, delta=1e-6, eta=1.0)
    for copy in ("here", "there"):
        dirs = [tmp_path / copy / f"P{i}" for i in range(parties)]
        sink = SeededSink(dirs, layout, fmt, n, s, d)
        prepared = prepare_inputs(data, sketch, layout, noise, FixedPoint(16), sink,
                                  np.random.default_rng(0))
        assert prepared.upload_bytes == [sum(f.stat().st_size for f in upload_files(p))
                                         for p in dirs]
        assert all(f.stat().st_mode & 0o777 == 0o600 for p in dirs for f in upload_files(p))
    save_plan(tmp_path / "plan.npz", layout, fmt, parties, n, s)
    for i in range(parties):
        # the same upload in both places: the plan must give what the layout gives
        for there in upload_files(tmp_path / "there" / f"P{i}"):
            here = tmp_path / "here" / f"P{i}" / "Upload" / there.name
            assert here.exists()
            here.write_bytes(there.read_bytes())
        expand_party(i, tmp_path / "here" / f"P{i}", tmp_path / f"here-{i}.data", layout, fmt,
                     parties, n, s)
        monkeypatch.chdir(tmp_path / "there" / f"P{i}")
        assert expand_file(i, tmp_path / "plan.npz", Path("share.data")) > 0
        there = tmp_path / "there" / f"P{i}" / "share.data"
        assert there.stat().st_mode & 0o777 == 0o600
        assert there.read_bytes() == (tmp_path / f"here-{i}.data").read_bytes()
        assert not (tmp_path / "there" / f"P{i}" / "Upload").exists()


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
    else:  # fast and reference: the stream wrote the files, then the MPC read them
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


def test_a_preparation_that_stops_half_way_sends_nothing(tmp_path):
    n, d, s = 50, 3, 2
    sketch = Sketch.generate(n, 4, s, seed=3)
    layout = Layout.blocked(sketch, d)
    dirs = [tmp_path / f"P{i}" for i in range(3)]
    sink = SeededSink(dirs, layout, ADDITIVE, n, s, d)
    sink.start()
    half = layout.total_rows // 2
    slots = layout.file_slot[:half]
    sink.write(np.ones((half, d), dtype=np.uint64), slots >= 0)
    sink.close()
    assert all(upload_files(p) == [] for p in dirs)


@pytest.mark.parametrize("pending_bytes", [0, 1 << 30])
def test_rows_held_while_the_masks_are_drawn_are_shared_alike(tmp_path, monkeypatch,
                                                               pending_bytes):
    # Masks that come late: every row held (or, past the bound, waited for) still ends
    # up in the servers' shares.
    import threading

    drawn = threading.Event()
    original = SeededSink._draw

    def late(self):
        drawn.wait(5)
        return original(self)

    monkeypatch.setattr(SeededSink, "_draw", late)
    monkeypatch.setattr(seeded_module, "_PENDING_BYTES", pending_bytes)
    threading.Timer(0.3, drawn.set).start()
    data = np.random.default_rng(6).uniform(-1, 1, size=(700, 3))
    sketch, layout, _, _, files = _prepare_seeded(tmp_path, data, ADDITIVE, 3, s=3)
    total = sum(f[:, :, 0] for f in files)
    real = layout.file_slot >= 0
    assert np.array_equal(total[real],
                          FixedPoint(16).encode(data[layout.file_slot[real] % sketch.n]))
