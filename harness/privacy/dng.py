"""``dng``: distributed noise generation, each server's own noise input into the MPC.

Every server draws its own noise for each of the m x d cells and inputs it into
the MPC (its :class:`~harness.privacy.mechanism.ServerStep`, run where the server
runs). The noise lives on the fixed-point lattice 2^-F: Skellam,
Poisson(mu_s/2) - Poisson(mu_s/2) per cell and server, so that any sum of
servers' draws is again Skellam. Against the t corrupt servers the protocol
tolerates, the S - t honest ones must suffice: each adds mu_s = mu / (S - t),
where mu is the least Skellam variance that the privacy loss distribution of the
Skellam pmf certifies at (epsilon, delta) for the s d entries a client moves,
each by its lattice sensitivity (:mod:`harness.privacy.skellam`, which says why
smaller moves are covered; above a variance of 1e6 lattice steps^2 the pmf in
closed form, :mod:`harness.privacy.skellam_pld`, at any variance dng draws; the
Renyi bound :func:`~harness.privacy.accounting.skellam_mu` only for a delta below
what the composed PLD resolves; ``accountant`` says which). A corrupt server's
own draw is known to the adversary and subtracted (post-processing), but a
cheating server can still spoil the output: it may input anything as its noise.

Its noise is known where it was drawn, so its release is also checked exactly:
each server's digest of its noise (:mod:`harness.clients.digest`) must add up to
the digest of the release minus the plaintext sketch, in Z_2^64 (``digest_match``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from harness.clients import (
    MAX_POISSON_MEAN,
    digest_weights,
    format_integers,
    noise_digest,
    skellam,
    weighted_digest,
)
from harness.errors import InputError
from harness.fileio import open_private, private_dir
from harness.privacy.accounting import release_sensitivity, skellam_epsilon, skellam_mu
from harness.privacy.certificates import calibrated
from harness.privacy.mechanism import Check, Request, ServerStep
from harness.privacy.noise import noise_rng
from harness.privacy.noise_check import as_signed, method_words, opened_release, release_statistics
from harness.privacy.servers import ServersNoise, central_sigma_for
from harness.privacy.skellam import (
    EXACT_PMF_MAX_MU,
    skellam_pld_epsilon,
    skellam_pld_mu,
    skellam_route,
)

__all__ = ["Dng", "check_dng_draws", "dng_noise", "input_server_noise"]

_NOISE_BLOCK = 1 << 20  # cells a dng server draws and writes at once
# Above this total variance (lattice steps^2) Skellam is Normal to far below what a
# chi-square test over a few thousand cells can see.
_SKELLAM_EXACT = 1e6


@dataclass(frozen=True)
class Dng(ServersNoise):
    """Skellam noise on the lattice 2^-F, ``server_mu`` per server and cell (in
    steps^2), of which the ``honest`` of ``servers`` servers' draws are certified."""

    servers: int
    honest: int
    server_mu: float

    name = "dng"

    @classmethod
    def calibrated(cls, request: Request) -> Dng:
        r = request
        noise = dng_noise(servers=r.servers, honest=r.servers - r.corrupt, eta=r.eta, s=r.s,
                          d=r.d, epsilon=r.epsilon, delta=r.delta, frac_bits=r.frac_bits)
        check_dng_draws(noise)
        # The servers' noise adds to the revealed sum: ten deviations, as check_ring's.
        cls.check_sketch_ring(r, 10 * noise.std * 2.0**r.frac_bits)
        return noise

    @property
    def skellam_route(self) -> str:
        """``pld`` if the exact Skellam PLD certified it, ``rdp`` if the Renyi bound."""
        return skellam_route(self.server_mu * self.honest)

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """One server's noise per cell, int64 lattice steps."""
        # numpy's own Poisson is biased at the means dng asks for (harness.clients.poisson)
        return skellam(rng, self.server_mu, shape)

    # -- the servers' step: each draws its own, where it runs

    def server_step(self, shape: tuple[int, int]) -> ServerStep:
        return ServerStep(self.name, self.to_json(), shape,
                          "--mechanism dng draws each server's noise there")

    @classmethod
    def step_params(cls, text: str) -> Dng:
        what = "PARAMS is not the noise's parameters as the runner writes them (Dng.to_json)"
        try:
            fields = json.loads(text)
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            noise = cls(**fields)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{what}: {exc}") from exc
        mu = noise.server_mu
        if not isinstance(mu, int | float) or isinstance(mu, bool) or not math.isfinite(mu) \
                or mu < 0:
            raise InputError(f"PARAMS's server_mu is {mu!r}; a variance is a finite number >= 0")
        return noise

    def run_step(self, shape: tuple[int, int], path: str | os.PathLike[str], *,
                 append: bool, digest_key: bytes) -> tuple[int, int]:
        return input_server_noise(self, shape, path, append=append, digest_key=digest_key)

    # -- the program

    def template_params(self, reveal_noise: bool) -> dict[str, object]:
        return {"noise_fragment": "servers_noise.mpc.j2",
                "noise_words": " with the servers' noise (dng)",
                "revealed": ["noise"] if reveal_noise else []}

    # -- the release

    def verify(self, expected: np.ndarray, printed: Mapping[int, np.ndarray],
               digest: tuple[bytes, int] | None = None) -> Check:
        first, differ, plain, out = opened_release(expected, printed)
        errors = (out - plain).astype(np.int64)  # wraps as the ring does
        digest_match = None
        if digest is not None:
            key, servers = digest
            digest_match = noise_digest(errors, key) == servers
        variance = self.servers * self.server_mu
        cdf = _skellam_cdf(variance)
        exact = len(first) > 1
        mismatches = (int(np.count_nonzero(out != plain + as_signed(first[1]).ravel()))
                      if exact else 0)
        stats = release_statistics(errors, 0.0, variance, cdf, units="lattice steps 2^-F",
                                   exact=exact, digest_match=digest_match)
        return Check(differ + mismatches, stats,
                     method_words(self.name, "the plaintext sketch", exact,
                                  digest_match is not None))

    def accountant(self) -> str:
        servers = "server's" if self.honest == 1 else "servers'"
        if self.skellam_route == "pld":
            pmf = ("the exact Skellam pmf" if self.server_mu * self.honest
                   <= EXACT_PMF_MAX_MU else "the Skellam pmf in closed form (Debye's "
                   "expansion), outcomes merged by loss")
            return (f"dp-accounting PLD from {pmf} (pessimistic), over the "
                    f"entries one client moves, for the {self.honest} honest {servers} "
                    "noise")
        return (f"dp-accounting RDP (Skellam, Agarwal et al. 2021, Thm 3.5) for the "
                f"{self.honest} honest {servers} noise (its variance is beyond the "
                "exact pmf's range)")

    @property
    def calibration(self) -> str:
        return f"skellam-{self.skellam_route}"

    def parameters(self) -> dict:
        return {"servers": self.servers, "honest_servers": self.honest,
                "server_mu": self.server_mu, "frac_bits": self.frac_bits,
                "generator": "each server's randomgen.AESCounter (key from os.urandom)"}


