from __future__ import annotations

import contextlib
import sys

import pytest
from _buffers import left_in_shm, shm_entries

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


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_dev_shm():
    """Nothing secret outlives a run: after the whole session (every kill and interrupt
    the tests inflict included), the harness has left nothing in ``/dev/shm``."""
    before = shm_entries()
    yield
    left = left_in_shm(before)
    if left:
        pytest.fail(f"the tests left {len(left)} entries in /dev/shm: {', '.join(left)}",
                    pytrace=False)
