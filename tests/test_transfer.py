"""The client host's transfers: TLS with both sides' per-run certificates pinned."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from harness.engine.certs import make_certificates
from harness.remote.transfer import receive, send


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(server_cert, server_key, client_pem: Path, out: Path, port: int):
    outcome: dict = {}

    def run() -> None:
        try:
            receive("127.0.0.1", port, server_cert, server_key, client_pem, out)
        except Exception as exc:  # the test looks at it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _wait_listening(capsys) -> None:
    # Not by connecting: the receiver accepts exactly one connection.
    seen = ""
    for _ in range(1000):
        seen += capsys.readouterr().out
        if "listening" in seen:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the receiver did not start listening")


def test_a_server_gets_its_file_only_from_the_pinned_client(tmp_path, capsys):
    [(server_key, server_cert, _)] = make_certificates(1, tmp_path / "server")
    [(client_key, client_cert, _)] = make_certificates(1, tmp_path / "client")
    [(other_key, other_cert, _)] = make_certificates(1, tmp_path / "stranger")
    shares = tmp_path / "Transactions-P0.data"
    shares.write_bytes(os.urandom(3 * (1 << 20) + 17))

    # the client's certificate is right: the file arrives whole and private
    port = _port()
    thread, outcome = _serve(server_cert, server_key, client_cert, tmp_path / "got", port)
    _wait_listening(capsys)
    seconds = send([{"party": 0, "host": "127.0.0.1", "port": port, "peer": str(server_cert),
                     "file": str(shares)}], client_cert, client_key)
    thread.join(30)
    assert "error" not in outcome and seconds[0] > 0
    assert (tmp_path / "got").read_bytes() == shares.read_bytes()
    assert (tmp_path / "got").stat().st_mode & 0o777 == 0o600

    # a stranger's certificate is refused, and nothing is written
    port = _port()
    thread, outcome = _serve(server_cert, server_key, client_cert, tmp_path / "not", port)
    _wait_listening(capsys)
    with pytest.raises(ConnectionError):
        send([{"party": 0, "host": "127.0.0.1", "port": port, "peer": str(server_cert),
               "file": str(shares)}], other_cert, other_key)
    thread.join(30)
    assert "error" in outcome and not (tmp_path / "not").exists()

    # and the client will not send to a server whose certificate is not the pinned one
    port = _port()
    thread, outcome = _serve(other_cert, other_key, client_cert, tmp_path / "fake", port)
    _wait_listening(capsys)
    with pytest.raises(ConnectionError, match="certificate verify failed"):
        send([{"party": 0, "host": "127.0.0.1", "port": port, "peer": str(server_cert),
               "file": str(shares)}], client_cert, client_key)
    thread.join(30)
    assert not (tmp_path / "fake").exists()
    capsys.readouterr()
