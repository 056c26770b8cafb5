"""The clients' side: from a data row to the values each client shares.

Owns the public sketch (:mod:`.sketch`), the noise each client adds
(:mod:`.noise`) and the privacy it buys (:mod:`.privacy`), fixed-point
encoding into Z_2^64 (:mod:`.encoding`),
secret sharing (:mod:`.sharing`), the public file layout the programs read
(:mod:`.layout`), share files and input text (:mod:`.prepare`), seeded shares
(:mod:`.seeded`) and their AES-256-CTR generator (:mod:`.keystream`), and the one
loader for data matrices (:mod:`.matrices`). How the shares travel to the servers
chunk by chunk is :mod:`harness.stream`.

May import: ``harness.errors``, ``harness.fileio``, ``harness._version``. Nothing
here knows about MP-SPDZ processes, hosts, sweeps or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.clients.digest import (
        DIGEST_KEY_BYTES,
        digest_weights,
        noise_digest,
        weighted_digest,
    )
    from harness.clients.encoding import FixedPoint
    from harness.clients.gaussian import (
        AesWords,
        BlockNoise,
        GaussianNoise,
        LatticeGaussian,
        NumpyGaussian,
        compiled_gaussian,
        gaussian_noise,
        vector_gaussian,
    )
    from harness.clients.keystream import SEED_BYTES, expand, libcrypto
    from harness.clients.layout import CHUNK_SHARES, choose_block_rows
    from harness.clients.matrices import (
        ArrayRows,
        NpyRows,
        Rows,
        SyntheticRows,
        all_rows,
        check_matrix,
        load_matrix,
        npy_error,
        open_rows,
    )
    from harness.clients.native import find_library, load_library
    from harness.clients.picks import (
        CompiledLoops,
        NumpyLoops,
        SketchLoops,
        compiled_sketch,
        sketch_loops,
    )
    from harness.clients.poisson import EXACT_BELOW, MAX_POISSON_MEAN, poisson, skellam
    from harness.clients.prepare import (
        Prepared,
        format_integers,
        read_share_file,
        tamper_share_file,
        tamper_text_file,
        write_share_file,
    )
    from harness.clients.seeded import Components, components
    from harness.clients.sharing import (
        ADDITIVE,
        FORMATS,
        MALICIOUS_REPLICATED,
        REPLICATED,
        ShareFormat,
        share,
        share_format,
    )
    from harness.clients.sketch import EXPORT_LIMIT, Sketch, check_dimensions
    from harness.clients.validation import (
        FAILURE_BITS,
        VALIDATIONS,
        InputBound,
        input_bound,
        noise_tail,
        precheck_bits,
    )

__all__ = [
    "CHUNK_SHARES",
    "Components",
    "DIGEST_KEY_BYTES",
    "digest_weights",
    "noise_digest",
    "weighted_digest",
    "SEED_BYTES",
    "choose_block_rows",
    "expand",
    "find_library",
    "load_library",
    "ADDITIVE",
    "ArrayRows",
    "EXPORT_LIMIT",
    "NpyRows",
    "Rows",
    "SyntheticRows",
    "all_rows",
    "open_rows",
    "AesWords",
    "BlockNoise",
    "GaussianNoise",
    "LatticeGaussian",
    "NumpyGaussian",
    "gaussian_noise",
    "FORMATS",
    "FixedPoint",
    "EXACT_BELOW",
    "MAX_POISSON_MEAN",
    "poisson",
    "skellam",
    "MALICIOUS_REPLICATED",
    "Prepared",
    "REPLICATED",
    "ShareFormat",
    "Sketch",
    "check_dimensions",
    "compiled_gaussian",
    "compiled_sketch",
    "CompiledLoops",
    "NumpyLoops",
    "SketchLoops",
    "sketch_loops",
    "check_matrix",
    "components",
    "format_integers",
    "libcrypto",
    "load_matrix",
    "npy_error",
    "read_share_file",
    "share",
    "share_format",
    "tamper_share_file",
    "tamper_text_file",
    "vector_gaussian",
    "write_share_file",
    "FAILURE_BITS",
    "VALIDATIONS",
    "InputBound",
    "input_bound",
    "noise_tail",
    "precheck_bits",
]

lazy_package(__name__)
