"""Several client hosts: a reference run streamed from several client hosts."""

from __future__ import annotations

from pathlib import Path


def test_reference_shares_with_several_client_hosts_streams_to_the_servers(tmp_path: Path):
    # Refused before (its whole share files needed the slots in sketch order); streamed,
    # each server writes the chunks in the plan's order whichever host sends them.
    from harness.experiments import RunConfig

    party = ('\n[[party]]\nname = "{0}"\nssh_host = "{0}"\nuser = "u"\nmpc_host = "{0}"\n'
             'mp_spdz = "/d"\n')
    client = '\n[[client]]\nssh_host = "{0}"\nuser = "u"\nmpc_host = "{0}"\n'
    inv = tmp_path / "hosts.toml"
    inv.write_text('known_hosts = "kh"\n' + party.format("a") + party.format("b")
                   + client.format("c") + client.format("d"))
    cfg = RunConfig(out=tmp_path / "out", clients=100, rows=10, program="reference",
                    input_mode="shares", hosts=inv).validate()
    assert cfg.mode.placement == "client-hosts"
    assert cfg.streams and cfg.route.where == "servers" and cfg.route.shape == "slots"
    # its own default input, the data owner's, is written here: the client hosts stay idle
    party_input = RunConfig(out=tmp_path / "out", clients=100, rows=10, program="reference",
                            hosts=inv).validate()
    assert party_input.route.sink == "owner" and party_input.route.here
