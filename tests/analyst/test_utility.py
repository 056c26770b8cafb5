"""The utility sweep, its files and plots, and the ``analyze`` / ``utility`` commands."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from harness.analyst import baselines, datasets, utility
from harness.cli import analyze as _cmd_analyze
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.privacy.noise import NoiseSpec

SMALL = dict(n_min=2000, n_max=8000, points=2, d=3, k=1, m=8, repeat=2, epsilon=3.0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ltm")
    _cmd_analyze.add_commands(parser.add_subparsers(dest="command"))
    return parser


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


# --- the grid and the configuration ------------------------------------------------------


def test_n_grid_is_log_spaced_multiples() -> None:
    grid = utility.n_grid(1000, 100_000, 3, multiple_of=7)
    assert grid == sorted(grid) and len(grid) == 3
    assert all(n % 7 == 0 for n in grid)
    assert grid[1] == pytest.approx(10_000, rel=0.01)
    assert utility.n_grid(1000, 1000, 4) == [1000]
    assert utility.n_grid(500, 900, 1) == [500]


def test_config_validation_names_the_option() -> None:
    with pytest.raises(InputError, match="n-min"):
        utility.SweepConfig(n_min=10, m=20)
    with pytest.raises(InputError, match="--k"):
        utility.SweepConfig(d=3, k=3)
    with pytest.raises(InputError, match="--lambda"):
        utility.SweepConfig(problem="ridge", lam=0.0)
    with pytest.raises(InputError, match="--p-values"):
        utility.SweepConfig(p_values=(1.5,))
    with pytest.raises(InputError, match="unknown problem"):
        utility.SweepConfig(problem="pca")
    with pytest.raises(InputError, match="--epsilon"):
        utility.SweepConfig(epsilon=-1)


def test_method_names() -> None:
    names = utility.method_names()
    assert names[:4] == ["local", "central", "ltm-gaussian", "ltm-laplace"]
    assert names[4:] == ["p=0.9", "p=0.8", "p=0.7", "p=0.6", "p=0.5", "p=0"]


# --- the sweep ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lowrank_frame():
    return utility.sweep(utility.SweepConfig(**SMALL), progress=False)


def test_sweep_rows(lowrank_frame) -> None:
    frame = lowrank_frame
    assert len(frame) == 2 * 2 * 10
    assert set(frame["n"]) == {2000, 8000}
    assert (frame["metric"] == "psi").all()
    assert np.isfinite(frame["error"]).all() and (frame["error"] > -1e-9).all()
    assert frame.loc[frame["method"] == "ltm-gaussian", "p"].eq(1.0).all()
    assert frame.loc[frame["method"] == "p=0.5", "p"].eq(0.5).all()
    assert frame.loc[frame["method"] == "local", "p"].isna().all()
    # sigma_p^2 grows as p falls
    at = frame[(frame["n"] == 8000) & (frame["repetition"] == 0)].set_index("method")
    assert at.loc["p=0", "sigma2"] > at.loc["p=0.5", "sigma2"] > at.loc["ltm-gaussian", "sigma2"]


def test_sweep_is_reproducible(lowrank_frame) -> None:
    again = utility.sweep(utility.SweepConfig(**SMALL), progress=False)
    assert (again["error"].to_numpy() == lowrank_frame["error"].to_numpy()).all()


def test_ridge_sweep_and_summary() -> None:
    config = utility.SweepConfig(problem="ridge", **SMALL | {"p_values": (0.5,)})
    frame = utility.sweep(config, progress=False)
    assert set(frame["method"]) == {"local", "central", "ltm-gaussian", "ltm-laplace", "p=0.5"}
    assert (frame["error"] >= 1 - 1e-9).all() and (frame["metric"] == "phi").all()
    summary = utility.summarize(frame)
    assert len(summary) == 5 * 2 and (summary["runs"] == 2).all()
    part = frame[(frame["method"] == "local") & (frame["n"] == 2000)]["error"]
    row = summary[(summary["method"] == "local") & (summary["n"] == 2000)].iloc[0]
    assert row["mean"] == pytest.approx(part.mean())
    assert row["std"] == pytest.approx(part.std())
    # the row bound R = eta sqrt(d + 1) and the data's largest row, drawn again here
    assert frame["row_bound"].tolist() == pytest.approx([2.0] * len(frame))  # eta 1, 4 columns
    seeds = np.random.SeedSequence([config.seed, 2000, 0]).spawn(4)
    features, target, _ = datasets.regression_data(
        2000, 3, 2000.0, np.random.default_rng(seeds[0]))
    first = frame[(frame["n"] == 2000) & (frame["repetition"] == 0)]["max_row_norm"]
    assert first.iloc[0] == pytest.approx(
        np.linalg.norm(np.column_stack([features, target]), axis=1).max())


def test_zero_output_is_recorded() -> None:
    frame = utility.sweep(utility.SweepConfig(**SMALL | {"n_min": 100, "n_max": 100,
                                                          "points": 1, "repeat": 1}),
                          progress=False)
    gauss = frame[frame["method"] == "ltm-gaussian"].iloc[0]
    assert gauss["zero_output"] and not frame[frame["method"] == "local"]["zero_output"].any()


# --- files and plots -----------------------------------------------------------------------


def test_write_outputs_refuses_to_overwrite(tmp_path, lowrank_frame) -> None:
    config = utility.SweepConfig(**SMALL)
    paths = utility.write_outputs(lowrank_frame, config, tmp_path / "out")
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pandas as pd

    assert len(pd.read_csv(paths["runs"])) == len(lowrank_frame)
    assert set(pd.read_csv(paths["summary"]).columns) == {"method", "n", "mean", "std", "runs"}
    with pytest.raises(InputError, match="--force"):
        utility.write_outputs(lowrank_frame, config, tmp_path / "out")
    utility.write_outputs(lowrank_frame, config, tmp_path / "out", force=True)
    assert not list((tmp_path / "out").glob("*.part*"))


def test_plot_leaves_no_open_figures(tmp_path, lowrank_frame) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    utility.plot_sweep(lowrank_frame, tmp_path / "p.png", "title")
    assert plt.get_fignums() == before
    assert (tmp_path / "p.png").stat().st_size > 1000


# --- the commands ---------------------------------------------------------------------------


def _run_dir(path, problem: str) -> np.ndarray:
    rng = np.random.default_rng(21)
    if problem == "lowrank":
        M = datasets.lowrank_data(600, 4, 2, rng)
    else:
        F, b, _ = datasets.regression_data(600, 3, 1.0, rng)
        M = np.column_stack([b, F])  # target first, to exercise --target-column
    sk = Sketch.generate(600, 30, 2, seed=22)
    spec = NoiseSpec("none", n=600, m=30, d=4, s=2)
    path.mkdir()
    np.save(path / "output.npy", baselines.simulate_ltm(M, sk, spec, rng))
    np.save(path / "data.npy", M)
    (path / "result.json").write_text(json.dumps({"n": 600, "d": 4, "m": 30, "s": 2}))
    return M


def test_analyze_lowrank_command(tmp_path, capsys) -> None:
    _run_dir(tmp_path / "run", "lowrank")
    assert _run(["analyze", "lowrank", "--k", "2", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "psi = " in out and "k=2" in out
    assert _run(["analyze", "lowrank", "--k", "2", "--json", str(tmp_path / "run")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["psi"] == pytest.approx(0.0, abs=1e-9)  # no noise, exactly rank 2
    assert np.array(result["projection"]).shape == (4, 2)


def test_analyze_ridge_command(tmp_path, capsys) -> None:
    _run_dir(tmp_path / "run", "ridge")
    argv = ["analyze", "ridge", "--lambda", "5", "--target-column", "0", "--json",
            str(tmp_path / "run")]
    assert _run(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert 1.0 <= result["phi"] < 1.05 and len(result["coefficients"]) == 3
    assert _run(argv[:-2] + [str(tmp_path / "run")]) == 0
    assert "phi = " in capsys.readouterr().out


def test_analyze_without_data_names_the_fix(tmp_path) -> None:
    M = _run_dir(tmp_path / "run", "lowrank")
    (tmp_path / "run" / "data.npy").unlink()
    with pytest.raises(InputError, match="--data FILE"):
        _run(["analyze", "lowrank", "--k", "2", str(tmp_path / "run")])
    np.save(tmp_path / "input.npy", M)
    assert _run(["analyze", "lowrank", "--k", "2", "--data", str(tmp_path / "input.npy"),
                 str(tmp_path / "run")]) == 0


def test_utility_command(tmp_path, capsys) -> None:
    argv = ["utility", "--problem", "ridge", "--n-min", "2000", "--n-max", "4000",
            "--points", "2", "--d", "2", "--m", "8", "--repeat", "1", "--p-values", "0.5,0",
            "--out", str(tmp_path)]
    assert _run(argv) == 0
    captured = capsys.readouterr()
    assert "utility ridge" in captured.err  # the progress bar
    assert "phi at n=4000" in captured.out and "wrote" in captured.out
    # b = A x with x ~ N(0, n I): rows far beyond R = sqrt(3), and the summary says so
    assert "row bound R = 1.732 (eta sqrt(columns))" in captured.out
    assert "and exceed it" in captured.out
    assert {p.name for p in tmp_path.iterdir()} == {
        "utility-ridge.csv", "utility-ridge-summary.csv", "utility-ridge.png"}
    with pytest.raises(InputError, match="already exist"):
        _run(argv + ["--no-progress"])
    assert _run(argv + ["--no-progress", "--force"]) == 0


def test_utility_command_rejects_bad_p_values() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["utility", "--p-values", "a,b"])
