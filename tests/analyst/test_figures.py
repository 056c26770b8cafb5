"""The paper's figures from exact sufficient statistics, the calibrations, the figure
command, and the summed noise against per-client draws and a real MPC run."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analyst import baselines, datasets, figure_plot, figures, mechanisms, simulate
from harness.cli import analyze as _cmd_analyze
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.privacy.noise import NoiseSpec


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ltm")
    _cmd_analyze.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def _z(a: np.ndarray, b: np.ndarray) -> float:
    """Difference of two sample means in standard errors."""
    return float((a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / a.size
                                                   + b.var(ddof=1) / b.size))


# --- the statistics are drawn from the right distribution -------------------------------


def _moments(stats: simulate.Stats, n: int, d: int, m: int) -> list[float]:
    return [(stats.sparse**2).sum() / (n * d), (stats.dense**2).sum() / (n * d * m),
            np.trace(stats.gram) / (n * d), stats.gram[0, 1] ** 2 / n,
            # couplings: the sketches with each other and with the Gram
            (stats.sparse * stats.dense).sum() ** 2 / (n * n * d),
            (stats.sparse[:, 0] ** 2).sum() * stats.gram[0, 0] / (n * n)]


def test_synthetic_stats_match_an_explicit_matrix_and_sketches() -> None:
    n, d, m, reps = 400, 3, 6, 300
    rng = np.random.default_rng(1)
    fast = np.array([_moments(simulate.synthetic_stats(n, d, m, rng), n, d, m)
                     for _ in range(reps)])
    slow = np.array([_moments(simulate.explicit_synthetic_stats(n, d, m, rng), n, d, m)
                     for _ in range(reps)])
    for column in range(fast.shape[1]):
        assert abs(_z(fast[:, column], slow[:, column])) < 4, column
    # and the values are what they must be: E||S X||^2 = n d, E||R X||^2 = m n d, ...
    assert fast[:, :3].mean(axis=0) == pytest.approx([1, 1, 1], abs=0.05)
    stats = simulate.synthetic_stats(n, d, m, rng)
    assert stats.counts.sum() == n and np.allclose(stats.factor.T @ stats.factor, stats.gram)


def test_lowrank_statistics_have_the_papers_spectrum() -> None:
    rng = np.random.default_rng(2)
    base = simulate.synthetic_stats(5000, 6, 10, rng)
    stats = simulate.lowrank_stats(base, 2, rng)
    values = np.linalg.eigvalsh(stats.gram)[::-1]
    assert values[:2] == pytest.approx([2500, 2500])
    assert values[2:] == pytest.approx(np.full(4, 1 / 5000**2), abs=1e-9)
    # the sketches see the same matrix: its k-dim row space, so psi of the noiseless
    # sketch's projection is 0
    X = np.linalg.svd(stats.sparse)[2][:2].T
    assert mechanisms.psi_from_stats(stats, X) == pytest.approx(0.0, abs=1e-9)


def test_psi_and_phi_from_statistics_equal_the_direct_measures() -> None:
    from harness.analyst import analysis

    rng = np.random.default_rng(3)
    A = datasets.lowrank_data(800, 5, 2, rng)
    stats = simulate.stats_from_matrix(A, 20, rng)
    X = np.linalg.qr(rng.standard_normal((5, 2)))[0]
    assert mechanisms.psi_from_stats(stats, X) == pytest.approx(analysis.lowrank_error(A, X))
    F, b, _ = datasets.regression_data(800, 4, 3.0, rng)
    stats = simulate.stats_from_matrix(np.column_stack([F, b]), 20, rng)
    x = rng.standard_normal(4)
    assert mechanisms.phi_from_stats(stats, x, 2.0) == pytest.approx(
        analysis.ridge_error(F, b, x, 2.0))


def test_local_gram_matches_explicit_noise() -> None:
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((300, 3)) * [1.0, 3.0, 0.5]
    stats = simulate.stats_from_matrix(Z, 10, rng)
    fast = np.array([mechanisms.local_gram(stats, 2.0, rng).ravel() for _ in range(1500)])
    slow = []
    for _ in range(1500):
        noisy = Z + rng.normal(0.0, math.sqrt(2.0), Z.shape)
        slow.append((noisy.T @ noisy).ravel())
    slow = np.array(slow)
    assert fast.mean(axis=0) == pytest.approx(slow.mean(axis=0), rel=0.02, abs=3)
    assert fast.std(axis=0) == pytest.approx(slow.std(axis=0), rel=0.1)


# --- the calibrations ----------------------------------------------------------------------


def test_experiments_laplace_is_a_sum_of_m_laplace_draws() -> None:
    rng = np.random.default_rng(5)
    m, eps = 7, 0.5
    summed = baselines.experiments_laplace_noise((40_000,), m, eps, rng)
    explicit = rng.laplace(0.0, 1 / eps, size=(40_000, m)).sum(axis=1)
    assert summed.var() == pytest.approx(2 * m / eps**2, rel=0.04)
    assert summed.var() / explicit.var() == pytest.approx(1.0, rel=0.05)
    # the tails too (a Gaussian of that variance would have kurtosis 3, these 3 + 3/m)
    kurtosis = lambda v: ((v - v.mean()) ** 4).mean() / v.var() ** 2  # noqa: E731
    assert kurtosis(summed) == pytest.approx(3 + 3 / m, abs=0.15)
    assert kurtosis(explicit) == pytest.approx(3 + 3 / m, abs=0.15)


def test_corollary_and_experiments_laplace_in_the_simulation() -> None:
    rng = np.random.default_rng(6)
    n, m, d = 400, 4, 2
    sk = Sketch.generate(n, m, m, seed=8, dense=True)
    spec = baselines.ltm_noise("laplace", n, m, d, m, baselines.Privacy(epsilon=2.0))
    zero = np.zeros((n, d))
    draws = np.stack([baselines.simulate_ltm(zero, sk, spec, rng, calibration="experiments")
                      for _ in range(2000)])
    assert draws.var() == pytest.approx(2 * m / 2.0**2, rel=0.08)
    with pytest.raises(InputError, match="calibration"):
        baselines.simulate_ltm(zero, sk, spec, rng, calibration="paper")


def test_dp_is_the_local_model_at_p_0_and_bucket_dp_at_p_1() -> None:
    """sigma_p^2 = sigma_loc^2 (m/n)^p: a bucket of n/m clients at p = 1 carries the
    local model's noise for one row, and below R_D's threshold nothing is zeroed."""
    n, m, d = 1000, 10, 2  # far below the corollary's threshold
    privacy = baselines.Privacy(epsilon=1.0, delta=1e-6)
    spec = baselines.ltm_noise("gaussian", n, m, d, 1, privacy)
    assert spec.zero_output
    local = baselines.local_sigma2(d, privacy)
    for p in (0.0, 0.5, 1.0):
        assert baselines.interpolated_sigma2(spec, p, privacy, "dp") == \
            pytest.approx(local * (m / n) ** p)
    # and it is m times the experiments' recipe at p = 1
    assert baselines.interpolated_sigma2(spec, 1.0, privacy, "dp") == pytest.approx(
        m * baselines.interpolated_sigma2(spec, 1.0, privacy, "experiments"))
    sk = Sketch.generate(n, m, 1, seed=3)
    rng = np.random.default_rng(4)
    zero = np.zeros((n, d))
    draws = np.stack([baselines.simulate_ltm(zero, sk, spec, rng, calibration="dp",
                                             privacy=privacy) for _ in range(400)])
    counts = np.bincount(sk.rows[0], minlength=m)
    assert (draws / np.sqrt(counts * m / n)[None, :, None]).var() == \
        pytest.approx(local, rel=0.05)
    # the exact-statistics path draws the same bucket noise
    stats = simulate.synthetic_stats(n, d, m, np.random.default_rng(5))
    T = [_ltm_noise_only(stats, "ltm-gaussian", d, privacy, "dp", rng) - stats.sparse
         for _ in range(400)]
    assert (np.stack(T) / np.sqrt(stats.counts * m / n)[None, :, None]).var() == \
        pytest.approx(local, rel=0.05)


def test_dp_passes_the_audit_and_experiments_is_caught() -> None:
    """The audit's bucket under dp at p = 1 keeps its claim; the recipe does not."""
    from harness.analyst.audit import AuditConfig, audit

    dp = audit(AuditConfig(calibration="dp", n=5000, m=100, d=1, trials=4000, seed=0))
    assert dp.epsilon_lower <= dp.claimed
    recipe = audit(AuditConfig(calibration="experiments", n=5000, m=100, d=1, trials=4000,
                               seed=0))
    assert recipe.epsilon_lower > recipe.claimed


