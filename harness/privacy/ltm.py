"""``ltm``: the paper's linear-transformation model, the clients add the noise.

Each client adds its noise to its row before sharing it (:class:`~harness.privacy.noise.NoiseSpec`,
calibrated by the paper's corollaries or the analytic Gaussian); the servers only
open the sum, which is checked bit for bit against the plaintext sketch of the
noisy rows. The certificate is the accountant's for the clients' noise as
released, rounded to the 2^-F lattice, over the honest draws each entry of T holds.
Its refusals are the clients' noise's, before any draw: noise that cannot be
encoded in the ring, bucket sums that could pass it, and noise whose certified
epsilon exceeds the requested one (each naming the --frac-bits, --clients or
calibration that fits).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness.clients import FixedPoint
from harness.errors import InputError
from harness.privacy.accounting import (
    accountant,
    concentration_failure,
    release_sensitivity,
    smallest_n,
)
from harness.privacy.certificates import central_sigma, certificate, honest_split
from harness.privacy.mechanism import Mechanism, Options, Request
from harness.privacy.noise import NOISE_GENERATOR, NoiseSpec

__all__ = ["Ltm", "certified_enough", "check_certified", "check_encodable", "check_ring",
           "passing_frac_bits", "privacy_record"]


@dataclass(frozen=True)
class Ltm(Mechanism):
    """The clients' noise ``noise`` (kind ``none``: no noise, for exact checks)."""

    noise: NoiseSpec

    name = "ltm"

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
    def clients_noise(cls, request: Request) -> NoiseSpec:
        r = request
        # --calibration is the Gaussian's; every other noise has its one (named corollary).
        calibration = r.calibration if r.noise == "gaussian" else "corollary"
        noise = NoiseSpec(r.noise, n=r.n, m=r.m, d=r.d, s=r.s, epsilon=r.epsilon,
                          delta=r.delta, eta=r.eta, t_prime=r.t_prime,
                          calibration=calibration, frac_bits=r.frac_bits)
        if noise.kind == "gaussian" and not noise.zero_output and not noise.epsilon <= 100:
            # The lattice's accountant (as the analytic calibration's range) stops at 100.
            raise InputError(f"--epsilon must lie in (0, 100] for gaussian noise, got "
                             f"{noise.epsilon:g}; no accountant here certifies a larger one")
        # Encodable first: absurd numbers (an epsilon of 1e-300) overflow the variance,
        # which that check words; the accountant needs a finite one.
        fp = FixedPoint(r.frac_bits)
        check_encodable(noise, fp, r.eta)
        check_ring(noise, fp, r.n, r.s, r.eta)
        check_certified(noise, r.n, r.s)
        return noise

    @classmethod
    def calibrate(cls, request: Request) -> Ltm:
        if request.clients_noise is not None:
            return cls(request.clients_noise)
        return cls(cls.clients_noise(request))

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


def check_encodable(noise: NoiseSpec, fp: FixedPoint, eta: float, suggest: bool = True) -> None:
    """Refuse parameters whose noisy entries cannot be encoded, before drawing any.

    Ten standard deviations past eta: no draw of a run ever reaches that, so a
    run this lets through does not fail on an entry later.
    """
    try:
        spread = math.sqrt(noise.variance)
    except (ZeroDivisionError, OverflowError, ValueError):
        spread = math.inf
    worst = (eta + 10 * spread) * fp.scale
    if not worst < 2.0**63:
        size = f"2^{math.log2(worst):.1f}" if math.isfinite(worst) else "infinity"
        raise InputError(f"fixed-point overflow: entries up to eta + 10 noise standard "
                         f"deviations encode to {size}, beyond the ring's bound 2^63; raise "
                         f"--epsilon, or lower --eta"
                         f"{_lower_frac_bits(noise, None, None) if suggest else ''}")


def _lower_frac_bits(noise: NoiseSpec, n: int | None, s: int | None) -> str:
    """", or --frac-bits F": the largest F below the run's that fits and is certified."""
    found = passing_frac_bits(noise, n, s, range(noise.frac_bits - 1, -1, -1))
    return "" if found is None else f", or use --frac-bits {found} (now {noise.frac_bits})"


