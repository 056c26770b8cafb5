"""The servers' noise calibrated as a run calibrates it: through the mechanisms' registry."""

from __future__ import annotations

from harness.privacy import Mechanism, Request, mechanism_class


def server_noise(name: str, *, servers: int, corrupt: int, eta: float, s: int, d: int, m: int,
                 epsilon: float, delta: float, frac_bits: int, clients: int = 1000,
                 grid_bits: int | None = None) -> Mechanism:
    """Mechanism ``name`` for ``clients`` clients, its noise certified (or refused)."""
    return mechanism_class(name).calibrate(Request(
        servers=servers, corrupt=corrupt, n=clients, d=d, s=s, m=m, eta=eta,
        frac_bits=frac_bits, epsilon=epsilon, delta=delta, grid_bits=grid_bits,
        coins={"technique": "edabits", "summands": 0}))