def _skellam_cdf(variance: float) -> Callable[[np.ndarray], np.ndarray]:
    from scipy import stats

    if variance <= _SKELLAM_EXACT:
        return stats.skellam(variance / 2, variance / 2).cdf

    def cdf(x: np.ndarray) -> np.ndarray:
        return stats.norm.cdf((x + 0.5) / math.sqrt(variance))
    return cdf


@dataclass(frozen=True)
class _DngRequest:
    """What dng's calibration (``value`` epsilon) or certificate (``value`` the honest
    servers' total variance) depends on: its key among the remembered certificates
    (``honest`` too: a calibration is remembered only where its draws are not refused)."""

    steps: int
    entries: int
    value: float
    delta: float
    honest: int


def dng_noise(*, servers: int, honest: int, eta: float, s: int, d: int, epsilon: float,
              delta: float, frac_bits: int) -> Dng:
    """Skellam noise that the ``honest`` of ``servers`` servers' draws certify: the
    least variance the Skellam PLD certifies (the Renyi bound's where it cannot).
    Refused in one line (:func:`check_dng_draws`) before anything is remembered where
    no exact Poisson draw reaches it."""
    sens = release_sensitivity(eta, s, d, frac_bits)
    steps = int(sens.entry)

    def calibrate() -> float:
        mu = skellam_pld_mu(steps, sens.entries, epsilon, delta)
        if mu is None:
            mu = skellam_mu(sens, epsilon, delta)
        check_dng_draws(Dng(epsilon, delta, 0.0, 0.0, 0.0, frac_bits, servers=servers,
                            honest=honest, server_mu=mu / honest))
        return mu

    # the PLD's bisection takes seconds: remembered across runs
    mu = calibrated(_DngRequest(steps, sens.entries, epsilon, delta, honest), "dng mu",
                    calibrate)
    server_mu = mu / honest
    if server_mu * honest < mu:  # the honest servers' total is at least the calibrated mu
        server_mu = math.nextafter(server_mu, math.inf)
    total = server_mu * honest
    certified = calibrated(
        _DngRequest(steps, sens.entries, total, delta, honest), "dng certificate",
        lambda: (skellam_pld_epsilon(total, steps, sens.entries, delta)
                 if skellam_route(total) == "pld" else skellam_epsilon(total, sens, delta)))
    std = math.sqrt(servers * server_mu) / 2.0**frac_bits
    return Dng(epsilon, delta, certified, std, central_sigma_for(eta, s, d, epsilon, delta),
               frac_bits, servers=servers, honest=honest, server_mu=server_mu)


