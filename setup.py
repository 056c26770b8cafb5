"""The compiled parts: the clients' Gaussian sampler (harness/clients/_gaussian.c), the
sketch's per-slot loops (harness/clients/_sketch.c) and the servers' copy of shares into
fast's blocks (harness/stream/_blocks.c).

Everything else is declared in pyproject.toml. The libraries are optional: without a C
compiler the install goes on, and the same values come through numpy
(harness.clients.gaussian and harness.clients.picks say which).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension(
        "harness.clients._gaussian", ["harness/clients/_gaussian.c"],
        depends=["harness/clients/_ziggurat_tables.h"], libraries=["m"],
        # IEEE arithmetic as numpy's sampler does it: no contraction into fused
        # multiply-adds, which would round differently.
        extra_compile_args=["-O2", "-ffp-contract=off"], optional=True),
    Extension(
        "harness.clients._sketch", ["harness/clients/_sketch.c"],
        extra_compile_args=["-O2"], optional=True),
    Extension(
        "harness.stream._blocks", ["harness/stream/_blocks.c"],
        extra_compile_args=["-O2"], optional=True),
])
