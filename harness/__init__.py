"""ltm-harness: differentially private secure sketching on MP-SPDZ.

The public API; everything else lives in modules of its own.
"""

from harness._version import __version__
from harness.encoding import FixedPoint
from harness.errors import InputError, LtmError, MpSpdzError, PartyError, VerificationError
from harness.hosts import Inventory, load_inventory
from harness.mpspdz import MpSpdz, find_mpspdz
from harness.noise import NoiseSpec
from harness.reproduce import ReproduceConfig, reproduce
from harness.run import RunConfig, run
from harness.sharing import share
from harness.sketch import Sketch

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
