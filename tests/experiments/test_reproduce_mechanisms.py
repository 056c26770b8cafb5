"""``ltm reproduce mechanisms`` with real MP-SPDZ parties, on a tiny grid.

The shipped spec's every central cell costs tens of seconds (1,000 cells of about
60,000 coins); the test runs the same machinery on its own small spec (m = 10,
d = 4, n = 3,000), put where the harness reads its specs.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analyst import MechanismUtility
from harness.cli import main
from harness.cli.reproduce import CALIBRATION
from harness.experiments import ReproduceConfig, report, sweeps
from harness.experiments.estimate import cell_cost
from harness.experiments.reproduce import RAW_FILE, load_raw, plan_sweep
from harness.experiments.sweeps import load_spec

pytestmark = [pytest.mark.mpspdz]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = """
name = "mechanisms"
title = "Is the LTM worth it? (tiny)"
x = "clients"
repeat = 2
rows = 10
dim = 4
paper = "table3"
protocols = ["semi2k", "replicated-ring"]
programs = ["local"]
mechanisms = ["ltm", "dng", "central"]
epsilons = [1.0]
calibration = "analytic"

[utility]
rank = 1
lambda = 1.0

[[variant]]
servers = 3
label = ""

[grid]
clients = [3000]
sparsity = [1]
"""


def _specs(tmp_path, monkeypatch, text):
    """The harness's specs, with mechanisms.toml replaced by ``text``."""
    specs = tmp_path / "specs"
    shutil.copytree(sweeps.spec_dir(), specs)
    (specs / "mechanisms.toml").write_text(text)
    monkeypatch.setattr(sweeps, "spec_dir", lambda: specs)
    return specs


@pytest.fixture
def tiny_specs(tmp_path, monkeypatch):
    return _specs(tmp_path, monkeypatch, TINY)


def test_shipped_spec_is_the_issue_grid():
    spec = load_spec("mechanisms")
    assert (spec.rows, spec.dim) == (100, 10) and spec.variants[0].servers == 3
    assert set(spec.protocols) == {"semi2k", "replicated-ring", "ps-rep-ring",
                                   "malicious-rep-ring", "spdz2k"}
    assert spec.mechanisms == ("ltm", "dng", "central") and spec.epsilons == (0.1, 1.0)
    assert {c.paper_clients for c in spec.cells} == {1_000_000}
    assert len(spec.cells) == 2 * 5 * 3
    assert len({c.key for c in spec.cells}) == len(spec.cells)
    # the comparison gives the LTM its tightest calibration unless told otherwise; the
    # paper's tables keep the paper's corollary
    assert spec.calibration == "analytic" and load_spec("table3").calibration == "corollary"
    cfg = ReproduceConfig(tables="mechanisms", out=Path("o"))
    assert cfg.identity()["calibration"] == "analytic"
    assert ReproduceConfig(tables="all", out=Path("o")).identity()["calibration"] == "corollary"
    told = ReproduceConfig(tables="mechanisms", out=Path("o"), calibration="corollary")
    assert told.identity()["calibration"] == "corollary"
    # what --help says of the default names exactly the sweeps that choose analytic
    tight = {t for t in sweeps.TABLES + sweeps.EXTRA_SWEEPS
             if load_spec(t).calibration == "analytic"}
    assert tight == {"mechanisms", "validation"}
    assert "analytic for mechanisms and validation" in " ".join(
        CALIBRATION.help.replace("{default}", CALIBRATION.describe(None)).split())


