"""The one way the harness retries: call, and on an error worth retrying wait and call again.

Every retry loop (SSH connects, AWS deletions waiting on a dependency, reading
a new machine's host key, waiting for its SSH port) goes through
:func:`retry`, built on tenacity. It only decides *whether* and *when* to try
again; what an error means to the user stays with the caller, which gets the
last error itself (never a wrapper) once the retries are spent or the error is
not worth retrying.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

__all__ = ["retry"]

T = TypeVar("T")
ErrorTest = Callable[[BaseException], bool]


def retry(action: Callable[[], T], *,
          when: ErrorTest | type[BaseException] | tuple[type[BaseException], ...],
          attempts: int | None = None, delay: float = 0.0, factor: float = 1.0,
          max_delay: float | None = None, give_up: Callable[[], bool] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> T:
    """``action()``'s result, calling it again after each error that ``when`` accepts.

    ``when`` is an exception class (or tuple of them) or a test on the error;
    any other error, and any interrupt, is raised at once. Waits ``delay`` seconds before the 2nd
    call, multiplied by ``factor`` before each further one (never above ``max_delay``). Stops after
    ``attempts`` calls (None: no limit), or as soon as ``give_up()`` is true
    after a failed call, and then raises that call's error.
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    if attempts is None and give_up is None:
        raise ValueError("give either attempts or give_up: a retry must end")

    def wait(state: tenacity.RetryCallState) -> float:
        seconds = delay * factor ** (state.attempt_number - 1)
        return seconds if max_delay is None else min(seconds, max_delay)

    def stop(state: tenacity.RetryCallState) -> bool:
        return ((attempts is not None and state.attempt_number >= attempts)
                or (give_up is not None and give_up()))

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_error_test(when)),
        stop=stop,
        wait=wait,
        sleep=sleep,
        reraise=True,
    )
    return retrying(action)


def _error_test(when: ErrorTest | type[BaseException]
                | tuple[type[BaseException], ...]) -> ErrorTest:
    # An interrupt (Ctrl-C, or a stop signal raised as one) is never retried: it must
    # reach the cleanup at once, whatever the caller's test says.
    if isinstance(when, (type, tuple)):
        kinds = when
        return lambda exc: isinstance(exc, Exception) and isinstance(exc, kinds)
    test = when
    return lambda exc: isinstance(exc, Exception) and test(exc)
