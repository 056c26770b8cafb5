"""``ltm run --program reference`` streams on loopback: the servers write one share row
per slot as the shares arrive (``--input shares``), or the data owner its input text a
chunk at a time (``--input party``), and real MP-SPDZ parties read them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.clients import read_share_file
from harness.errors import VerificationError
from harness.experiments import RunConfig, run

pytestmark = pytest.mark.mpspdz

# 2^19 values per chunk over s * d = 512: 1024 clients a chunk, three chunks dealt to the
# client workers in turn; 24,000 rows for the program's loop.
SMALL = {"clients": 3000, "dim": 64, "rows": 10, "sparsity": 8, "seed": 5,
         "calibration": "analytic"}


@pytest.mark.parametrize(("input_mode", "protocol", "parties", "sharing"), [
    ("shares", "semi2k", 2, "full"), ("shares", "replicated-ring", 3, "full"),
    ("shares", "semi2k", 3, "seeded"),
    ("party", "semi2k", 2, "full"), ("party", "replicated-ring", 3, "full"),
])
def test_a_streamed_reference_run_verifies_bit_for_bit(tmp_path, mp_spdz, program_cache,
                                                       input_mode, protocol, parties, sharing):
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=300, program="reference",
                    input_mode=input_mode, protocol=protocol, parties=parties,
                    sharing=sharing, keep_work=True, **SMALL)
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    n, d, s = 3000, 64, 8
    layout = result["parameters"]["layout"]
    assert layout["kind"] == ("slots-per-chunk" if input_mode == "shares"
                              else "party-text-per-chunk")
    assert (layout["clients_per_chunk"], layout["file_rows"], layout["padding_rows"]) == \
        (1024, n * s, 0)
    timings = result["timings"]
    assert timings["stream_wall_s"] == timings["prepare_s"]
    work = out / "work"
    assert not list(work.rglob("*.part"))
    shares = [work / f"P{i}" / "Persistence" / f"Transactions-P{i}.data"
              for i in range(parties)]
    owner = work / "P0" / "Player-Data" / "Input-P0-0"
    if input_mode == "shares":
        fmt = cfg.validate().share_format
        for share in shares:
            assert oct(share.stat().st_mode & 0o777) == "0o600"
            assert read_share_file(share, fmt).size == n * s * d * fmt.words
        assert not owner.exists()
    else:  # the data owner typed its rows in; the servers received no share
        assert not any(p.exists() for p in shares)
        assert oct(owner.stat().st_mode & 0o777) == "0o600"
        assert len(owner.read_bytes().split()) == n * s * d
        assert result["client_upload_bytes"] == [8 * n * s * d] + [0] * (parties - 1)
    # The public input was written as a stream, (bucket, sign) per row in file order.
    [schedule] = (work / "P0" / "Programs" / "Public-Input").iterdir()
    numbers = np.array(schedule.read_text().split(), dtype=np.int64)
    assert numbers[0] == n * s and numbers.size == 1 + 2 * n * s
    pairs = numbers[1:].reshape(-1, 2)
    assert pairs[:, 0].min() >= 0 and pairs[:, 0].max() < 10
    assert set(np.unique(pairs[:, 1]).tolist()) == {-1, 1}


def test_a_tampered_share_of_a_streamed_reference_run_is_reported(tmp_path, program_cache,
                                                                  mp_spdz):
    out = tmp_path / "out"
    with pytest.raises(VerificationError, match="differs from the plaintext computation"):
        run(RunConfig(out=out, cache_dir=program_cache, timeout=300, program="reference",
                      input_mode="shares", parties=3, tamper=2, **SMALL))
    saved = json.loads((tmp_path / "out.mismatch" / "result.json").read_text())
    assert saved["verification"]["mismatches"] >= 1
    assert saved["parameters"]["layout"]["kind"] == "slots-per-chunk"
