"""The bound each client's row is checked against inside the MPC (``--validate``).

A client secret-shares its row, so no server sees whether it lies. With
``--validate linf`` the MPC checks every entry of every row a client sends
(each of its s copies) against a bound B, with ``l2`` the row's squared norm
against B^2; a row that fails counts as zeros, and only the number of rejected
rows is revealed.

B is what an honest client can send, on the fixed-point lattice (2^-F steps):

- plain rows (``--noise none``, and the ``dng`` and ``central`` mechanisms, whose
  clients add no noise): every entry is round(x 2^F) with |x| <= eta, so B is
  eta on the lattice exactly (``l2``: its norm bound, sqrt(d) of it) and no honest
  client is ever rejected;
- noisy rows (the LTM): B = eta + t, where t bounds the client's own lattice
  noise (``linf``: per entry; ``l2``: its norm) so that the probability that any
  honest row of the run is rejected is at most 2^-40, by a union bound over the
  n s rows (and their d entries for ``linf``), from the noise's exact tail:
  rounded Gaussian, Skellam, or the differences of negative binomials that are
  Laplace's share on the lattice (whose tail is bounded by one binomial's).

What a lying client can still do: send any row within the bound, so move
each cell its row reaches by at most B (``linf``) or its row's norm by B
(``l2``), and nothing more; a row past the bound counts as zeros.

In Z_2^64 a squared norm wraps (2^32 squares to 0), so ``l2`` first checks
every entry against a power of two, more cheaply than a comparison: every entry
within 2^(m-1) passes, none past 1.5 2^m does, with m = :func:`precheck_bits`
(d) the largest whose d squares of 1.5 2^m stay below 2^63; then it compares
the exact squared norm with B^2. :func:`input_bound` refuses a B of 2^(m-1) or
more (an honest row's entry could fail the pre-check).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from harness.errors import InputError

__all__ = ["FAILURE_BITS", "VALIDATIONS", "InputBound", "input_bound", "noise_tail",
           "precheck_bits"]

VALIDATIONS = ("none", "linf", "l2")
# The probability that any honest row of a run is rejected: at most 2^-FAILURE_BITS.
FAILURE_BITS = 40
_RING_HALF = 2**63


class NoiseSpec(Protocol):
    """What the bound reads of the clients' noise (:class:`harness.privacy.NoiseSpec`,
    a layer above this one)."""

    @property
    def kind(self) -> str: ...
    @property
    def zero_output(self) -> bool: ...
    @property
    def lattice_sigma(self) -> float: ...
    @property
    def client_mu(self) -> float: ...
    @property
    def gamma_shape(self) -> float: ...
    @property
    def laplace_lattice_scale(self) -> float: ...


@dataclass(frozen=True)
class InputBound:
    """A run's check: B on the lattice (an integer), and where it comes from."""

    check: str  # "linf" or "l2"
    bound: int  # B, in 2^-F steps: per entry (linf) or of the row's norm (l2)
    data_bound: int  # the honest row's part: eta on the lattice (l2: its norm bound)
    noise_bound: int  # the client noise's part (0 for plain rows)
    z: float | None  # noise_bound in the noise's standard deviations (None: no noise)
    frac_bits: int

    def record(self) -> dict:
        """result.json's ``validation`` fields of the bound."""
        return {"check": self.check, "bound": self.bound / 2.0**self.frac_bits,
                "bound_lattice": self.bound, "noise_bound_lattice": self.noise_bound,
                "z": self.z, "honest_rejection_bound": 2.0**-FAILURE_BITS}


def precheck_bits(d: int) -> int:
    """m of ``l2``'s entry pre-check (the programs' PRE): the largest with every row
    of d entries within 1.5 2^m having its squared norm below 2^63, exact in the ring."""
    return max(m for m in range(1, 32) if 9 * d * 2 ** (2 * m) < 2**65)


