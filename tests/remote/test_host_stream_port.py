"""A streamed run's TLS ports on real sshd hosts: bound to the inventory's address alone,
deaf to strangers, and a holder of the clients' key who breaks the protocol named first.

The hooks sit where the runner has every server listening and starts its clients
(``_streamed._run_clients``): strangers (or the key holder) come first, then the
run's own client workers, as anyone on the hosts' network could.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import pytest
from _sshd import trusted_inventory, write_inventory_file
from _strangers import PROMPTLY, Strangers, reach
from test_host_streams import left_behind

from harness.cli import main
from harness.experiments import RunConfig, run
from harness.remote import _streamed
from harness.remote.hosts import load_inventory
from harness.remote.ssh import trust_hosts
from harness.stream.tls import tls_context
from harness.stream.wire import HELLO, MAGIC, chunk_frame

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def _listening(port: int) -> list[str]:
    """The addresses TCP sockets listen on at ``port`` (this machine is every host)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, at = local.split(":")
        if state == "0A" and int(at, 16) == port:  # 0A: LISTEN
            found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_strangers_at_the_hosts_stream_ports_change_nothing(tmp_path, farm, mp_spdz,
                                                            program_cache, monkeypatch):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    bound: dict[int, list[str]] = {}
    strangers: list[Strangers] = []
    original = _streamed._run_clients

    def strangers_first(plan, job, clients, servers, *args):
        for _, port, _ in servers:
            bound[port] = _listening(port)
        strangers.append(Strangers(tmp_path, [(h.mpc_host, port) for h, port, _ in servers]))
        return original(plan, job, clients, servers, *args)

    monkeypatch.setattr(_streamed, "_run_clients", strangers_first)
    cfg = RunConfig(out=tmp_path / "out", clients=5000, rows=10, dim=3, seed=5,
                    cache_dir=program_cache, parties=2, program="local", hosts=path,
                    timeout=120)
    try:
        result = run(cfg)
    finally:
        for crowd in strangers:
            crowd.leave()
    assert result["verification"]["ok"], result["verification"]
    # On the inventory's address (mpc_host), not on every interface of the host.
    assert len(bound) == 2 and all(addresses == ["127.0.0.1"] for addresses in bound.values())
    assert left_behind(fakes) == ([], [])


def test_a_protocol_violation_by_a_holder_of_the_clients_key_is_named_first(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch):
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    original = _streamed._run_clients

    def key_holder_first(plan, job, clients, servers, cert, key, *args):
        # Every worker's stream into P0, from whoever holds the clients' key; worker 0's
        # first chunk has an integer for its slot counts.
        host, port, pem = servers[0]
        streams = []
        for w in range(plan.workers):
            tls = tls_context(False, cert, key, pem).wrap_socket(reach(host.mpc_host, port))
            tls.sendall(HELLO.pack(MAGIC, w))
            streams.append(tls)
        streams[0].sendall(chunk_frame(0, 8, [5]))
        try:
            streams[0].settimeout(PROMPTLY)
            streams[0].recv(1)  # P0 refuses the stream: it closes it
        except OSError:
            pass
        for tls in streams:
            tls.close()
        return original(plan, job, clients, servers, cert, key, *args)

    monkeypatch.setattr(_streamed, "_run_clients", key_holder_first)
    code = main(["run", "--hosts", str(path), "--program", "local", "--clients", "3000",
                 "--rows", "10", "--dim", "3", "--timeout", "30", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and err.startswith("ltm: error: "), err
    assert "Traceback" not in err
    said = (f"p0 (root@127.0.0.1:{fakes[0].port}): agent serve: refused client worker 0's "
            "stream, a protocol violation after 0 of its ")
    assert said in err and ("chunks: it sent chunk 0 with an integer as its slot counts, "
                            "not 20 integers") in err, err
    # The cause first; then what the run's own clients saw (P0 had closed its port).
    assert err.index(said) < err.index("the clients then")
    assert "p1 (" not in err  # P1 only lost its streams: a consequence
    assert not (tmp_path / "out" / "result.json").exists()
    assert left_behind(fakes) == ([], [])


def test_a_server_that_cannot_listen_on_its_address_says_what_to_set(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch):
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    inventory = load_inventory(path)
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: reached through NAT, say.
    hosts = [inventory.hosts[0], dataclasses.replace(inventory.hosts[1], mpc_host="192.0.2.1")]
    write_inventory_file(path, hosts, inventory.base_port, inventory.known_hosts)
    trust_hosts(path, echo=lambda line: None)
    code = main(["run", "--hosts", str(path), "--program", "local", "--clients", "3000",
                 "--rows", "10", "--dim", "3", "--timeout", "30", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    port = inventory.base_port + 1
    assert (f"p1 (root@127.0.0.1:{fakes[1].port}): cannot take the clients' shares on port "
            f"{port}: agent serve: cannot listen on 192.0.2.1:{port} (") in err, err
    assert "give one as `listen` in its inventory entry" in err
    assert left_behind(fakes) == ([], [])