def _passes(noise: NoiseSpec, n: int | None, s: int | None) -> bool:
    try:
        fp = FixedPoint(noise.frac_bits)
        check_encodable(noise, fp, noise.eta, suggest=False)
        if n is not None and s is not None:
            check_ring(noise, fp, n, s, noise.eta, suggest=False)
    except InputError:
        return False
    return certified_enough(noise)


def passing_frac_bits(noise: NoiseSpec, n: int | None, s: int | None,
                      candidates: range) -> int | None:
    """The first --frac-bits of ``candidates`` at which ``noise`` fits the ring and the
    accountant certifies it (Skellam is calibrated on the lattice: never searched)."""
    if noise.kind not in ("gaussian", "laplace"):
        return None
    for frac_bits in candidates:
        try:
            candidate = dataclasses.replace(noise, frac_bits=frac_bits)
        except InputError:
            continue
        if _passes(candidate, n, s):
            return frac_bits
    return None


def certified_enough(noise: NoiseSpec) -> bool:
    """The accountant's epsilon for the noise as released is at most the requested one."""
    if noise.kind == "none":
        return True
    # The analytic calibration's root finder leaves a relative 1e-9 either way.
    return certificate(noise)[0] <= noise.epsilon * (1 + 1e-6)


def check_certified(noise: NoiseSpec, n: int | None = None, s: int | None = None) -> None:
    """Refuse noise whose certified epsilon exceeds the requested one, before any draw.

    The certificate is for the noise as released, rounded to the 2^-F lattice. The
    Skellam calibration meets its epsilon by construction, and the analytic one
    once the lattice is fine enough for the noise (at small F the rounding can
    erase it: then the smallest F that passes is named); the paper's corollary
    does not at every d (its sigma^2 grows like d^2, the l2 sensitivity like
    sqrt(d): at d = 1, m = 100 it certifies epsilon 1.66 for a requested 1), and
    such a run would claim a guarantee it does not give.
    """
    if certified_enough(noise):
        return
    epsilon, _ = certificate(noise)
    asked = f"({noise.epsilon:g}, {noise.delta:g})-DP"
    if (noise.kind != "laplace"
            and concentration_failure(noise.n, noise.m, noise.s, noise.t_prime) >= noise.delta):
        raise InputError(
            f"the accountant certifies no epsilon for this {noise.kind} noise at n={noise.n}, "
            f"so the run would not be {asked}: too few clients hide each bucket (delta_E >= "
            f"delta); use --clients >= {smallest_n(noise.m, noise.s, noise.t_prime, noise.delta)}"
            " or raise --delta")
    figure = f"epsilon {epsilon:.4g}" if math.isfinite(epsilon) else "no epsilon"
    what = (f"the {noise.calibration} calibration's {noise.kind} noise, rounded to the "
            f"lattice at --frac-bits {noise.frac_bits}, certifies {figure}, above "
            f"the requested {noise.epsilon:g} (delta {noise.delta:g}, d={noise.d}, "
            f"s={noise.s}), so the run would not be {asked}")
    higher = passing_frac_bits(noise, n, s, range(noise.frac_bits + 1, 53))
    if higher is not None:
        raise InputError(f"{what}; the smallest --frac-bits it is certified at is {higher}")
    if noise.kind == "gaussian" and noise.calibration != "analytic":
        raise InputError(f"{what}; use --calibration analytic (it certifies --epsilon once "
                         "the lattice is fine enough)")
    raise InputError(f"{what}; raise --epsilon or the number of clients")


def check_ring(noise: NoiseSpec, fp: FixedPoint, n: int, s: int, eta: float,
               suggest: bool = True) -> None:
    """Refuse, before any draw, an n whose bucket sums could pass the ring's 2^63.

    A bucket sums at most s * n entries of |value| <= eta + 10 noise deviations;
    past 2^63 the revealed sum would wrap. (The bound actually met is checked
    again on the values drawn.)
    """
    spread = math.sqrt(noise.variance) if noise.kind != "none" else 0.0
    worst = s * n * (eta + 10 * spread) * fp.scale
    if worst >= 2.0**63:
        most = int(2.0**63 / (s * (eta + 10 * spread) * fp.scale))
        lower = _lower_frac_bits(noise, n, s) if suggest else ""
        raise InputError(f"n={n} clients could sum past the ring Z_2^64's bound 2^63 in one "
                         f"bucket (2^{math.log2(worst):.1f}); use --clients <= {most}{lower}")