def test_a_cell_whose_run_takes_long_runs_once(tmp_path, tiny_specs, monkeypatch):
    cfg = ReproduceConfig(tables="mechanisms", out=tmp_path / "o", repeat=3)
    once: dict = {}
    cells, _ = plan_sweep(cfg, ["mechanisms"], once=once)
    assert {k for _, k in cells} == {3} and once == {}
    # central's coins under semi2k cost the most here: above the bound, only it runs once
    costs = {c.key: cell_cost(cfg, c).mpc_s for c, _ in cells}
    slowest = max(costs, key=costs.__getitem__)
    assert "semi2k/local/central" in slowest
    # (harness.experiments.reproduce is also the function's name in the package)
    monkeypatch.setattr(sys.modules["harness.experiments.reproduce"], "_ONE_REPETITION_S",
                        sorted(costs.values())[-2] + 1e-9)
    cells, _ = plan_sweep(cfg, ["mechanisms"], once=once)
    assert {c.key: k for c, k in cells if k == 1} == {slowest: 1}
    assert list(once) == ["semi2k local central"]
    (why, points), = once["semi2k local central"].items()
    assert why.startswith("a run should take about ") and points == ["n=3000 s=1 eps=1"]
    # the report says which cells ran once, and why
    empty = pd.DataFrame(columns=list(report.RAW_COLUMNS))
    md = report.write_report(empty, ["mechanisms"], tmp_path / "o", machine={},
                             settings={"run once": once}).read_text()
    assert f"- Run once: semi2k local central at n=3000 s=1 eps=1: {why}." in md
    written = report.write_mechanisms(empty, "mechanisms", tmp_path / "o", repeat=3,
                                      left_out={}, once=once)
    assert f"\nRun once: semi2k local central at n=3000 s=1 eps=1: {why}.\n" in \
        written[1].read_text()


def test_reproduce_mechanisms(tmp_path, tiny_specs, mp_spdz, program_cache, capsys):
    out = tmp_path / "mech"
    # no --calibration: the spec's, the LTM's tightest (analytic), as for every mechanism
    assert main(["reproduce", "mechanisms", "--out", str(out), "--no-progress",
                 "--mp-spdz", str(mp_spdz.root)]) == 0
    printed = capsys.readouterr().out
    assert "repetitions verified" in printed
    # the headline: n and the largest epsilon, a row per mechanism x protocol
    head = printed[printed.index("n=3000, epsilon 1:"):].splitlines()
    rows = [ln for ln in head[3:] if ln.startswith("| ")]
    assert [ln.split(" | ")[:2] for ln in rows] == [
        [f"| {m}", p] for m in ("ltm", "dng", "central") for p in ("semi2k", "replicated-ring")]
    raw = load_raw(out / RAW_FILE)
    assert raw["verified"].all() and set(raw["servers"]) == {3}
    # every mechanism under both protocols
    ran = set(zip(raw["protocol"], raw["mechanism"], raw["requested_epsilon"], strict=True))
    assert ran == {(p, m, 1.0) for p in ("semi2k", "replicated-ring")
                   for m in ("ltm", "dng", "central")}
    # each repetition's own noise, the LTM's too: its psi differs between repetitions
    ltm = raw[(raw["mechanism"] == "ltm") & (raw["party"] == 0)]
    assert ltm.groupby("cell")["psi"].nunique().eq(2).all()

    table = pd.read_csv(out / "mechanisms.csv", keep_default_na=False, na_values=[""])
    assert len(table) == 2 * 3  # a row per protocol x mechanism
    done = table[table["left_out"].isna()]
    assert len(done) == len(table) and (done["repetitions"] == 2).all()
    # the price of each mechanism's noise: central's is the central Gaussian's up to the
    # rounding and the binomial; the LTM's analytic Gaussian over the honest draws the
    # exact binomial tail guarantees, below the sqrt(2) of Chernoff's half the clients
    central = done[done["mechanism"] == "central"]
    assert central["std_ratio"].between(1.0, 1.3).all()
    ltm_ratio = done.loc[done["mechanism"] == "ltm", "std_ratio"]
    assert (ltm_ratio > 1.0).all() and (ltm_ratio < math.sqrt(2) - 0.1).all()
    assert (done.loc[done["mechanism"] == "dng", "std_ratio"] > 1).all()
    # central's coins cost: more traffic than the LTM's everywhere, and under semi2k
    # (no local share conversion to binary for free) far more time, measured per coin
    # (replicated-ring's few coins here take about as long as the LTM's sums)
    assert np.isfinite(central["central_ns_per_coin"]).all()
    semi = central[central["protocol"] == "semi2k"].iloc[0]
    assert semi.t_vs_ltm > 1 and semi.central_ns_per_coin > 0
    ltm_c = done[done["mechanism"] == "ltm"].set_index("protocol")["c_mpc_mean_mb"]
    for r in central.itertuples():
        assert r.c_mpc_mean_mb > ltm_c[r.protocol]
    # the analyst's errors of every revealed sketch, on the same data
    assert np.isfinite(done["psi_mean"]).all() and (done["psi_mean"] >= 0).all()
    assert np.isfinite(done["phi_mean"]).all() and (done["phi_mean"] >= 1).all()

    md = (out / "mechanisms.md").read_text()
    assert len([ln for ln in md.splitlines() if ln.startswith("| ")]) == 2 + len(table)
    assert "ns per coin" in md
    assert (out / "mechanisms.png").read_bytes().startswith(PNG_MAGIC)
    tex = (out / "mechanisms.tex").read_text()
    assert tex.count(r"\\") - 1 == len(table)  # the header and one line per row
    report = (out / "report.md").read_text()
    assert "(mechanisms.png)" in report and "ns per coin" in report


