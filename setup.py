"""The one compiled part: the clients' Gaussian sampler (harness/clients/_gaussian.c).

Everything else is declared in pyproject.toml. The library is optional: without a C
compiler the install goes on, and the clients draw the same noise through numpy
(harness.clients.gaussian says which).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "harness.clients._gaussian", ["harness/clients/_gaussian.c"],
    depends=["harness/clients/_ziggurat_tables.h"], libraries=["m"],
    # IEEE arithmetic as numpy's sampler does it: no contraction into fused
    # multiply-adds, which would round differently.
    extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)])
