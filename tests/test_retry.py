"""harness.retry: which errors are retried, how often, how long it waits, what it raises."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from harness.retry import retry


class Flaky:
    """Fails with ``error`` on the first ``failures`` calls, then returns the call count."""

    def __init__(self, failures: int, error: type[BaseException] = ConnectionRefusedError):
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return self.calls


def test_failures_then_success_returns_the_result_after_doubling_waits() -> None:
    action, sleeps = Flaky(3), []
    assert retry(action, when=OSError, attempts=5, delay=0.5, factor=2.0,
                 sleep=sleeps.append) == 4
    assert action.calls == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_gives_up_after_the_attempts_with_the_last_error_itself() -> None:
    action, sleeps = Flaky(10), []
    with pytest.raises(ConnectionRefusedError, match="failure 3"):
        retry(action, when=OSError, attempts=3, delay=1.0, sleep=sleeps.append)
    assert action.calls == 3
    assert sleeps == [1.0, 1.0]  # factor 1: a fixed pause


def test_an_error_not_accepted_is_raised_at_once() -> None:
    action, sleeps = Flaky(1, ValueError), []
    with pytest.raises(ValueError, match="failure 1"):
        retry(action, when=OSError, attempts=5, delay=1.0, sleep=sleeps.append)
    assert (action.calls, sleeps) == (1, [])
    interrupted = Flaky(1, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        retry(interrupted, when=lambda exc: True, attempts=5, sleep=sleeps.append)
    assert (interrupted.calls, sleeps) == (1, [])


def test_a_test_function_decides_per_error() -> None:
    errors = iter([OSError(111, "refused"), OSError(2, "no such file"), OSError(111, "x")])

    def action() -> None:
        raise next(errors)

    with pytest.raises(OSError, match="no such file"):
        retry(action, when=lambda exc: getattr(exc, "errno", None) == 111, attempts=5,
              sleep=lambda _: None)


def test_give_up_ends_an_unbounded_retry() -> None:
    action, sleeps = Flaky(100), []
    with pytest.raises(ConnectionRefusedError, match="failure 4"):
        retry(action, when=OSError, delay=0.1, give_up=lambda: action.calls >= 4,
              sleep=sleeps.append)
    assert action.calls == 4 and sleeps == [0.1, 0.1, 0.1]


def test_a_retry_must_be_able_to_end() -> None:
    with pytest.raises(ValueError, match="attempts or give_up"):
        retry(Flaky(0), when=OSError)
    with pytest.raises(ValueError, match="at least 1"):
        retry(Flaky(0), when=OSError, attempts=0)


def test_real_waits_until_a_server_starts_listening() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]  # bound, not listening: connections are refused
        timer = threading.Timer(0.3, server.listen)
        timer.start()
        attempts = 0

        def knock() -> None:
            nonlocal attempts
            attempts += 1
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

        started = time.monotonic()
        try:
            retry(knock, when=ConnectionRefusedError, attempts=50, delay=0.05)
        finally:
            timer.cancel()
    assert time.monotonic() - started >= 0.25
    assert 2 <= attempts < 50
