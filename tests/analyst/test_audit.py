"""``ltm audit``: the empirical lower bound on epsilon, its verdicts and its inputs."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from cli.test_cli_properties import (  # tests/cli, a namespace beside this folder
    BUDGET,
    _reached,
    check_outcome,
    options,
    small_int,
    wild_number,
)
from hypothesis import given
from hypothesis import strategies as st

from harness.analyst.audit import (
    AuditConfig,
    audit,
    bucket_mechanism,
    threshold_test,
    trials_needed,
)
from harness.cli import main
from harness.privacy import NoiseSpec
from harness.privacy import accounting as privacy

# harness.analyst exports the function audit under the module's name
audit_module = importlib.import_module("harness.analyst.audit")

# n = 20,000 clients, m = 100, d = 10: 100 honest contributors per bucket, so a
# trial costs 100 draws; 20,000 trials per input take about a second.
SMALL = ["--clients", "20000", "--rows", "100", "--dim", "10", "--trials", "20000",
         "--seed", "5"]


def _last_line(capsys) -> tuple[float, float]:
    """The bound, from the line before the verdict, which ends the output and agrees."""
    *_, out, verdict = capsys.readouterr().out.strip().splitlines()
    assert out.startswith("empirical epsilon >= ")
    lower, claimed = out.removeprefix("empirical epsilon >= ").split(" (95%); claimed ")
    word = "REFUTED" if float(lower) > float(claimed) else "NOT REFUTED"
    assert verdict.startswith(f"verdict: {word} ("), verdict
    return float(lower), float(claimed)


@pytest.mark.parametrize("args", [
    ["--calibration", "corollary"],
    ["--calibration", "analytic"],
    ["--noise", "skellam"],
])
def test_audit_passes_the_dp_calibrations(capsys, args):
    assert main(["audit", *SMALL, *args]) == 0
    lower, claimed = _last_line(capsys)
    assert claimed == 1.0 and lower <= claimed


def test_audit_catches_the_experiments_recipe_at_p_1(capsys):
    """sigma_loc^2 / n per client leaves a bucket sigma_loc^2 / m: at m = 100, d = 1 the
    bucket's epsilon is far above the claim, and a few thousand trials prove it."""
    args = ["--clients", "5000", "--rows", "100", "--dim", "1", "--trials", "4000",
            "--seed", "1", "--calibration", "experiments", "--p", "1"]
    assert main(["audit", *args]) == 3
    lower, claimed = _last_line(capsys)
    assert lower > 2 * claimed


