"""The clients' side: from a data row to the share files each server receives.

Owns the public sketch (:mod:`.sketch`), the noise each client adds
(:mod:`.noise`), fixed-point encoding into Z_2^64 (:mod:`.encoding`),
secret sharing (:mod:`.sharing`), the public file layout the programs read
(:mod:`.layout`), the streaming preparation of all parties' inputs
(:mod:`.prepare`) and the one loader for data matrices (:mod:`.matrices`).

May import: ``harness.errors``, ``harness.fileio``, ``harness._version``. Nothing
here knows about MP-SPDZ processes, hosts, sweeps or the command line.
"""

from harness.clients.encoding import FixedPoint
from harness.clients.layout import Layout
from harness.clients.matrices import check_matrix, load_matrix, synthetic_matrix
from harness.clients.noise import NOISE_KINDS, NoiseSpec, noise_rng
from harness.clients.prepare import Prepared, prepare_inputs
from harness.clients.sharing import share
from harness.clients.sketch import Sketch, check_dimensions

__all__ = [
    "NOISE_KINDS",
    "FixedPoint",
    "Layout",
    "NoiseSpec",
    "Prepared",
    "Sketch",
    "check_dimensions",
    "check_matrix",
    "load_matrix",
    "noise_rng",
    "prepare_inputs",
    "share",
    "synthetic_matrix",
]
