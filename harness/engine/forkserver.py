"""The fork server every streamed run's processes come from, started early.

A streamed run forks its client workers and servers from a fork server that has
imported only the stream's modules (:mod:`harness.engine.stream`). Starting it
takes a new interpreter and those imports, a few tenths of a second on one core;
:func:`start_fork_server` does it at once and returns, so that ``ltm run`` can
start it before loading its own run path, which then loads beside it. This
module imports nothing of the harness, so that calling it costs nothing.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from typing import Any

__all__ = ["PRELOAD", "fork_context", "start_fork_server"]

# What the fork server imports before it forks anything: the processes' code.
PRELOAD = ["harness.engine.stream", "harness.engine.tls_stream"]


def fork_context() -> Any:
    """The multiprocessing context of the fork server that preloads :data:`PRELOAD`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_fork_server() -> None:
    """Start the fork server now (once per process; later calls do nothing)."""
    fork_context()
    multiprocessing.forkserver.ensure_running()