def test_experiments_is_labelled_as_the_papers_recipe_everywhere() -> None:
    label = "the paper's recipe (not DP at p = 1: effective epsilon about sqrt(m) * epsilon)"
    assert label == baselines.EXPERIMENTS_LABEL
    assert label in baselines.calibration_label("experiments")
    assert label in figure_plot._label("ltm-gaussian", 1.0, "experiments")
    assert label in figure_plot._label("ltm-laplace", None, "experiments")
    assert label not in figure_plot._label("ltm-gaussian", 1.0, "dp")
    assert figures.figure_spec("lowrank").calibration == "dp"


# --- the summed noise: per-client draws and a real MPC run ---------------------------------


def _ltm_noise_only(stats: simulate.Stats, mechanism: str, spec_d: int, privacy,
                    calibration: str, rng) -> np.ndarray:
    return mechanisms._ltm_sketch(stats, mechanism, 1.0, spec_d, stats.m, privacy, calibration,
                               rng)


@pytest.mark.parametrize("mechanism", ["ltm-gaussian", "ltm-laplace"])
def test_summed_noise_agrees_with_per_client_draws(mechanism: str) -> None:
    """The figures draw one summed value per sketch entry; per-client draws summed by the
    sketch (what the clients and the MPC do) must have the same variance per bucket."""
    n, m, d = 600, 6, 2
    privacy = baselines.Privacy(epsilon=1.0, delta=0.1)
    dense = mechanism == "ltm-laplace"
    sk = Sketch.generate(n, m, m if dense else 1, seed=9, dense=dense)
    kind = "laplace" if dense else "gaussian"
    spec = NoiseSpec(kind, n=n, m=m, d=d, s=sk.s, epsilon=1.0, delta=0.1)
    assert not spec.zero_output
    counts = np.bincount(sk.rows[0], minlength=m)
    stats = simulate.Stats(n, np.eye(d), np.eye(d), counts, np.zeros((m, d)), np.zeros((m, d)))
    rng = np.random.default_rng(10)
    summed = np.stack([_ltm_noise_only(stats, mechanism, d, privacy, "corollary", rng)
                       for _ in range(3000)])
    per_client = np.stack([baselines.simulate_ltm(np.zeros((n, d)), sk, spec, rng,
                                                  per_client=True) for _ in range(600)])
    # dense: per row, m components' Laplace(b) sums (n/m Gamma differences each), / sqrt m
    expected = np.full(m, 2 * spec.laplace_scale**2) if dense else counts * spec.sigma2
    for draws in (summed, per_client):
        ratio = draws.var(axis=(0, 2)) / expected
        assert ratio == pytest.approx(np.ones(m), abs=5 * math.sqrt(2 / (draws.shape[0] * d)))


