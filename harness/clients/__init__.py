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
    from harness.clients.binomial import MAX_COINS, binomial_epsilon, grid_sensitivity, least_coins
    from harness.clients.certificates import central_sigma, certificate, honest_split
    from harness.clients.digest import DIGEST_KEY_BYTES, digest_weights, noise_digest
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
    from harness.clients.mechanisms import (
        MECHANISMS,
        ROUNDING_COINS,
        CoinLayout,
        ServerNoise,
        check_dng_draws,
        input_server_noise,
        server_noise,
    )
    from harness.clients.native import find_library, load_library
    from harness.clients.noise import (
        CALIBRATIONS,
        NOISE_GENERATOR,
        NOISE_KINDS,
        NoiseSpec,
        noise_rng,
        zero_output_bound,
    )
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
    from harness.clients.privacy import (
        Sensitivity,
        accountant,
        analytic_gaussian_sigma,
        analytic_split,
        binomial_failure,
        binomial_honest,
        certify,
        concentration_failure,
        gaussian_epsilon,
        guaranteed_honest,
        honest_contributors,
        release_sensitivity,
        skellam_epsilon,
        skellam_mu,
        smallest_n,
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
    "CALIBRATIONS",
    "GaussianNoise",
    "LatticeGaussian",
    "NumpyGaussian",
    "gaussian_noise",
    "FORMATS",
    "FixedPoint",
    "MAX_COINS",
    "ROUNDING_COINS",
    "MECHANISMS",
    "CoinLayout",
    "ServerNoise",
    "binomial_epsilon",
    "check_dng_draws",
    "EXACT_BELOW",
    "MAX_POISSON_MEAN",
    "poisson",
    "skellam",
    "grid_sensitivity",
    "least_coins",
    "server_noise",
    "MALICIOUS_REPLICATED",
    "NOISE_GENERATOR",
    "NOISE_KINDS",
    "NoiseSpec",
    "Prepared",
    "REPLICATED",
    "Sensitivity",
    "ShareFormat",
    "Sketch",
    "analytic_gaussian_sigma",
    "accountant",
    "central_sigma",
    "certificate",
    "analytic_split",
    "binomial_failure",
    "binomial_honest",
    "certify",
    "check_dimensions",
    "compiled_gaussian",
    "compiled_sketch",
    "CompiledLoops",
    "NumpyLoops",
    "SketchLoops",
    "sketch_loops",
    "check_matrix",
    "components",
    "concentration_failure",
    "format_integers",
    "libcrypto",
    "gaussian_epsilon",
    "guaranteed_honest",
    "honest_split",
    "honest_contributors",
    "input_server_noise",
    "load_matrix",
    "npy_error",
    "noise_rng",
    "read_share_file",
    "release_sensitivity",
    "share",
    "share_format",
    "skellam_epsilon",
    "skellam_mu",
    "smallest_n",
    "zero_output_bound",
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
