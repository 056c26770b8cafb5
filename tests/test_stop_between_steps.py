"""A stop signal that lands between two steps that must not be cut apart.

A descriptor handed to the file object that will close it is one such pair: a stop
raised just after ``os.fdopen`` returned (the file object made, not yet kept) had the
dropped object close the descriptor and the caller's cleanup close it again, so a run
stopped by SIGHUP while it wrote its inputs ended in "internal error: EBADF" instead of
"interrupted by SIGHUP". The signal is raised here exactly there, every time.
"""

from __future__ import annotations

import gc
import os
import signal

import pytest

from harness.errors import Interrupted, stop_on_signals
from harness.fileio import open_private


@pytest.fixture()
def stop_handlers():
    previous = stop_on_signals()
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT],
                         ids=lambda s: signal.Signals(s).name)
def test_a_stop_right_after_fdopen_is_the_stop_not_ebadf(tmp_path, monkeypatch, stop_handlers,
                                                         sig):
    real_fdopen = os.fdopen

    def fdopen_then_stop(fd, *args, **kwargs):
        fh = real_fdopen(fd, *args, **kwargs)
        signal.raise_signal(sig)  # the handler runs here, before the caller keeps fh
        return fh

    monkeypatch.setattr(os, "fdopen", fdopen_then_stop)
    before = open_fds()
    with pytest.raises(Interrupted) as caught:
        open_private(tmp_path / "Input-P0-0")
    assert caught.value.signum == sig
    monkeypatch.undo()
    gc.collect()
    assert open_fds() <= before  # the descriptor was closed, once
    assert (tmp_path / "Input-P0-0").stat().st_mode & 0o777 == 0o600