@pytest.mark.mpspdz
def test_summed_noise_matches_a_real_mpc_runs_revealed_noise(tmp_path, mp_spdz,
                                                            program_cache) -> None:
    """Real parties, Gaussian noise: T - S A / sqrt(s) is the revealed noise; per entry
    its variance is c_r sigma^2 / s, as the summed draw of the simulation has it."""
    from harness.experiments.run import RunConfig, run

    n, m, d, s = 12_000, 100, 10, 2
    cfg = RunConfig(out=tmp_path / "run", clients=n, rows=m, dim=d, sparsity=s,
                    noise="gaussian", epsilon=1.0, delta=0.1, seed=11, timeout=300,
                    cache_dir=program_cache)
    result = run(cfg)
    assert result["verification"]["ok"]
    # not saved (no --export-sketch): recomputed from the seed the run records
    sketch = Sketch.sparse(n, m, s, seed=result["parameters"]["layout"]["sketch_seed"])
    data = datasets.load_run(tmp_path / "run").data  # a synthetic run's rows, from its seed
    revealed = np.load(tmp_path / "run" / "output.npy") - sketch.matrix() @ data / math.sqrt(s)
    sigma2 = result["parameters"]["noise"]["variance"]
    counts = np.bincount(sketch.rows.ravel(), minlength=m)
    scale = np.sqrt(counts * sigma2 / s)[:, None]
    tolerance = 4 * math.sqrt(2 / (m * d))
    assert (revealed / scale).var() == pytest.approx(1.0, abs=tolerance)
    spec = NoiseSpec("gaussian", n=n, m=m, d=d, s=s, epsilon=1.0, delta=0.1,
                     calibration=cfg.calibration)
    assert spec.sigma2 == pytest.approx(sigma2)
    simulated = baselines.simulate_ltm(np.zeros((n, d)), sketch, spec, np.random.default_rng(12))
    assert (simulated / scale).var() == pytest.approx(1.0, abs=tolerance)
    # the two samples agree with each other (F-ratio of variances within sampling error)
    ratio = (revealed / scale).var() / (simulated / scale).var()
    assert ratio == pytest.approx(1.0, abs=2 * tolerance)


