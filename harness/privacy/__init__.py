"""Noise and what it buys: the mechanisms, their calibrations and accountants.

Owns the mechanisms that decide who adds the noise (:mod:`.mechanisms`): the
clients (the LTM), each server (``dng``) or the MPC itself (``central``); the
clients' noise and its calibration by the paper's corollaries (:mod:`.noise`);
the accountants (:mod:`.accounting`, the lattice's in :mod:`.lattice`, the
exact Skellam's in :mod:`.skellam`, the binomial's in :mod:`.binomial`) and
their certificates kept across runs (:mod:`.certificates`); and the check of a
noisy release against the noise certified (:mod:`.noise_check`).

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
    from harness.privacy.certificates import central_sigma, certificate, honest_split
    from harness.privacy.mechanisms import (
        MECHANISMS,
        ROUNDING_COINS,
        CoinLayout,
        ServerNoise,
        check_dng_draws,
        input_server_noise,
        server_noise,
    )
    from harness.privacy.noise import (
        CALIBRATIONS,
        NOISE_GENERATOR,
        NOISE_KINDS,
        NoiseSpec,
        noise_rng,
        zero_output_bound,
    )
    from harness.privacy.noise_check import check_noise_release, method

__all__ = [
    "CALIBRATIONS",
    "MAX_COINS",
    "MECHANISMS",
    "NOISE_GENERATOR",
    "NOISE_KINDS",
    "ROUNDING_COINS",
    "CoinLayout",
    "NoiseSpec",
    "Sensitivity",
    "ServerNoise",
    "accountant",
    "analytic_gaussian_sigma",
    "analytic_split",
    "binomial_epsilon",
    "binomial_failure",
    "binomial_honest",
    "central_sigma",
    "certificate",
    "certify",
    "check_dng_draws",
    "check_noise_release",
    "concentration_failure",
    "gaussian_epsilon",
    "grid_sensitivity",
    "guaranteed_honest",
    "honest_contributors",
    "honest_split",
    "input_server_noise",
    "least_coins",
    "method",
    "noise_rng",
    "release_sensitivity",
    "server_noise",
    "skellam_epsilon",
    "skellam_mu",
    "smallest_n",
    "zero_output_bound",
]

lazy_package(__name__)
