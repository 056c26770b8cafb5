"""Noise and what it buys: the mechanisms, their calibrations and accountants.

Owns who adds a run's noise, behind one interface (:class:`Mechanism`, chosen by
name through :func:`mechanism_class`; :func:`register` adds one): the clients
(:class:`Ltm`, the paper's), each server (:class:`Dng`) or the MPC itself
(:class:`Central`), each with what it adds, the step each server runs before the
MPC, its program's parameters, its refusals, its verification of a release and
its certificate. Beside them: the clients' noise and its calibration by the
paper's corollaries (:mod:`.noise`); the accountants (:mod:`.accounting`, the
lattice's in :mod:`.lattice`, the exact Skellam's in :mod:`.skellam`, the
binomial's in :mod:`.binomial`) and their certificates kept across runs
(:mod:`.certificates`); and the statistics of a noisy release (:mod:`.noise_check`).

May import: ``harness.clients`` (the samplers, the digest, the integer format)
and the shared modules. Nothing here knows about MP-SPDZ processes, hosts,
sweeps or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.privacy.accounting import (
        Sensitivity,
        accountant,
        analytic_gaussian_sigma,
        analytic_split,
        binomial_failure,
        binomial_honest,
        certify,
        concentration_failure,
        gaussian_epsilon,
        guaranteed_honest,
        honest_contributors,
        release_sensitivity,
        skellam_epsilon,
        skellam_mu,
        smallest_n,
    )
    from harness.privacy.binomial import MAX_COINS, binomial_epsilon, grid_sensitivity, least_coins
    from harness.privacy.central import ROUNDING_COINS, Central, CoinLayout, central_noise
    from harness.privacy.certificates import central_sigma, certificate, honest_split
    from harness.privacy.dng import Dng, check_dng_draws, dng_noise, input_server_noise
    from harness.privacy.ltm import Ltm, privacy_record
    from harness.privacy.mechanism import (
        Check,
        Mechanism,
        Options,
        Request,
        ServerStep,
        programs_refusal,
    )
    from harness.privacy.noise import (
        CALIBRATIONS,
        NOISE_GENERATOR,
        NOISE_KINDS,
        NoiseSpec,
        noise_rng,
        zero_output_bound,
    )
    from harness.privacy.noise_check import FAIL_P, FAIL_Z
    from harness.privacy.registry import (
        DEFAULT_MECHANISM,
        mechanism_class,
        mechanism_names,
        noise_words,
        register,
        run_server_step,
        unregister,
    )
    from harness.privacy.servers import ServersNoise

__all__ = [
    "CALIBRATIONS",
    "DEFAULT_MECHANISM",
    "FAIL_P",
    "FAIL_Z",
    "MAX_COINS",
    "NOISE_GENERATOR",
    "NOISE_KINDS",
    "ROUNDING_COINS",
    "Central",
    "Check",
    "CoinLayout",
    "Dng",
    "Ltm",
    "Mechanism",
    "NoiseSpec",
    "Options",
    "Request",
    "Sensitivity",
    "ServerStep",
    "ServersNoise",
    "accountant",
    "analytic_gaussian_sigma",
    "analytic_split",
    "binomial_epsilon",
    "binomial_failure",
    "binomial_honest",
    "central_noise",
    "central_sigma",
    "certificate",
    "certify",
    "check_dng_draws",
    "concentration_failure",
    "dng_noise",
    "gaussian_epsilon",
    "grid_sensitivity",
    "guaranteed_honest",
    "honest_contributors",
    "honest_split",
    "input_server_noise",
    "least_coins",
    "mechanism_class",
    "mechanism_names",
    "noise_rng",
    "noise_words",
    "privacy_record",
    "programs_refusal",
    "register",
    "release_sensitivity",
    "run_server_step",
    "skellam_epsilon",
    "skellam_mu",
    "smallest_n",
    "unregister",
    "zero_output_bound",
]

lazy_package(__name__)