# --- p = 0 is the local model ----------------------------------------------------------------


@pytest.mark.parametrize("problem", ["lowrank", "ridge"])
def test_p0_has_the_local_models_error(problem: str) -> None:
    """With the sketch an isometry (every client alone in its bucket), the Gaussian LTM
    at p = 0 releases exactly what the local model does, so their errors agree within
    sampling error; the old anchor (290x the variance) would not."""
    rng = np.random.default_rng(13)
    n, d = 3000, 4
    if problem == "lowrank":
        Z, what, eps = datasets.lowrank_data(n, d, 2, rng), {"k": 2}, 4.0
    else:
        F, b, _ = datasets.regression_data(n, d - 1, 1.0, rng)
        Z, what, eps = np.column_stack([F, b]), {"lam": 10.0}, 20.0
    gram = Z.T @ Z
    stats = simulate.Stats(n, gram, simulate.gram_factor(gram), np.ones(n, dtype=int),
                          Z.copy(), np.zeros((n, d)))
    privacy = baselines.Privacy(eps, 1e-6, row_norm=1.0)
    errors = {}
    for mechanism, p in (("local", None), ("ltm-gaussian", 0.0), ("ltm-gaussian", 0.5)):
        errors[mechanism, p] = np.array([mechanisms.mechanism_error(
            stats, problem, mechanism, epsilon=eps, m=n, p=p if p is not None else 1.0,
            privacy=privacy, calibration="experiments", rng=rng, **what) for _ in range(150)])
    local, p0, p05 = errors["local", None], errors["ltm-gaussian", 0.0], \
        errors["ltm-gaussian", 0.5]
    assert abs(_z(p0, local)) < 3.5
    assert p0.std() == pytest.approx(local.std(), rel=0.3)
    # a regime where the noise matters: the error is well off its optimum, and less
    # noise (p = 0.5) shows
    floor = 0.0 if problem == "lowrank" else 1.0
    assert local.mean() - floor > 20 * (p05.mean() - floor) > 0


