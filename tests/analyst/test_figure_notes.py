"""What the figures' notes say and the ridge-m sweep: the row bound R against the data,
SSP's indefinite noisy Gram, the LTM's plateau against m, and the no-sketch LTM."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from harness.analyst import baselines, figure_notes, figures, mechanisms, simulate
from harness.cli import analyze as _cmd_analyze
from harness.errors import InputError


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ltm")
    _cmd_analyze.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_sparse_only_statistics_have_the_right_moments() -> None:
    """dense=False draws the Gram and the sparse sketch alone; same law as with both."""
    n, d, m, reps = 400, 3, 6, 400
    rng = np.random.default_rng(4)

    def moments(stats: simulate.Stats) -> list[float]:
        return [(stats.sparse**2).sum() / (n * d), np.trace(stats.gram) / (n * d),
                (stats.sparse[:, 0] ** 2).sum() * stats.gram[0, 0] / (n * n)]

    fast = np.array([moments(simulate.synthetic_stats(n, d, m, rng, dense=False))
                     for _ in range(reps)])
    slow = np.array([moments(simulate.explicit_synthetic_stats(n, d, m, rng))
                     for _ in range(reps)])
    for column in range(fast.shape[1]):
        a, b = fast[:, column], slow[:, column]
        z = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / reps + b.var(ddof=1) / reps)
        assert abs(z) < 4, column
    stats = simulate.synthetic_stats(n, d, 5000, rng, dense=False)  # m > n: instant
    assert stats.counts.sum() == n and not stats.dense.any()


def test_ssp_indefinite_is_what_ssp_inverts() -> None:
    """At n = 200, eps = 0.01 SSP's noise dwarfs A^T A: the flag is set exactly when
    the noisy A^T A + lambda I drawn from the same seed has a non-positive eigenvalue."""
    base = simulate.synthetic_stats(200, 4, 10, np.random.default_rng(0))
    stats = simulate.ridge_stats(base, 200.0, np.random.default_rng(1))
    privacy = baselines.Privacy(0.01, 1e-6, row_norm=1.0)
    flags = []
    for seed in range(20):
        notes: dict = {}
        mechanisms.mechanism_error(stats, "ridge", "central", epsilon=0.01, m=10, lam=10.0,
                                   privacy=privacy, rng=np.random.default_rng(seed),
                                   notes=notes)
        noisy = baselines.ssp_noisy_gram(stats.gram, privacy, np.random.default_rng(seed))
        smallest = np.linalg.eigvalsh(noisy[:-1, :-1] + 10.0 * np.eye(4)).min()
        assert notes["indefinite"] == (smallest <= 0)
        flags.append(notes["indefinite"])
    assert any(flags)
    # and with a generous epsilon at large n it never is
    big = simulate.ridge_stats(simulate.synthetic_stats(10**6, 4, 10, np.random.default_rng(2)),
                               1e6, np.random.default_rng(3))
    notes = {}
    mechanisms.mechanism_error(big, "ridge", "central", epsilon=1.0, m=10, lam=10.0,
                               privacy=replace(privacy, epsilon=1.0),
                               rng=np.random.default_rng(0), notes=notes)
    assert notes["indefinite"] is False


def test_no_sketch_ltm_under_dp_is_the_local_model() -> None:
    """Without a sketch every client is its own bucket: dp's sigma^2 (m/n)^p at m = n is
    the local model's, so both draw the same noisy Gram from the same seed."""
    base = simulate.synthetic_stats(3000, 5, 1, np.random.default_rng(0))
    stats = simulate.ridge_stats(base, 3000.0, np.random.default_rng(1))
    kw = dict(epsilon=0.5, m=3000, lam=10.0, privacy=baselines.Privacy(0.5, row_norm=1.0))
    ltm = mechanisms.mechanism_error(stats, "ridge", "ltm-gaussian", calibration="dp",
                                     sketch=False, rng=np.random.default_rng(7), **kw)
    local = mechanisms.mechanism_error(stats, "ridge", "local", rng=np.random.default_rng(7),
                                       **kw)
    assert ltm == pytest.approx(local)
    with pytest.raises(InputError, match="dp or experiments"):
        mechanisms.mechanism_error(stats, "ridge", "ltm-gaussian", calibration="corollary",
                                   sketch=False, rng=np.random.default_rng(7), **kw)