def noise_tail(noise: NoiseSpec, t: int) -> float:
    """An upper bound on P(|e| > t) for one entry e of a client's lattice noise (in
    2^-F steps), from scipy's exact distributions."""
    from scipy import stats

    if noise.kind == "none" or noise.zero_output:
        return 0.0 if t >= 0 else 1.0
    if noise.kind == "gaussian":
        # round(g) exceeds t (an integer) exactly when |g| >= t + 1/2
        return float(2 * stats.norm.sf((t + 0.5) / noise.lattice_sigma))
    if noise.kind == "skellam":
        half = noise.client_mu / 2
        return float(2 * stats.skellam.sf(t, half, half))
    # Laplace: X - Y with X, Y negative binomial; X - Y > t needs X > t (Y >= 0).
    p = -math.expm1(-1.0 / noise.laplace_lattice_scale)
    return float(2 * stats.nbinom.sf(t, noise.gamma_shape, p))


def _noise_std(noise: NoiseSpec) -> float:
    if noise.kind == "gaussian":
        return noise.lattice_sigma
    if noise.kind == "skellam":
        return math.sqrt(noise.client_mu)
    p = -math.expm1(-1.0 / noise.laplace_lattice_scale)
    return math.sqrt(2 * noise.gamma_shape * (1 - p)) / p  # two NB(k, p) variances


def _smallest(tail: Callable[[int], float], allowed: float, guess: float) -> int:
    """The least integer t >= 0 with tail(t) <= allowed (tail decreasing in t)."""
    if tail(0) <= allowed:
        return 0
    hi = max(1, math.ceil(guess))
    while tail(hi) > allowed:
        hi *= 2
    bad = 0  # tail(bad) > allowed
    while hi - bad > 1:
        mid = (bad + hi) // 2
        if tail(mid) <= allowed:
            hi = mid
        else:
            bad = mid
    return hi


def input_bound(check: str, noise: NoiseSpec | None, eta: float, frac_bits: int,
                rows: int, d: int) -> InputBound:
    """The bound B of ``check`` for ``rows`` rows (n s) of ``d`` entries, each within
    ``eta`` and carrying ``noise`` (None or kind ``none``: plain rows), such that an
    honest run rejects a row with probability at most 2^-:data:`FAILURE_BITS`.

    Refuses (:class:`InputError`) a bound the ring cannot check: 2B (``linf``) at
    2^63 or more, where a lying client's row could wrap past it, or (``l2``) B at
    2^(m-1) or more, m = :func:`precheck_bits` (d), where an honest entry could fail
    the pre-check that keeps the squared norm from wrapping.
    """
    if check not in ("linf", "l2"):
        raise ValueError(f"no bound for check {check!r}")
    scale = 2.0**frac_bits
    entry = round(eta * scale)  # |round(x 2^F)| <= round(eta 2^F) for |x| <= eta
    allowed = 2.0**-FAILURE_BITS / max(1, rows)
    noisy = noise is not None and noise.kind != "none" and not noise.zero_output
    t, z = 0, None
    if noisy:
        assert noise is not None
        std = _noise_std(noise)
        if check == "linf":
            t = _smallest(lambda u: noise_tail(noise, u), allowed / d, 10 * std)
        elif noise.kind == "gaussian":
            from scipy import stats

            # |round(g)|_2 <= |g|_2 + sqrt(d)/2, and |g|_2 / sigma is chi with d degrees.
            q = float(stats.chi.isf(allowed, d))
            t = math.ceil(noise.lattice_sigma * q * (1 + 1e-12) + math.sqrt(d) / 2)
        else:
            # Every entry within its own bound at probability allowed/d: the norm within
            # sqrt(d) of it.
            per_entry = _smallest(lambda u: noise_tail(noise, u), allowed / d, 10 * std)
            t = math.ceil(math.sqrt(d) * per_entry)
        z = t / std if std > 0 else None
    data = entry if check == "linf" else math.ceil(math.sqrt(d) * entry)
    bound = data + t
    fits = 2 * bound < _RING_HALF if check == "linf" else bound < 2 ** (precheck_bits(d) - 1)
    if not fits:
        way = ("raise --epsilon (less noise), lower --frac-bits or --dim"
               if check == "l2" else "raise --epsilon (less noise) or lower --frac-bits")
        kind = noise.kind if noise is not None else "none"
        raise InputError(
            f"--validate {check}: an honest row's bound B = 2^{math.log2(bound):.1f} lattice "
            f"steps does not fit the 64-bit ring's check ({kind} noise this wide swamps "
            f"eta = {eta:g}, and a lying row would wrap past it); {way}, or drop --validate")
    return InputBound(check, bound, data, t, z, frac_bits)