def test_p0_and_local_meet_on_the_papers_grid() -> None:
    """In the figure's own setting the p = 0 curve lies on the local one (there both
    are near their worst case, so this alone would not catch a wrong anchor)."""
    spec = figures.figure_spec("lowrank", quick=True, runs=12, calibration="experiments")
    spec = figures.FigureSpec(**{**spec.__dict__, "n": (25_650,),
                                 "panels": spec.panels[2:3], "p_values": (0.0,)})
    frame = figures.run_figure(spec, progress=False)
    local = frame[frame["mechanism"] == "local"]["error"].to_numpy()
    p0 = frame[frame["mechanism"] == "ltm-gaussian"]["error"].to_numpy()
    assert abs(_z(p0, local)) < 3.5


# --- the figure command --------------------------------------------------------------------


def test_figure_spec_grids() -> None:
    spec = figures.figure_spec("lowrank")
    assert spec.n[0] == 1000 and spec.n[-1] == pytest.approx(1000 * 1.5**16, rel=1e-3)
    assert len(spec.n) == 17 and all(n % spec.m == 0 for n in spec.n)
    assert spec.runs == 20 and spec.d == 50 and spec.grid == (2, 2)
    assert {(p.epsilon, p.k) for p in spec.panels} == {(0.1, 5), (0.1, 10), (0.5, 5), (0.5, 10)}
    ridge = figures.figure_spec("ridge")
    assert [p.epsilon for p in ridge.panels] == [0.01, 0.03, 0.05, 0.1] and ridge.d == 10
    lam = figures.figure_spec("ridge-lambda")
    assert lam.grid == (4, 3) and {p.lam for p in lam.panels} == {1.0, 10.0, 100.0}
    with pytest.raises(InputError, match="unknown figure"):
        figures.figure_spec("pca")
    with pytest.raises(InputError, match="--runs"):
        figures.figure_spec("ridge", runs=1)


