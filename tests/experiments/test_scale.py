"""The population-scale sweep (``ltm reproduce scale``): its spec, its table and plot on
synthetic raw rows, and one small real sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.errors import InputError
from harness.experiments.report import summarize_scale, write_all, write_scale
from harness.experiments.reproduce import RAW_FILE, load_raw
from harness.experiments.sweeps import (
    expand,
    load_spec,
    paper_values,
    read_spec,
    resolve_tables,
    spec_dir,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SPEC_N = [10**6, 10**7, 10**8, 10**9]


def test_the_spec_loads_and_expands_with_scale():
    spec = load_spec("scale")
    assert spec.whole_runs and spec.x == "clients" and spec.paper == "table3"
    assert (spec.protocols, spec.programs) == (("semi2k",), ("local",))
    cells = expand(spec)
    assert [c.clients for c in cells] == SPEC_N
    assert {(c.servers, c.sparsity, c.rows, c.dim) for c in cells} == {(3, 1, 100, 10)}
    scaled = expand(spec, 1e-3)
    assert [c.clients for c in scaled] == [n // 1000 for n in SPEC_N]
    assert [c.paper_clients for c in scaled] == SPEC_N
    assert [c.key for c in scaled] == [c.key for c in cells]  # keys name the sweep's n
    assert expand(spec, 1e-6)[0].clients == spec.rows  # never below m
    # by name only: `all` stays the paper's tables
    assert resolve_tables("scale") == ["scale"] and "scale" not in resolve_tables("all")


def test_whole_runs_must_be_a_boolean(tmp_path):
    text = (spec_dir() / "scale.toml").read_text().replace("whole_runs = true",
                                                           'whole_runs = "yes"')
    bad = tmp_path / "scale.toml"
    bad.write_text(text)
    with pytest.raises(InputError, match="'whole_runs' must be true or false"):
        read_spec(bad)
    # the tables' specs rerun the servers: no whole runs
    assert not any(load_spec(t).whole_runs for t in resolve_tables("all"))


def _rows(scale: float = 1e-3, reps: int = 2, streams: bool = True) -> list[dict]:
    """Raw rows as a sweep of whole runs writes them, one per party per repetition."""
    rows = []
    for cell in expand(load_spec("scale"), scale):
        for rep in range(reps):
            n = cell.clients
            common = {
                "table": "scale", "variant": "", "cell": cell.key, "servers": 3,
                "clients": n, "paper_clients": cell.paper_clients, "sparsity": 1, "rows": 100,
                "dim": 10, "scale": scale, "repetition": rep, "c_mpc_mb": 1.0,
                "verified": True, "prepare_s": 1e-7 * n + rep, "client_upload_s": None,
                "mpc_wall_s": 0.2, "t_end_to_end_s": 2e-7 * n + rep,
                "run_wall_s": 3e-7 * n + 0.5 + rep, "peak_pss_bytes": 10**8 + 100 * n + rep,
                "format_version": 3}
            if streams:
                common |= {"stream_clients_s": 1e-7 * n, "stream_overlap": 0.9}
            for party in range(3):
                rows.append({**common, "party": party, "time_s": 0.01 * (party + 1) + rep,
                             "expand_s": 0.0})
    return rows


def test_the_table_and_plot_from_synthetic_rows(tmp_path):
    raw = pd.DataFrame(_rows())
    paths = write_scale(raw, "scale", tmp_path)
    assert [p.name for p in paths] == ["scale.csv", "scale.md", "scale.tex", "scale.png"]
    assert (tmp_path / "scale.png").read_bytes().startswith(PNG_MAGIC)
    summary = pd.read_csv(tmp_path / "scale.csv")
    n = np.array([1000, 10_000, 100_000, 1_000_000], dtype=float)
    assert list(summary["clients"]) == list(n) and (summary["repetitions"] == 2).all()
    # means over repetitions; T_MPC the slowest party's; peak the largest repetition's
    assert np.allclose(summary["run_wall_mean_s"], 3e-7 * n + 1.0)
    assert np.allclose(summary["t_mpc_mean_s"], 0.53)
    assert np.allclose(summary["prepare_mean_s"], 1e-7 * n + 0.5)
    assert np.allclose(summary["peak_pss_bytes"], 10**8 + 100 * n + 1)
    assert np.allclose(summary["peak_bytes_per_added_client"][1:], 100.0)
    # every stream_* key the runs reported, generically
    assert np.allclose(summary["stream_clients_mean_s"], 1e-7 * n)
    assert np.allclose(summary["stream_overlap_mean"], 0.9)
    # the paper's Table 3 extrapolated: a least-squares line through its points at the run's n
    paper = paper_values()
    paper = paper[paper["table"] == "table3"]
    line = np.polyfit(paper["clients"], paper["t_mpc_mean_s"], 1)
    assert np.allclose(summary["paper_t_mpc_extrapolated_s"], np.polyval(line, n))
    at_1e6 = np.polyval(line, 1e6)  # through the paper's own points, near its 1.641 s
    assert abs(at_1e6 - 1.641) < 0.05
    md = (tmp_path / "scale.md").read_text()
    assert "linear extrapolation" in md and "EXTRAPOLATION, not a measurement" in md
    assert "stream clients (s)" in md and "stream overlap" in md
    assert "upload (s)" not in md  # not measured without a network: no column
    assert "| 1000 | 1000000 |" in md  # the run's n and the sweep's unscaled n


def test_rows_without_memory_or_streams_still_make_a_table(tmp_path):
    rows = [{k: v for k, v in r.items() if k not in ("peak_pss_bytes", "run_wall_s")}
            for r in _rows(streams=False, reps=1)]
    summary = summarize_scale(pd.DataFrame(rows), "scale")
    assert summary["peak_pss_bytes"].isna().all() and summary["run_wall_mean_s"].isna().all()
    assert not any(c.startswith("stream_") for c in summary.columns)
    paths = write_all(pd.DataFrame(rows), ["scale"], tmp_path, machine={"host": "box"},
                      settings={"repeat": 1})
    assert [p.name for p in paths][-1] == "report.md"
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# ltm reproduce scale: beside the paper's tables\n")
    assert "## scale" in report and "scale.png" in report and "n/a" in report


def test_the_cli_refuses_a_program_for_scale(tmp_path, capsys):
    assert main(["reproduce", "scale", "--program", "fast", "--out",
                 str(tmp_path / "s")]) == 1
    assert "drop --program and --protocol" in capsys.readouterr().err


@pytest.mark.mpspdz
@pytest.mark.timeout(300)
def test_a_small_real_scale_sweep(tmp_path, mp_spdz, program_cache):
    out = tmp_path / "scale"
    assert main(["reproduce", "scale", "--scale", "1e-4", "--repeat", "2", "--out", str(out),
                 "--no-progress", "--mp-spdz", str(mp_spdz.root)]) == 0
    raw = load_raw(out / RAW_FILE)
    assert raw["verified"].all() and set(raw["program"]) == {"local"}
    assert set(raw["protocol"]) == {"semi2k"} and set(raw["servers"]) == {3}
    # every repetition a whole run: prepared anew, wall and memory of its own
    assert not raw["inputs_reused"].any()
    assert (raw["run_wall_s"] >= raw["t_end_to_end_s"]).all()
    # the tree's peak includes this interpreter (tens of MB) and the parties
    assert (raw["peak_pss_bytes"] > 50 * 2**20).all()
    summary = pd.read_csv(out / "scale.csv")
    assert list(summary["clients"]) == [100, 1000, 10_000, 100_000]
    assert (summary["repetitions"] == 2).all() and summary["mpc_wall_mean_s"].gt(0).all()
    assert Path(out / "scale.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.mpspdz
@pytest.mark.timeout(120)
def test_the_scale_benchmark_at_small_n(tmp_path, mp_spdz, capsys):
    from benchmarks import scale

    out = tmp_path / "scale.json"
    assert scale.main(["--base", "1e3", "--big", "1e4", "--reps", "3", "--json", str(out),
                       "--mp-spdz", str(mp_spdz.root)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out.read_text())
    assert lines[-3:] == [
        f"wall per value / kernel floor: {result['floor_ratio']:.2f}",
        f"peak 1e4 / peak 1e3: {result['peak_ratio']:.2f}",
        f"peak 1e4: {result['peak_big_gib']:.3f} GiB"]
    floor = result["kernel_floor"]
    assert set(floor["ns_per_value"]) == {"normal", "encode", "aes-ctr masks", "subtract"}
    assert floor["floor_ns"] == pytest.approx(sum(floor["ns_per_value"].values()))
    for n in (1000, 10_000):
        run = result["runs"][str(n)]
        assert run["verified"] and run["clients_wall_from"] in ("prepare_s", "stream_clients_s")
        assert run["ns_per_value"] == pytest.approx(run["clients_wall_s"] / (n * 10) * 1e9)
        # the tree: the harness's interpreter and its three parties, tens of MB at least
        assert run["peak_pss_bytes"] > 30 * 2**20


@pytest.mark.mpspdz
@pytest.mark.timeout(120)
def test_the_scale_benchmark_fails_cleanly_past_its_memory_limit(tmp_path, mp_spdz, capsys):
    from benchmarks import scale

    assert scale.main(["--base", "1e3", "--big", "1e4", "--reps", "1",
                       "--kill-above-gib", "0.001", "--mp-spdz", str(mp_spdz.root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchmarks.scale: error: ltm run at n=1e3 "
                                               "passed 0.001 GiB")
