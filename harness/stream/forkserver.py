"""The fork server a streamed run's processes start from, and its early start.

Every server and client worker of a stream is forked from one fork server that
imported only what they need (:data:`PRELOAD`): not plain fork (a server must
not inherit the parent's memory: the clients' data, the other servers'
channels), not spawn (each of the S + cores processes would import the harness
again). Starting it, a new interpreter and its imports, takes about a third of a
second; ``ltm run`` starts it first thing (:func:`start_fork_server`), so that
this happens on the other core while the command loads its own modules. This
module imports nothing of the stream, so that starting early costs nothing.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import signal
from typing import Any

__all__ = ["PRELOAD", "context", "start_fork_server"]

# What a worker or server runs, and the libraries it needs that ``ltm run`` itself
# never loads: AES for the masks, and the noise's generator.
PRELOAD = ["harness.stream.launch", "harness.stream.tls",
           "cryptography.hazmat.primitives.ciphers", "randomgen"]


def context() -> Any:
    """The multiprocessing context of the stream's processes."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_fork_server() -> None:
    """Start the fork server now, if it is not running; its imports then overlap
    whatever the caller does next."""
    context()
    # Born ignoring Ctrl-C (an ignored signal stays ignored across exec, and Python
    # then installs no handler of its own): a Ctrl-C while it imports would otherwise
    # print its traceback beside ltm's one line. It ignores it later anyway, as does
    # multiprocessing's resource tracker, started with it.
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: its signals are not ours to change
        multiprocessing.forkserver.ensure_running()
        return
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)
