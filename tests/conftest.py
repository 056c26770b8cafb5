from __future__ import annotations

import contextlib
import sys

import pytest

from harness.engine import ensure_mpspdz
from harness.errors import MpSpdzError


@pytest.fixture(scope="session")
def mp_spdz(pytestconfig: pytest.Config):
    """The real MP-SPDZ, installed on first use as `ltm run` does.

    Missing it (offline, LTM_NO_INSTALL=1) is a failure, never a skip: CI must run these.
    """
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    try:
        # The download's notice and progress bar reach the terminal, not the capture.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            mp = ensure_mpspdz(out=sys.stderr)
        mp.binary("semi2k-party.x")
    except MpSpdzError as exc:
        problem = str(exc)
    else:
        return mp
    # Outside the except block, so the report is this one line, not an exception chain.
    pytest.fail(f"MP-SPDZ is required for the integration tests: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def program_cache(tmp_path_factory):
    """One compile cache for the session, apart from the user's."""
    return tmp_path_factory.mktemp("program-cache")