def check_dng_draws(noise: Dng) -> None:
    """Refuse, in one line, dng noise whose Poissons no exact draw reaches: each server
    draws two Poisson(server_mu / 2) per cell, exact up to :data:`MAX_POISSON_MEAN`."""
    mean = noise.server_mu / 2
    if mean <= MAX_POISSON_MEAN:
        return
    raise InputError(
        f"--mechanism dng needs each server to draw Poissons of mean 2^{math.log2(mean):.1f} "
        f"per cell for epsilon {noise.epsilon:g}, delta {noise.delta:g} at --frac-bits "
        f"{noise.frac_bits}, beyond the 2^{math.log2(MAX_POISSON_MEAN):.0f} an exact draw "
        "reaches; raise --epsilon or --delta, or lower --frac-bits, --eta, --dim or "
        "--sparsity")


def input_server_noise(noise: Dng, shape: tuple[int, int], path: str | os.PathLike[str], *,
                       append: bool, digest_key: bytes) -> tuple[int, int]:
    """One server's own noise for every cell, drawn where this runs from a fresh
    CSPRNG (:func:`~harness.privacy.noise_rng`) and written as its private input to the
    MPC: appended to ``path`` after its aggregate (``append``), else the whole file,
    0600 in a 0700 directory. Returns the number of cells drawn and the noise's digest
    under the run's public ``digest_key`` (:mod:`harness.clients.digest`), by which the
    release is checked exactly; nothing else of the noise."""
    rng = noise_rng()
    rows, cols = shape
    weights = digest_weights(digest_key, rows * cols)
    digest = 0
    # A block of rows at a time: what is held stays small however many cells there are.
    step = max(1, _NOISE_BLOCK // max(cols, 1))
    blocks: Iterator[np.ndarray | None] = (
        noise.sample(rng, (min(step, rows - start), cols)) for start in range(0, rows, step))
    drawn = next(blocks, None)  # noise that cannot be drawn here is refused before any file opens
    done = 0
    # The run's own directory, never made here; the file itself, never through a link.
    private_dir(os.path.dirname(os.path.abspath(path)), create=False)
    with open_private(path, "ab" if append else "wb", follow=False) as fh:
        while drawn is not None:
            fh.write(format_integers(drawn.ravel()))
            digest += weighted_digest(drawn, weights[done:done + drawn.size])
            done += drawn.size
            del drawn  # nothing of a server's noise is kept
            drawn = next(blocks, None)
    return done, digest % (1 << 64)
