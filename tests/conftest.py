from __future__ import annotations

import os

import pytest

from harness.engine.mpspdz import find_mpspdz
from harness.errors import MpSpdzError


@pytest.fixture(scope="session")
def mp_spdz():
    """The real MP-SPDZ. Missing it is a failure, never a skip: CI must run these."""
    try:
        mp = find_mpspdz(os.environ.get("MP_SPDZ_HOME") or None)
        mp.binary("semi2k-party.x")
    except MpSpdzError as exc:
        pytest.fail(f"MP-SPDZ is required for the integration tests: {exc}")
    return mp


@pytest.fixture(scope="session")
def program_cache(tmp_path_factory):
    """One compile cache for the session, apart from the user's."""
    return tmp_path_factory.mktemp("program-cache")