def test_figure_command_writes_csv_png_and_report(tmp_path, capsys) -> None:
    out = tmp_path / "fig"
    argv = ["utility", "figure", "ridge", "--quick", "--runs", "2", "--out", str(out),
            "--calibration", "experiments"]
    assert _run(argv) == 0
    captured = capsys.readouterr()
    assert "figure ridge" in captured.err  # the progress bar
    assert "calibration=experiments" in captured.out and "m=50, s=1" in captured.out
    csv = pd.read_csv(out / "ridge-experiments-quick.csv")
    assert list(csv.columns) == figures.CSV_COLUMNS
    assert len(csv) == 4 * 3 * 10 and (csv["runs"] == 2).all()
    assert csv.loc[csv["mechanism"] != "ltm-gaussian", "p"].isna().all()
    assert sorted(csv.loc[csv["mechanism"] == "ltm-gaussian", "p"].unique()) == \
        sorted(baselines.P_VALUES)
    assert (csv["error_mean"] >= 1 - 1e-9).all() and (csv["lambda"] == 10).all()
    assert (out / "ridge-experiments-quick.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "ridge-experiments-quick.md").read_text()
    assert "calibration `experiments`" in report and "m = 50, s = 1" in report
    assert baselines.EXPERIMENTS_LABEL in report
    assert "delta = 1e-06" in report
    with pytest.raises(InputError, match="already exist"):
        _run(argv)
    spec = figures.figure_spec("ridge", quick=True, runs=2, calibration="experiments")
    assert figures.check_figure_outputs(out, spec, force=True)["csv"].is_file()


def test_figure_command_defaults_to_dp(tmp_path, capsys) -> None:
    out = tmp_path / "fig"
    assert _run(["utility", "figure", "ridge", "--quick", "--runs", "2", "--out", str(out),
                 "--no-progress"]) == 0
    assert "calibration=dp, the (epsilon, delta)-DP LTM" in capsys.readouterr().out
    csv = pd.read_csv(out / "ridge-dp-quick.csv")
    assert (csv["error_mean"] >= 1 - 1e-9).all() and len(csv) == 4 * 3 * 10


def test_figure_command_refuses_an_unwritable_out_before_work(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    # Refused by the one check every command's --out goes through, which names the file.
    with pytest.raises(InputError, match="lies under .*file, which is a file"):
        _run(["utility", "figure", "ridge", "--quick", "--out", str(blocker / "sub")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_utility_sweep_names_its_calibration(tmp_path, capsys) -> None:
    argv = ["utility", "--problem", "lowrank", "--n-min", "2000", "--n-max", "2000",
            "--points", "1", "--d", "3", "--k", "1", "--m", "8", "--repeat", "1",
            "--p-values", "0", "--calibration", "experiments", "--out", str(tmp_path),
            "--no-progress"]
    assert _run(argv) == 0
    assert "calibration=experiments" in capsys.readouterr().out
    frame = pd.read_csv(tmp_path / "utility-lowrank.csv")
    assert (frame["calibration"] == "experiments").all()
    # the experiments' Laplace: 2 m / eps^2 per sketch entry
    laplace = frame[frame["method"] == "ltm-laplace"].iloc[0]
    assert laplace["sigma2"] == pytest.approx(2 * 8 / 3.0**2)


# --- ltm analyze: the baselines beside the run -----------------------------------------------


def test_analyze_reports_local_and_central_baselines(tmp_path, capsys) -> None:
    rng = np.random.default_rng(14)
    M = datasets.lowrank_data(2000, 4, 2, rng)
    sk = Sketch.generate(2000, 20, 1, seed=15)
    spec = NoiseSpec("gaussian", n=2000, m=20, d=4, s=1, epsilon=5.0, delta=0.01)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    np.save(run_dir / "output.npy", baselines.simulate_ltm(M, sk, spec, rng))
    np.save(run_dir / "data.npy", M)
    (run_dir / "result.json").write_text(json.dumps(
        {"parameters": {"noise": spec.describe()}}))
    assert _run(["analyze", "lowrank", "--k", "2", "--json", str(run_dir)]) == 0
    result = json.loads(capsys.readouterr().out)
    base = result["baselines"]
    assert base["epsilon"] == 5.0 and base["delta"] == 0.01 and base["calibration"] == "corollary"
    assert base["runs"] == 5 and set(base) >= {"local", "central", "ltm-simulated"}
    assert 0 <= base["central"]["mean"] < base["local"]["mean"]
    assert _run(["analyze", "lowrank", "--k", "2", "--calibration", "experiments",
                 "--epsilon", "1", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "epsilon=1, delta=0.01 (calibration=experiments" in out
    assert "local" in out and "central" in out


def test_the_figure_s_printed_time_is_the_time_the_command_took(tmp_path) -> None:
    """The quick low-rank figure's time covers all its work, the data's bounds and the
    files included: once it said 2 s and went on for some 40 s more."""
    import re
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(Path(figures.__file__).resolve().parents[2])

    def timed(*words: str) -> tuple[subprocess.CompletedProcess[str], float]:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "harness", "utility", "figure", "lowrank",
                               "--quick", *words], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        return done, time.perf_counter() - start

    # What the command costs before its work starts: the interpreter and the parser.
    refused, startup = timed("--runs", "0", "--out", "refused")
    assert refused.returncode == 1
    done, wall = timed("--runs", "2", "--no-progress", "--out", "fig")
    assert done.returncode == 0, done.stderr
    printed = float(re.search(r"runs, (\d+) s:", done.stdout).group(1))
    assert wall - startup - 1.5 <= printed <= wall + 0.5, (printed, wall, startup)
