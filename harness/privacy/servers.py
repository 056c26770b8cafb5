"""What the mechanisms whose servers add the noise share (``dng``, ``central``).

The release is the m x d sketch T; one client moves s d of its entries by at
most 2 eta each (:func:`harness.privacy.accounting.release_sensitivity`). With
the servers' noise nobody needs the clients', so no concentration of honest
clients enters (no delta_E): the servers' noise alone is certified, and the
clients send plain rows. Every such mechanism reports its noise's standard
deviation per entry of T against the central Gaussian's for the same (epsilon,
delta, l2 sensitivity): 1.0 is the central model's analytic Gaussian mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from harness.errors import InputError
from harness.privacy.accounting import release_sensitivity
from harness.privacy.certificates import central_sigma
from harness.privacy.mechanism import Mechanism, Options, Request

__all__ = ["ServersNoise", "central_sigma_for"]


def central_sigma_for(eta: float, s: int, d: int, epsilon: float, delta: float) -> float:
    """The central Gaussian's sigma for the release's l2 sensitivity."""
    # remembered with the LTM's (the same figure): a later run loads no dp-accounting
    return central_sigma(release_sensitivity(eta, s, d).l2, epsilon, delta)


@dataclass(frozen=True)
class ServersNoise(Mechanism):
    """Noise the servers add inside the ``local`` program's MPC. ``std`` and
    ``central_std`` are per entry of T, in reals."""

    epsilon: float
    delta: float
    certified_epsilon: float
    std: float
    central_std: float
    frac_bits: int

    programs: ClassVar[tuple[str, ...] | None] = ("local",)
    #: What a bucket's sum must stay below, and where that bound is met (in words).
    ring_limit: ClassVar[float] = 2.0**63
    ring_words: ClassVar[str] = "reveals in the ring Z_2^64"
    #: Whether the sums are checked against the ring before the noise is calibrated.
    ring_first: ClassVar[bool] = False

    @property
    def std_ratio(self) -> float:
        return self.std / self.central_std

    @classmethod
    def check_options(cls, options: Options) -> None:
        super().check_options(options)
        if options.noise not in ("gaussian", "none"):
            raise InputError(f"--noise {options.noise} is the clients' noise of the LTM; with "
                             f"--mechanism {cls.name} the clients send noise-free rows: "
                             "drop --noise or use --mechanism ltm")
        cls.check_grid(options)

    @classmethod
    def check_grid(cls, options: Options) -> None:
        if options.grid_bits is not None:
            raise InputError("--grid-bits is the central mechanism's grid; use --mechanism "
                             "central or drop it")

    @classmethod
    def calibrate(cls, request: Request) -> ServersNoise:
        r = request
        if round(r.eta * 2.0**r.frac_bits) < 1:  # no sensitivity to calibrate the noise to
            least = next((f for f in range(53) if round(r.eta * 2.0**f) >= 1), None)
            fix = (f"use --frac-bits {least} or more" if least is not None
                   else "rescale the data to a larger --eta")
            raise InputError(f"--eta {r.eta:g} is below half a step of the lattice at "
                             f"--frac-bits {r.frac_bits}: every value would encode to 0, and "
                             f"--mechanism {cls.name} has no sensitivity to calibrate its "
                             f"noise to; {fix}")
        if cls.ring_first or r.s * r.eta * 2.0**r.frac_bits >= cls.ring_limit:
            # where the noise can be computed first, its own check names the larger change
            cls.check_sketch_ring(r, 0.0)
        for name, value, low, high in (("epsilon", r.epsilon, 1e-3, 100.0),
                                       ("delta", r.delta, 1e-30, 0.5)):
            if not low <= value <= high:
                raise InputError(f"--{name} must lie in [{low:g}, {high:g}] for --mechanism "
                                 f"{cls.name}, got {value}")
        return cls.calibrated(r)

    @classmethod
    def calibrated(cls, request: Request) -> ServersNoise:
        """The noise for ``request`` once the shared checks passed."""
        raise NotImplementedError

    @classmethod
    def check_sketch_ring(cls, r: Request, noise: float) -> None:
        """Refuse a run whose bucket sums (n s eta 2^F lattice steps at most, plus
        ``noise`` steps of the servers') could reach :attr:`ring_limit`, naming what
        fits."""
        limit = cls.ring_limit
        one = r.s * r.eta * 2.0**r.frac_bits  # one client's most in a bucket, in steps
        if r.n * one + noise < limit:
            return
        what = (f"n={r.n} clients could sum past 2^{math.log2(limit):.0f} in one bucket (2^"
                f"{math.log2(r.n * one + noise):.1f} at --eta {r.eta:g}, --frac-bits "
                f"{r.frac_bits}), beyond what --mechanism {cls.name} {cls.ring_words}")
        fixes = []
        most = math.ceil((limit - noise) / one) - 1  # the most clients whose sums stay below
        if most >= 1:
            fixes.append(f"--clients <= {most}")
        bits = next((f for f in range(r.frac_bits - 1, -1, -1)
                     if r.n * r.s * r.eta * 2.0**f + noise * 2.0**(f - r.frac_bits) < limit),
                    None)
        if bits is not None:
            fixes.append(f"--frac-bits {bits}")
        fixes.append("a smaller --eta (rescale the data)")
        raise InputError(f"{what}; use {', or '.join(fixes)}")

    @classmethod
    def noise_words(cls, noise: Mapping[str, object]) -> str:
        return f"{cls.name} (the servers')"

    def record(self) -> dict:
        return {"mechanism": self.name, "requested_epsilon": self.epsilon,
                "requested_delta": self.delta, "certified_epsilon": self.certified_epsilon,
                "certified_delta": self.delta, "accountant": self.accountant(),
                "calibration": self.calibration, "noise_std": self.std,
                "central_std": self.central_std, "std_ratio": self.std_ratio,
                **self.parameters()}

    def accountant(self) -> str:
        raise NotImplementedError

    @property
    def calibration(self) -> str:
        raise NotImplementedError

    def parameters(self) -> dict:
        """result.json's ``privacy`` fields of this mechanism's own."""
        return {}