def test_data_bounds_and_the_row_bound_notes() -> None:
    spec = figures.figure_spec("lowrank", quick=True)
    bounds = figure_notes.data_bounds(replace(spec, n=(1000,)))
    assert [b["k"] for b in bounds] == [5, 10]
    for b in bounds:
        # ||A||_F^2 = n (k values of n/k, the rest 1/n^2): some row has norm >= 1
        assert b["max_row_norm"] >= 1.0 and b["max_entry"] <= b["max_row_norm"]
    notes = figure_notes.bound_notes(replace(spec, n=(1000,)), bounds)
    top = max(b["max_row_norm"] for b in bounds)
    assert f"rows of norm up to {top:.3g} at n = 1000" in notes[1]
    assert "R = 1" in notes[0] and "eta = 1" in notes[0] and "exceed the bound" in notes[-1]
    loose = replace(spec, n=(1000,), row_norm=1e6, eta=1e6)
    assert figure_notes.bound_notes(loose, bounds)[-1] == "They stay within it at every n."
    # ridge rows [a | a x] with x ~ N(0, n I): norms of order sqrt(n d), far above R = 1
    ridge = figure_notes.data_bounds(replace(figures.figure_spec("ridge"), n=(1000,)))
    assert ridge[0]["max_row_norm"] > math.sqrt(1000)


def test_ridge_m_plateau_falls_with_m_and_the_notes_say_what_they_must(tmp_path,
                                                                         capsys) -> None:
    out = tmp_path / "fig"
    assert _run(["utility", "figure", "ridge-m", "--quick", "--runs", "3", "--out", str(out),
                 "--calibration", "experiments", "--no-progress"]) == 0
    assert "m per panel, s=1" in capsys.readouterr().out
    csv = pd.read_csv(out / "ridge-m-experiments-quick.csv")
    assert list(csv.columns) == figures.CSV_COLUMNS
    assert "ltm-laplace" not in set(csv["mechanism"])
    # the m = 5000 panel starts where n >= m
    assert csv.loc[csv["panel"] == "m=5000", "n"].min() >= 5000
    assert csv.loc[csv["panel"] == "m=50", "n"].min() == 1000
    largest = csv[(csv["n"] == csv["n"].max()) & (csv["mechanism"] == "ltm-gaussian")
                  & (csv["p"] == 1.0)].set_index("panel")["error_mean"]
    # Theorem linreg: phi - 1 ~ d sigma^2 / (m lambda) + sigma^4 / (n lambda), so falling in m
    assert largest["m=50"] > 3 * largest["m=500"] > 3 * largest["no sketch"]
    privacy = baselines.Privacy(0.1, 1e-6, row_norm=1.0)
    sigma2, n = baselines.local_sigma2(11, privacy), csv["n"].max()
    assert largest["no sketch"] == pytest.approx(1 + sigma2**2 / (n * 10.0), rel=0.3)
    report = (out / "ridge-m-experiments-quick.md").read_text()
    assert "m per panel: m=50, m=500, m=5000, no sketch" in report
    assert "Row bound:" in report and "exceed the bound at 3 of 3 values of n" in report
    assert (out / "ridge-m-experiments-quick.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(InputError, match="drop --m"):
        _run(["utility", "figure", "ridge-m", "--m", "100", "--out", str(out)])
    with pytest.raises(InputError, match="dp or experiments"):
        _run(["utility", "figure", "ridge-m", "--calibration", "corollary",
              "--out", str(tmp_path / "other")])


def test_ridge_figure_counts_ssp_indefinite_runs(tmp_path) -> None:
    out = tmp_path / "fig"
    assert _run(["utility", "figure", "ridge", "--quick", "--runs", "3", "--out", str(out),
                 "--no-progress"]) == 0
    csv = pd.read_csv(out / "ridge-dp-quick.csv")
    counts = csv[csv["mechanism"] == "central"].set_index(["panel", "n"])["indefinite_runs"]
    assert (csv.loc[csv["mechanism"] != "central", "indefinite_runs"] == 0).all()
    assert counts["eps=0.01, lambda=10", 1000] > 0
    assert counts.xs(max(csv["n"]), level="n").sum() == 0
    report = (out / "ridge-dp-quick.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("- eps=0.01, lambda=10: "))
    total = int(counts.xs("eps=0.01, lambda=10").sum())
    assert f"indefinite in {total} of 9 runs" in line
    at = csv[(csv["mechanism"] == "central") & (csv["panel"] == "eps=0.01, lambda=10")
             & (csv["indefinite_runs"] > 0)]
    assert f"std is up to {(at['error_std'] / at['error_mean']).max():.2g} x its mean" in line
    assert "not invisibly as the paper's caption says" in report