def test_central_beyond_the_coins_limit_is_a_row_with_the_reason(tmp_path, monkeypatch):
    # at epsilon 0.001 the central noise needs more coins per cell than the limit, even
    # on its one-step grid, and dng's Poissons (at d = 250) a mean beyond an exact draw:
    # the cells are left out before anything runs, and the table says why
    _specs(tmp_path, monkeypatch, TINY.replace("epsilons = [1.0]", "epsilons = [1.0, 0.001]")
           .replace("dim = 4", "dim = 250"))
    cfg = ReproduceConfig(tables="mechanisms", out=tmp_path / "o", repeat=1)
    cells, left_out = plan_sweep(cfg, ["mechanisms"])
    protocols = ("semi2k", "replicated-ring")
    assert {(c.protocol, c.mechanism, c.epsilon) for c, _ in cells} == {
        (p, m, e) for p in protocols for m in ("ltm", "dng", "central")
        for e in (1.0, 0.001)} - {(p, m, 0.001) for p in protocols for m in ("dng", "central")}
    assert set(left_out) == {f"{p} local {m}" for p in protocols for m in ("dng", "central")}
    empty = pd.DataFrame(columns=list(report.RAW_COLUMNS))
    summary = report.summarize_mechanisms(empty, "mechanisms", left_out)
    assert list(summary["epsilon"]) == [0.001] * 4
    # what the sweep prints: a table per epsilon at the largest n, left-out cells said so
    printed = report.headline(summary)
    assert printed.startswith("n=3000, epsilon 0.001:\n") and printed.count("left out") == 4
    reasons = summary.set_index("mechanism")["left_out"]
    assert reasons["central"].str.contains("coins per cell").all()
    assert reasons["dng"].str.contains("beyond the 2\\^62 an exact draw reaches").all()
    written = report.write_mechanisms(empty, "mechanisms", tmp_path / "o", repeat=1,
                                      left_out=left_out)
    md = written[1].read_text()
    assert md.count("| left out: --mechanism central needs more than 4194304 coins") == 2


def test_the_data_is_low_rank_within_the_bound():
    data = MechanismUtility().data(5000, 6, 2, seed=3)
    assert data.shape == (5000, 6) and np.abs(data).max() == pytest.approx(1.0)
    assert np.array_equal(data, MechanismUtility().data(5000, 6, 2, seed=3))
    singular = np.linalg.svd(data, compute_uv=False)
    assert singular[2] < 0.2 * singular[1]  # rank 2 plus the target's small noise
    # psi of the data's own sketch-free optimum is 0; a random sketch's is positive
    exact = MechanismUtility().measure(data, data, 2, 1.0)
    assert exact["psi"] == pytest.approx(0.0, abs=1e-12) and exact["phi"] == pytest.approx(1.0)
    noisy = MechanismUtility().measure(np.random.default_rng(0).normal(size=(20, 6)), data,
                                       2, 1.0)
    assert noisy["psi"] > 0 and noisy["phi"] > 1
