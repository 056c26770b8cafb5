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


def _serve(server_cert, server_key, client_pem: Path, names: list[str], port: int,
           senders: list[list[str]] | None = None):
    """A receiver on its own thread, returned once it listens (not found out by connecting:
    it accepts exactly one connection per sender); ``outcome`` gets its (bytes, seconds) or
    error. ``names``: one sender's files; ``senders``: several senders' instead."""
    outcome: dict = {}
    listening = threading.Event()

    def run() -> None:
        try:
            outcome["received"] = receive("127.0.0.1", port, server_cert, server_key,
                                          client_pem, senders or [names],
                                          on_listening=listening.set)
        except Exception as exc:  # the test looks at it
            outcome["error"] = exc
        finally:
            listening.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert listening.wait(30), "the receiver did not start listening"
    assert "error" not in outcome, outcome
    return thread, outcome


def _refused(server: tuple, client_pem: Path, names: list[str], peer: Path,
             files: list[tuple[Path, str]], sender: tuple, match: str | None = None) -> dict:
    """Serve ``names`` as ``server`` (cert, key) for ``client_pem``; ``sender`` (cert, key)
    sends ``files`` to it, pinning ``peer``, and must fail. The receiver's outcome."""
    port = _port()
    thread, outcome = _serve(*server, client_pem, names, port)
    with pytest.raises(ConnectionError, match=match):
        send(_target(port, peer, files), *sender)
    thread.join(30)
    return outcome


def _target(port: int, peer: Path, files: list[tuple[Path, str]]) -> list[dict]:
    return [{"party": 0, "host": "127.0.0.1", "port": port, "peer": str(peer),
             "files": [[str(here), there] for here, there in files]}]


def test_a_server_gets_its_files_only_from_the_pinned_client(tmp_path, monkeypatch):
    [(server_key, server_cert, _)] = make_certificates(1, tmp_path / "server")
    [(client_key, client_cert, _)] = make_certificates(1, tmp_path / "client")
    [(other_key, other_cert, _)] = make_certificates(1, tmp_path / "stranger")
    shares = tmp_path / "Transactions-P0.data"
    shares.write_bytes(os.urandom(3 * (1 << 20) + 17))
    seeds = tmp_path / "Seeds-C0.bin"
    seeds.write_bytes(os.urandom(32 * 1000))
    server = tmp_path / "server-dir"
    server.mkdir()
    monkeypatch.chdir(server)  # the receiver writes under its working directory

    # the client's certificate is right: the files arrive whole and private
    port = _port()
    names = ["Upload/Seeds-C0.bin", "Upload/Full-C0.data"]
    thread, outcome = _serve(server_cert, server_key, client_cert, names, port)
    seconds = send(_target(port, server_cert, [(seeds, names[0]), (shares, names[1])]),
                   client_cert, client_key)
    thread.join(30)
    assert "error" not in outcome and seconds[0] > 0
    got, took = outcome["received"]
    assert got == seeds.stat().st_size + shares.stat().st_size and took > 0
    assert (server / names[0]).read_bytes() == seeds.read_bytes()
    assert (server / names[1]).read_bytes() == shares.read_bytes()
    for path in (server / "Upload", server / names[0], server / names[1]):
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600)

    # a file the server was not told to expect is refused, not written
    outcome = _refused((server_cert, server_key), client_cert, ["mine"], server_cert,
                       [(seeds, "../elsewhere")], (client_cert, client_key))
    assert "not expected" in str(outcome["error"])
    assert not (tmp_path / "elsewhere").exists() and not (server / "mine").exists()

    # a stranger's certificate is refused, and nothing is written
    outcome = _refused((server_cert, server_key), client_cert, ["not"], server_cert,
                       [(shares, "not")], (other_cert, other_key))
    assert "error" in outcome and not (server / "not").exists()

    # and the client will not send to a server whose certificate is not the pinned one
    _refused((other_cert, other_key), client_cert, ["fake"], server_cert,
             [(shares, "fake")], (client_cert, client_key), match="certificate verify failed")
    assert not (server / "fake").exists()


def test_several_client_hosts_each_send_their_own_files_at_once(tmp_path, monkeypatch):
    [(server_key, server_cert, _)] = make_certificates(1, tmp_path / "server")
    [(client_key, client_cert, _)] = make_certificates(1, tmp_path / "client")
    parts = []
    for k in range(3):
        part = tmp_path / f"part-{k}"
        part.write_bytes(os.urandom((1 << 20) + k))
        parts.append(part)
    server = tmp_path / "server-dir"
    server.mkdir()
    monkeypatch.chdir(server)
    senders = [[f"Persistence/Part-{k}.data"] for k in range(3)]
    port = _port()
    thread, outcome = _serve(server_cert, server_key, client_cert, [], port, senders)
    sent: list = [None] * 3

    def host(k: int) -> None:  # each client host on its own connection, all at once
        sent[k] = send(_target(port, server_cert, [(parts[k], senders[k][0])]),
                       client_cert, client_key)

    hosts = [threading.Thread(target=host, args=(k,)) for k in range(3)]
    for t in hosts:
        t.start()
    for t in hosts:
        t.join(30)
    thread.join(30)
    assert "error" not in outcome and all(s and s[0] > 0 for s in sent)
    assert outcome["received"][0] == sum(p.stat().st_size for p in parts)
    for k, part in enumerate(parts):
        assert (server / senders[k][0]).read_bytes() == part.read_bytes()

    # a host that sends only part of its files gets no acknowledgement, and the receiver
    # stops at once rather than wait for the hosts still to come
    port = _port()
    senders = [["a", "b"], ["c"]]
    thread, outcome = _serve(server_cert, server_key, client_cert, [], port, senders)
    with pytest.raises(ConnectionError):
        send(_target(port, server_cert, [(parts[0], "a")]), client_cert, client_key)
    thread.join(30)
    assert not thread.is_alive()
    assert "did not send ['b']" in str(outcome["error"])