def test_laplace_names_the_dense_sketch_in_audits_own_options(capsys):
    """The corollary's Laplace noise needs s = m; the refusal names --sparsity, and
    with it the audit runs and passes."""
    assert main(["audit", "--noise", "laplace", *SMALL]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sparsity 100" in err[0] and "--dense" not in err[0]
    assert main(["audit", "--noise", "laplace", "--sparsity", "100", "--clients", "2000",
                 "--rows", "100", "--dim", "10", "--trials", "4000", "--seed", "5"]) == 0
    lower, claimed = _last_line(capsys)
    assert lower <= claimed


def test_too_few_trials_names_how_many_are_needed(capsys):
    assert main(["audit", *SMALL[:6], "--trials", "10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"use --trials {trials_needed(1.0, 1e-6)} or more" in err[0]


@pytest.mark.parametrize(("option", "value"), [
    ("--epsilon", "0"), ("--epsilon", "inf"), ("--delta", "0.9"), ("--p", "1.5"),
    ("--trials", "-1"), ("--dim", "0"), ("--eta", "nan"), ("--clients", "10000000000"),
])
def test_every_numeric_option_has_a_finite_range(capsys, option, value):
    assert main(["audit", option, value]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0]


def test_threshold_test_is_sound_and_sharp_on_a_known_gaussian_pair():
    """N(mu, 1) against N(0, 1) is (eps(delta), delta)-DP with eps from the analytic
    Gaussian: the bound must stay below it, and come within reach of it (events of
    probability delta are out of reach of 10^5 trials, hence not closer)."""
    mu, delta = 1.0, 1e-6
    true_epsilon = privacy.gaussian_epsilon(1.0, mu, delta)
    rng = np.random.default_rng(11)
    trials = 200_000
    bound, *_ = threshold_test(rng.standard_normal(trials) + mu, rng.standard_normal(trials),
                               delta)
    assert 0.45 * true_epsilon < bound <= true_epsilon
    same, *_ = threshold_test(rng.standard_normal(trials), rng.standard_normal(trials), delta)
    assert same < 0.05


def test_audit_simulates_the_zero_output_branch_and_the_lattice():
    silent = audit(AuditConfig(n=5000, m=100, d=1, trials=1000, seed=0))
    assert silent.epsilon_lower == 0.0 and "zeros" in silent.description
    # Skellam: integer sums of the encoded +-eta and the clients' integer noise, whose
    # variance is the bucket's mu (H clients of mu / H each)
    config = AuditConfig(noise="skellam", n=20000, m=100, d=10, frac_bits=8)
    mech, _ = bucket_mechanism(config)
    rng = np.random.default_rng(0)
    high, low = mech.outputs(rng, 1.0, 4000), mech.outputs(rng, -1.0, 4000)
    assert np.array_equal(high, np.floor(high))
    bucket_mu = NoiseSpec("skellam", n=20000, m=100, d=10, s=1, frac_bits=8).bucket_mu
    assert high.var() == pytest.approx(bucket_mu, rel=0.1)
    assert high.mean() - low.mean() == pytest.approx(2 * 2**8, abs=5 * math.sqrt(bucket_mu / 2000))


AUDIT_OPTIONS = {
    "--clients": st.one_of(wild_number(), small_int(2, 50_000)),
    "--rows": st.one_of(wild_number(), small_int(1, 200)),
    "--dim": st.one_of(wild_number(), small_int(1, 20)),
    "--sparsity": st.one_of(wild_number(), small_int(1, 5)),
    "--epsilon": wild_number(), "--delta": wild_number(), "--eta": wild_number(),
    "--p": wild_number(), "--frac-bits": wild_number(), "--trials": wild_number(),
    "--seed": wild_number(), "--corrupt-clients": wild_number(),
    "--noise": st.sampled_from(["gaussian", "laplace", "skellam", "poisson"]),
    "--calibration": st.sampled_from(["corollary", "analytic", "experiments", "dp", "x"]),
}


@BUDGET
@given(args=options(AUDIT_OPTIONS))
def test_audit_arguments_exit_0_or_1_with_one_line(capsys, args):
    """Whatever the arguments, the audit reaches its simulation or refuses in one line."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(audit_module.BucketMechanism, "outputs", _reached)
        check_outcome(capsys, ["audit", *args])


@pytest.mark.parametrize(("frac_bits", "refuted"), [(0, True), (2, False)])
def test_audit_agrees_with_the_certificate_for_the_noise_as_released(capsys, frac_bits,
                                                                    refuted):
    """n = 1e6, d = 1, analytic, epsilon 1 (H = 9381 clients of sd 0.087): at F = 0 each
    client's noise is rounded to 0 but for one in 1e8, and the audit proves epsilon
    far above 1, where the accountant certifies none and refuses the run; at F = 2 the
    certificate (0.887) holds and the audit stays below it."""
    args = ["--clients", "1000000", "--rows", "100", "--dim", "1", "--calibration", "analytic",
            "--frac-bits", str(frac_bits), "--trials", "12000", "--seed", "1"]
    assert main(["audit", *args]) == (3 if refuted else 0)
    lower, claimed = _last_line(capsys)
    spec = NoiseSpec("gaussian", n=1_000_000, m=100, d=1, s=1, calibration="analytic",
                     frac_bits=frac_bits)
    certified, _ = privacy.certify(spec)
    assert lower <= certified
    assert (lower > 3 * claimed) == refuted == (certified > claimed)


def test_audit_draws_the_gaussian_on_the_lattice_on_its_own():
    """Every client's noise is round(sigma 2^F Z), added to its encoded value: the sums
    are integers whatever the audited value, and at F = 0 with sd 0.087 nearly all 0."""
    config = AuditConfig(calibration="analytic", n=1_000_000, m=100, d=1, frac_bits=0)
    mech, _ = bucket_mechanism(config)
    rng = np.random.default_rng(0)
    high, low = mech.outputs(rng, 1.0, 200), mech.outputs(rng, -1.0, 200)
    assert np.array_equal(high, np.floor(high))
    # H = 9381 clients each nonzero with probability 2 Phi(-0.5/0.0873) = 1e-8
    assert np.mean(high == 1.0) > 0.6 and np.mean(low == -1.0) > 0.6
