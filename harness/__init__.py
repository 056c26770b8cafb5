"""ltm-harness: differentially private secure sketching on MP-SPDZ.

The package follows the data's path; each layer imports only those before it
(``tests/test_layers.py`` keeps it so, ``ARCHITECTURE.md`` explains it):

- ``errors``, ``fileio``, ``_version``: small pieces every layer shares;
- :mod:`harness.clients`: the clients' side: sketch, samplers, encoding, sharing, layout;
- :mod:`harness.privacy`: the noise's mechanisms, calibrations, accountants and checks;
- :mod:`harness.engine`: the MPC servers: MP-SPDZ, programs, local parties;
- :mod:`harness.remote`: parties on other machines over SSH;
- :mod:`infra` (a sibling package): the cloud machines themselves;
- :mod:`harness.experiments`: one verified run, the paper's sweeps and their reports;
- :mod:`harness.analyst`: what an analyst does with a revealed sketch;
- :mod:`harness.cli`: the ``ltm`` command.

The names below are the public API. They load on first use, so that importing
``harness.errors`` (as every layer does) does not pull in the whole tree.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness._version import __version__
from harness.errors import InputError, LtmError, MpSpdzError, PartyError, VerificationError

_LAZY = {
    "FixedPoint": "harness.clients.encoding",
    "NoiseSpec": "harness.privacy.noise",
    "Sketch": "harness.clients.sketch",
    "share": "harness.clients.sharing",
    "MpSpdz": "harness.engine.mpspdz",
    "find_mpspdz": "harness.engine.mpspdz",
    "Inventory": "harness.remote.hosts",
    "load_inventory": "harness.remote.hosts",
    "ReproduceConfig": "harness.experiments.config",
    "reproduce": "harness.experiments.reproduce",
    "RunConfig": "harness.experiments.run",
    "run": "harness.experiments.run",
}

__all__ = [
    "FixedPoint",
    "InputError",
    "Inventory",
    "LtmError",
    "MpSpdz",
    "MpSpdzError",
    "NoiseSpec",
    "PartyError",
    "ReproduceConfig",
    "RunConfig",
    "Sketch",
    "VerificationError",
    "__version__",
    "find_mpspdz",
    "load_inventory",
    "reproduce",
    "run",
    "share",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    # Not cached here: the defining module's attribute stays the one truth (a name
    # patched there and restored must not stay patched here).
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
