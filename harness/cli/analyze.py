"""``ltm analyze`` (the analyst's A on a run's revealed sketch, beside the local and
central baselines) and ``ltm utility`` (error-against-n sweeps on the plaintext
simulation; ``ltm utility figure|table6|table7`` for the paper's own grids)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.analyst import (
    CALIBRATIONS,
    DEFAULT_FIGURE_M,
    DEFAULT_TABLE_M,
    EXPERIMENTS_LABEL,
    FIGURES,
    PROBLEMS,
    SweepConfig,
    analyze_lowrank,
    analyze_ridge,
    calibration_label,
    check_sweep_outputs,
    compare_baselines,
    figure_spec,
    load_run,
    reproduce_figure,
    reproduce_table,
    summarize_sweep,
    sweep,
    write_sweep_outputs,
)
from harness.cli.common import SEED_MAX, number
from harness.errors import InputError
from harness.fileio import check_output_dir

__all__ = ["add_commands"]

_DEFAULTS = SweepConfig()

# Far beyond any analysis this harness does, yet finite: each numeric option's range.
_MAX_N = 10**9  # clients of a utility sweep
_MAX_D = 4096  # columns: the sweeps form d x d Gram matrices per run
_MAX_M = 10**6  # sketch rows
_MAX_RUNS = 10_000  # repetitions, runs per point, baseline runs
_MAX_EPSILON = 1e6
_MAX_LAMBDA = 1e12
_MAX_ETA = 1e6
# The figures' smallest n is 1000, rounded to multiples of m.
_MAX_GRID_M = 1000
_SEED = number("--seed", low=0, high=SEED_MAX, integer=True)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    _add_analyze(subparsers)
    _add_utility(subparsers)


# --- ltm analyze ----------------------------------------------------------------


def _add_analyze(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze",
        description="Apply the analysis function A to output.npy of an `ltm run` directory "
                    "and measure its error against the optimum on the input (data.npy, or a "
                    "synthetic run's rows recomputed from its seed).")
    problems = parser.add_subparsers(dest="analysis", metavar="PROBLEM", required=True)

    lowrank = problems.add_parser(
        "lowrank", help="rank-k projection; error psi",
        description="X' = top-k right singular vectors of the sketch; "
                    "psi = (||A - AX'X'^T||_F^2 - ||A - AX_opt X_opt^T||_F^2) / n.")
    lowrank.add_argument("--k", type=number("--k", low=1, high=_MAX_D, integer=True),
                         required=True, help=f"rank of the projection, in [1, {_MAX_D}]")
    _common(lowrank)
    lowrank.set_defaults(func=cmd_analyze_lowrank)

    ridge = problems.add_parser(
        "ridge", help="ridge regression on the sketch of [A | b]; error phi",
        description="x' = argmin ||T_A x - T_b||^2 + lambda ||x||^2 on the sketch; "
                    "phi = cost(x') / cost(x_opt), cost(x) = ||Ax - b||^2 + lambda ||x||^2.")
    ridge.add_argument("--lambda", dest="lam", required=True, metavar="L",
                       type=number("--lambda", low=0, high=_MAX_LAMBDA),
                       help=f"regularisation weight lambda, in [0, {_MAX_LAMBDA:g}]")
    ridge.add_argument("--target-column", default=-1, metavar="COL",
                       type=number("--target-column", low=-_MAX_D, high=_MAX_D - 1,
                                   integer=True),
                       help="column of b in the run's matrix (default: -1, the last)")
    _common(ridge)
    ridge.set_defaults(func=cmd_analyze_ridge)


_CALIBRATION_HELP = ("noise calibration of the simulated LTM: dp, the (epsilon, delta)-DP "
                     "LTM (sigma_p^2 = sigma_local^2 (m/n)^p); corollary, the paper's "
                     "Corollary privacynew; or experiments, " + EXPERIMENTS_LABEL)


def _calibration_option(parser: argparse.ArgumentParser, default: str = "corollary") -> None:
    parser.add_argument("--calibration", choices=CALIBRATIONS, default=default,
                        help=f"{_CALIBRATION_HELP} (default: {default})".replace("%", "%%"))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="output directory of `ltm run`")
    parser.add_argument("--data", metavar="FILE",
                        help="the run's input matrix (.npy, .csv or .txt) if DIR has no "
                             "data.npy and its data file has moved")
    parser.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                        help="whether --data's first line is a header line (skipped) or a "
                             "row (default: detected: a line with text is a header)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    _calibration_option(parser)
    parser.add_argument("--epsilon", default=None,
                        type=number("--epsilon", low=0, high=_MAX_EPSILON, open_low=True),
                        help="epsilon of the baselines, in (0, 1e6] (default: the run's)")
    parser.add_argument("--baseline-runs", default=5, metavar="K",
                        type=number("--baseline-runs", low=1, high=_MAX_RUNS, integer=True),
                        help=f"runs of each simulated baseline, in [1, {_MAX_RUNS}] "
                             "(default: 5)")
    parser.add_argument("--seed", type=_SEED, default=0, help="seed of the baselines' noise")


def _baselines(args: argparse.Namespace, run, problem: str, **what) -> dict:
    return compare_baselines(
        run.data, problem, m=run.sketch.shape[0], params=run.params, epsilon=args.epsilon,
        calibration=args.calibration, runs=args.baseline_runs, seed=args.seed, **what)


def _load(args: argparse.Namespace):
    """The run, refusing one whose result.json is missing or records no parameters."""
    run = load_run(args.directory, args.data, args.header)
    if not run.params:  # load_run reads a missing file, [] and {} alike as nothing
        path = Path(args.directory) / "result.json"
        state = "is missing" if not path.exists() else "records no run parameters"
        raise InputError(f"{path} {state}, so the run's epsilon, delta and eta are unknown; "
                         "analyze the --out directory of a finished `ltm run`")
    return run


def _assumptions(args: argparse.Namespace, run, base: dict) -> str:
    """Where the privacy parameters the baselines used came from, for the first line."""
    noise = (run.params.get("parameters") or {}).get("noise")
    recorded = noise if isinstance(noise, dict) else {}
    sources = []
    for key in ("epsilon", "delta", "eta"):
        given = key == "epsilon" and args.epsilon is not None
        source = "--epsilon" if given else "result.json" if key in recorded else "assumed"
        sources.append(f"{key}={base[key]:g} ({source})")
    return ", ".join(sources)


def cmd_analyze_lowrank(args: argparse.Namespace) -> int:
    run = _load(args)
    result = analyze_lowrank(run.sketch, run.data, args.k)
    result["baselines"] = _baselines(args, run, "lowrank", k=args.k)
    _report(result, args.json, "psi", f"low-rank approximation, k={args.k}",
            _assumptions(args, run, result["baselines"]))
    return 0


def cmd_analyze_ridge(args: argparse.Namespace) -> int:
    run = _load(args)
    result = analyze_ridge(run.sketch, run.data, args.lam, args.target_column)
    result["baselines"] = _baselines(args, run, "ridge", lam=args.lam,
                                     target_column=args.target_column)
    _report(result, args.json, "phi", f"ridge regression, lambda={args.lam:g}",
            _assumptions(args, run, result["baselines"]))
    return 0


def _report(result: dict, as_json: bool, metric: str, what: str, assumed: str) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"{what} (n={result['n']}, d={result['d']}, m={result['m']}; {assumed})")
    print(f"  {metric} = {result[metric]:.6g}")
    print(f"  cost = {result['cost']:.6g}   optimal cost = {result['optimal_cost']:.6g}")
    if "coefficients" in result:
        print("  x' = " + " ".join(f"{v:.4g}" for v in result["coefficients"]))
    base = result.get("baselines")
    if base:
        print(f"  on the same data, epsilon={base['epsilon']:g}, delta={base['delta']:g} "
              f"(calibration={calibration_label(base['calibration'])}, mean +- std of "
              f"{base['runs']} runs):")
        for name in ("local", "central", "ltm-simulated"):
            entry = base[name]
            print(f"    {name:<14} {metric} = {entry['mean']:.6g} +- {entry['std']:.2g}")


# --- ltm utility ----------------------------------------------------------------------


def _add_utility(subparsers: argparse._SubParsersAction) -> None:
    d = _DEFAULTS
    parser = subparsers.add_parser(
        "utility",
        description="Plaintext simulation of the paper's utility experiments: error psi "
                    "(low rank) or phi (ridge) against log-spaced n for the local model, "
                    "the central model (MOD-SULQ / SSP), the LTM with Gaussian and Laplace "
                    "noise and the Gaussian LTM with variance ~ n^-p. Writes "
                    "utility-PROBLEM.csv, utility-PROBLEM-summary.csv and utility-PROBLEM.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--problem", choices=PROBLEMS, default=d.problem, help="analysis to measure")
    add("--n-min", type=_int("--n-min", _MAX_N), default=d.n_min,
        help="smallest number of clients")
    add("--n-max", type=_int("--n-max", _MAX_N), default=d.n_max,
        help="largest number of clients")
    add("--points", type=_int("--points", 1000), default=d.points,
        help="log-spaced values of n")
    add("--d", type=_int("--d", _MAX_D), default=d.d,
        help="columns of A (ridge: features, plus the target)")
    add("--k", type=_int("--k", _MAX_D), default=d.k, help="rank for low-rank approximation")
    add("--lambda", dest="lam", type=number("--lambda", low=0, high=_MAX_LAMBDA, open_low=True),
        default=d.lam, metavar="L", help="ridge regularisation, in (0, 1e12]")
    add("--mu2", default=d.mu2, help="variance of x_opt's entries: a number, 'n' or 'n^2'")
    add("--m", type=_int("--m", _MAX_M), default=d.m, help="sketch rows")
    add("--s", type=_int("--s", _MAX_M), default=d.s,
        help="non-zeros per sketch column (Gaussian LTM)")
    add("--repeat", type=_int("--repeat", _MAX_RUNS), default=d.repeat,
        help="repetitions per n")
    add("--epsilon", type=number("--epsilon", low=0, high=_MAX_EPSILON, open_low=True),
        default=d.epsilon,
        help="privacy parameter (the default is large because the LTM's calibration, "
             "Corollary 'privacynew', needs n >> s^3 m d^2 / eps^2 to help)")
    add("--delta", type=number("--delta", low=0, high=1, open_low=True), default=d.delta,
        help="privacy parameter delta, in (0, 1)")
    add("--eta", type=number("--eta", low=0, high=_MAX_ETA, open_low=True), default=d.eta,
        help="assumed bound on input entries, in (0, 1e6]")
    add("--p-values", type=_p_values, default=d.p_values,
        help="comma-separated exponents p of the n^-p interpolation")
    add("--seed", type=_SEED, default=d.seed, help="seed for data, sketches and noise")
    add("--calibration", choices=CALIBRATIONS, default=d.calibration,
        help=_CALIBRATION_HELP.replace("%", "%%"))
    add("--out", default=".", metavar="DIR", help="output directory")
    add("--force", action="store_true", help="overwrite existing output files")
    add("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=cmd_utility)
    # `ltm utility` alone keeps its options; the paper's own grids are subcommands.
    grids = parser.add_subparsers(dest="grid", metavar="{figure,table6,table7}")
    _add_figure(grids)
    _add_tables(grids)


def _int(option: str, high: int) -> Callable[[str], Any]:
    return number(option, low=1, high=high, integer=True)


def _p_values(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 0.9,0.5,0, got {text!r}"
                                         ) from None
    return values


def cmd_utility(args: argparse.Namespace) -> int:
    config = SweepConfig(
        problem=args.problem, n_min=args.n_min, n_max=args.n_max, points=args.points,
        d=args.d, k=args.k, lam=args.lam, mu2=args.mu2, m=args.m, s=args.s,
        repeat=args.repeat, epsilon=args.epsilon, delta=args.delta, eta=args.eta,
        seed=args.seed, p_values=args.p_values, calibration=args.calibration)
    # Refuse before the sweep, not after minutes of work.
    check_output_dir(args.out, whole=False)
    check_sweep_outputs(args.out, config.problem, args.force)
    frame = sweep(config, progress=not args.no_progress)
    paths = write_sweep_outputs(frame, config, args.out, force=args.force)
    _print_summary(frame)
    for path in paths.values():
        print(f"wrote {path}")
    return 0


def _print_summary(frame) -> None:
    summary = summarize_sweep(frame)
    largest = summary["n"].max()
    metric = frame["metric"].iloc[0]
    calibration = frame["calibration"].iloc[0]
    print(f"{metric} at n={largest} (mean +- std over repetitions, calibration="
          f"{calibration_label(calibration)}):")
    for row in summary[summary["n"] == largest].itertuples():
        std = 0.0 if math.isnan(row.std) else row.std
        print(f"  {row.method:<13} {row.mean:.4g} +- {std:.2g}")
    bound, top = float(frame["row_bound"].iloc[0]), float(frame["max_row_norm"].max())
    verdict = ("exceed it: the noise is calibrated for a sensitivity the data do not have"
               if top > bound else "stay within it")
    print(f"row bound R = {bound:.4g} (eta sqrt(columns)); the data's rows reach norm "
          f"{top:.4g} and {verdict}")
    sys.stdout.flush()


# --- ltm utility figure | table6 | table7 --------------------------------------------------


def _grid_options(parser: argparse.ArgumentParser, runs_default: str,
                  calibration: str = "corollary") -> None:
    parser.add_argument("--runs", type=number("--runs", low=2, high=_MAX_RUNS, integer=True),
                        default=None, metavar="K",
                        help=f"runs per point, in [2, {_MAX_RUNS}] ({runs_default})")
    _calibration_option(parser, calibration)
    parser.add_argument("--m", type=_int("--m", _MAX_GRID_M), default=None,
                        help=f"sketch rows, which the paper does not state, in [1, "
                             f"{_MAX_GRID_M}] (default: {DEFAULT_FIGURE_M} for figures, "
                             f"{DEFAULT_TABLE_M} for tables)")
    parser.add_argument("--seed", type=_SEED, default=0,
                        help="seed for data, sketches and noise")
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_figure(grids: argparse._SubParsersAction) -> None:
    parser = grids.add_parser(
        "figure", help="one of the paper's utility figures, its whole grid",
        description="lowrank: psi, eps in {0.1, 0.5} x k in {5, 10}, d = 50. ridge: phi, "
                    "eps in {0.01, 0.03, 0.05, 0.1}, d = 10, lambda = 10, mu^2 = n. "
                    "ridge-lambda: the same for lambda in {1, 10, 100}. n = 1000 * 1.5^i, "
                    "i = 0..16; local, central, LTM Laplace and the Gaussian LTM for p in "
                    "{1, 0.9, ..., 0.5, 0}. ridge-m (not the paper's): ridge at eps = 0.1 "
                    "for m in {50, 500, 5000} and without a sketch (dp or experiments; no "
                    "Laplace LTM). Writes FIGURE-CALIBRATION.csv|png|md to --out; the report "
                    "and the plot state the row bound, whether the data exceed it, and the "
                    "runs where SSP's noisy Gram was indefinite.")
    parser.add_argument("name", choices=FIGURES, metavar="FIGURE",
                        help="lowrank, ridge, ridge-lambda or ridge-m")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--quick", action="store_true",
                        help="a reduced grid for CI: three values of n, three runs")
    _grid_options(parser, "default: 20, --quick: 3", calibration="dp")
    parser.set_defaults(func=cmd_figure)


def _add_tables(grids: argparse._SubParsersAction) -> None:
    for name, what in (("table6", "psi of low rank at epsilon = 0.05"),
                       ("table7", "phi of ridge regression at epsilon = 0.03, lambda = 10")):
        parser = grids.add_parser(
            name, help=f"the paper's Table {name[-1]}: {what}, four UCI datasets",
            description=f"{what} on Power, Elevation, Ethylene and Songs, read from the "
                        "files their UCI pages distribute, with the paper's preprocessing; "
                        "the paper's values beside the measured ones.")
        parser.add_argument("--data-dir", required=True, metavar="DIR",
                            help="directory holding the UCI files (see the docs page "
                                 "How-to > Utility)")
        parser.add_argument("--out", default=".", metavar="DIR",
                            help="output directory (default: .)")
        _grid_options(parser, "default: 20")
        parser.set_defaults(func=cmd_table, table=name)


def cmd_figure(args: argparse.Namespace) -> int:
    if args.name == "ridge-m" and args.m is not None:
        raise InputError("ridge-m sweeps m itself (50, 500, 5000 and no sketch); drop --m")
    check_output_dir(args.out, whole=False)
    spec = figure_spec(args.name, quick=args.quick, runs=args.runs,
                               calibration=args.calibration, seed=args.seed,
                               m=DEFAULT_FIGURE_M if args.m is None else args.m)
    summary, paths, seconds = reproduce_figure(spec, args.out, force=args.force,
                                                       progress=not args.no_progress)
    largest = max(spec.n)
    print(f"figure {spec.name} ({spec.metric}, calibration="
          f"{calibration_label(spec.calibration)}, "
          f"{'m per panel' if spec.per_panel_m else f'm={spec.m}'}, s={spec.s}, "
          f"delta={spec.delta:g}) at n={largest}, mean +- std of {spec.runs} runs, "
          f"{seconds:.0f} s:")
    at = summary[summary["n"] == largest]
    for row in at.itertuples():
        label = row.mechanism + ("" if row.mechanism != "ltm-gaussian" else f" p={row.p:g}")
        print(f"  {row.panel:<22} {label:<20} {row.error_mean:.4g} +- {row.error_std:.2g}")
    for path in paths.values():
        print(f"wrote {path}")
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    check_output_dir(args.out, whole=False)
    result, paths = reproduce_table(
        args.table, args.data_dir, args.out, runs=args.runs, calibration=args.calibration,
        m=args.m, seed=args.seed, force=args.force, progress=not args.no_progress)
    print(result["text"])
    for path in paths.values():
        print(f"wrote {path}")
    return 0
