"""``ltm audit``: an empirical lower bound on the epsilon of one bucket's noise;
the work is in :mod:`harness.analyst.audit`."""

from __future__ import annotations

import argparse

from harness.analyst import AUDIT_CALIBRATIONS, AUDIT_NOISES, AuditConfig, audit

__all__ = ["REFUTED", "add_commands"]

# Exit status when the audit proves the claimed epsilon false (1 is bad input).
REFUTED = 3


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        description="Simulate one entry of the release (per-client noise, fixed-point "
        "encoding, sum; Skellam in integers) on two neighbouring inputs, run the optimal "
        "threshold test and print a 95% Clopper-Pearson lower bound on epsilon. Exit 0 when "
        f"it is at most the claimed epsilon, {REFUTED} when the audit proves the claim false.")
    p.add_argument("--noise", choices=AUDIT_NOISES, default="gaussian")
    p.add_argument("--calibration", choices=AUDIT_CALIBRATIONS, default="corollary",
                   help="corollary | analytic (Gaussian) | experiments: the paper's recipe, "
                   "sigma_loc^2 n^-p per client | dp: sigma_loc^2 (m/n)^p (default corollary)")
    p.add_argument("--p", type=float, default=1.0,
                   help="interpolation exponent of experiments and dp, in [0, 1] (default 1)")
    p.add_argument("--clients", type=int, default=100_000, metavar="n",
                   help="clients (default 100000)")
    p.add_argument("--rows", type=int, default=100, metavar="m", help="sketch rows (default 100)")
    p.add_argument("--dim", type=int, default=10, metavar="d", help="columns (default 10)")
    p.add_argument("--sparsity", type=int, default=1, metavar="s",
                   help="non-zeros per column (default 1)")
    p.add_argument("--epsilon", type=float, default=1.0, help="claimed epsilon (default 1)")
    p.add_argument("--delta", type=float, default=1e-6, help="delta (default 1e-6)")
    p.add_argument("--eta", type=float, default=1.0, help="bound on |A| (default 1)")
    p.add_argument("--corrupt-clients", type=int, default=0, metavar="t'",
                   help="clients whose noise the adversary knows (default 0)")
    p.add_argument("--frac-bits", type=int, default=16, help="fixed-point fraction bits")
    p.add_argument("--trials", type=int,
                   help="draws per neighbouring input (default: about a minute's worth)")
    p.add_argument("--seed", type=int,
                   help="seed the simulation, to repeat an audit (default: the run's generator)")
    p.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    config = AuditConfig(noise=args.noise, calibration=args.calibration, p=args.p,
                         n=args.clients, m=args.rows, d=args.dim, s=args.sparsity,
                         epsilon=args.epsilon, delta=args.delta, eta=args.eta,
                         t_prime=args.corrupt_clients, frac_bits=args.frac_bits,
                         trials=args.trials, seed=args.seed)
    result = audit(config)
    print(f"one bucket: {result.description}")
    print(f"trials: {result.trials} per neighbouring input; the threshold is picked on "
          f"{result.evaluated} and counted on {result.evaluated}")
    print(f"threshold {result.threshold:.6g}: false positives {result.false_positives}, "
          f"false negatives {result.false_negatives}")
    print(f"empirical epsilon >= {result.epsilon_lower:.3f} (95%); claimed {result.claimed:g}")
    # The last line, one word first, as the exit status says: a script or a reader
    # scanning the output need not compare the numbers.
    if result.refuted:
        print(f"verdict: REFUTED (epsilon {result.claimed:g} is false at 95% confidence; "
              f"exit {REFUTED})")
        return REFUTED
    print(f"verdict: NOT REFUTED (no evidence against epsilon {result.claimed:g}; an audit "
          "bounds epsilon from below and proves no claim true)")
    return 0
