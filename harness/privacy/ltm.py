"""``ltm``: the paper's linear-transformation model, the clients add the noise.

Each client adds its noise to its row before sharing it (:class:`~harness.privacy.noise.NoiseSpec`,
calibrated by the paper's corollaries or the analytic Gaussian); the servers only
open the sum, which is checked bit for bit against the plaintext sketch of the
noisy rows. The certificate is the accountant's for the clients' noise as
released, rounded to the 2^-F lattice, over the honest draws each entry of T holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness.errors import InputError
from harness.privacy.accounting import accountant, release_sensitivity
from harness.privacy.certificates import central_sigma, certificate, honest_split
from harness.privacy.mechanism import Mechanism, Options, Request
from harness.privacy.noise import NOISE_GENERATOR, NoiseSpec

__all__ = ["Ltm", "privacy_record"]


@dataclass(frozen=True)
class Ltm(Mechanism):
    """The clients' noise ``noise`` (kind ``none``: no noise, for exact checks)."""

    noise: NoiseSpec

    name = "ltm"
    clients_add_noise = True

    @classmethod
    def check_options(cls, options: Options) -> None:
        super().check_options(options)
        if options.grid_bits is not None:
            raise InputError("--grid-bits is the central mechanism's grid; add --mechanism "
                             "central or drop it")
        if options.reveal_noise:
            raise InputError("reveal_noise reveals the servers' noise, and --mechanism ltm "
                             "has none; use --mechanism dng or central")

    @classmethod
    def calibrate(cls, request: Request) -> Ltm:
        return cls(request.clients_noise)

    @classmethod
    def noise_words(cls, noise: Mapping[str, object]) -> str:
        return str(noise.get("kind"))

    def record(self) -> dict:
        return privacy_record(self.noise)


def privacy_record(noise: NoiseSpec) -> dict:
    """result.json's ``privacy``: what was asked, and what the accountant certifies for
    the noise drawn (the run was refused before drawing if that were more), with the
    noise's standard deviation per entry of T against the central Gaussian's."""
    if noise.kind == "none":
        return {"mechanism": Ltm.name, "requested_epsilon": None, "requested_delta": None,
                "certified_epsilon": None, "certified_delta": None,
                "accountant": accountant(noise), "calibration": None, "generator": None,
                "on_lattice": True, "noise_std": 0.0, "central_std": None, "std_ratio": None}
    epsilon, delta = certificate(noise)
    # the honest draws the accountant counted, from the same cache as its certificate
    honest = (honest_split(noise)[0] if noise.kind in ("gaussian", "skellam")
              and not noise.zero_output else None)
    calibration = {"gaussian": noise.calibration, "skellam": "skellam-rdp",
                   "laplace": "corollary"}[noise.kind]
    # A bucket holds n s / m of the clients' draws on average (the accountant counts
    # only its guaranteed honest ones).
    std = math.sqrt(noise.n * noise.s / noise.m * noise.variance)
    central = central_sigma(release_sensitivity(noise.eta, noise.s, noise.d).l2,
                            noise.epsilon, noise.delta)
    return {"mechanism": Ltm.name, "requested_epsilon": noise.epsilon,
            "requested_delta": noise.delta, "noise_std": std, "central_std": central,
            "std_ratio": std / central,
            # JSON has no infinity: None is "nothing certified".
            "certified_epsilon": epsilon if math.isfinite(epsilon) else None,
            "certified_delta": delta, "accountant": accountant(noise, honest),
            "calibration": calibration, "generator": NOISE_GENERATOR,
            # the certificate is for the noise rounded to the 2^-F lattice, as released
            "on_lattice": True}
