"""Sleeping so that a signal ends the sleep at once, whichever thread it reached.

Python runs a signal's handler in the main thread, but the kernel may hand the
signal to any thread (a helper thread of boto3 or paramiko, or the one that sent
it): the main thread then sees it only when it next runs Python code, which a
single ``time.sleep(5)`` postpones by up to 5 seconds. Sleeping in short slices
bounds that delay, so every wait of `ltm aws up | down` stops within a moment.
"""

from __future__ import annotations

import time

__all__ = ["SLICE_SECONDS", "nap"]

SLICE_SECONDS = 0.05


def nap(seconds: float) -> None:
    """``time.sleep(seconds)``, in slices a signal's handler can run between."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, SLICE_SECONDS))
