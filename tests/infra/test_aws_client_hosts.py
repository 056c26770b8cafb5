# ruff: noqa: F811 - the fixtures of test_aws, imported by name, are parameters here
"""`ltm aws up --client-hosts N`: several client hosts, under moto's EC2 (never AWS).

Each client host streams its share of the clients to every server's
``base_port + i``, so the security group must admit every client host to every
server's port, and nobody outside the cluster; the hosts must be tagged, priced,
written into the inventory as ``[[client]]`` entries, listed and torn down with
the rest.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import boto3
import pytest
from test_aws import (  # noqa: F401 - fixtures, used by name
    EXPECTED_AMI,
    MY_CIDR,
    NOTHING,
    Log,
    PlacementGroups,
    assert_managed,
    aws_env,
    cli_session,
    cluster_groups,
    ec2,
    leftovers,
    live_instances,
    no_network,
    options,
    pgs,
    session,
    state_dir,
    tag_dict,
)

from harness import cli
from harness import infra as aws
from harness.errors import InputError
from harness.infra._ssh import known_hosts_line
from harness.infra.aws import provision
from harness.remote.hosts import load_inventory

BASE_PORT = 14000


def admitted(group: dict[str, Any], port: int, *, groups: set[str] = frozenset(),
             addresses: tuple[str, ...] = ()) -> bool:
    """Whether ``group``'s ingress rules let TCP to ``port`` in from a source that wears
    ``groups`` and sends from ``addresses`` (EC2's rule semantics: any rule admits)."""
    for rule in group["IpPermissions"]:
        if rule["IpProtocol"] not in ("tcp", "-1"):
            continue
        if rule["IpProtocol"] == "tcp" and not rule["FromPort"] <= port <= rule["ToPort"]:
            continue
        if any(pair["GroupId"] in groups for pair in rule.get("UserIdGroupPairs", [])):
            return True
        if any(ipaddress.ip_address(a) in ipaddress.ip_network(r["CidrIp"])
               for r in rule.get("IpRanges", []) for a in addresses):
            return True
    return False


def as_source(instance: dict[str, Any]) -> dict[str, Any]:
    """The instance as a packet's source: the groups it wears and its addresses."""
    return {"groups": {g["GroupId"] for nic in instance["NetworkInterfaces"]
                       for g in nic["Groups"]},
            "addresses": tuple(a for a in (instance.get("PrivateIpAddress"),
                                           instance.get("PublicIpAddress")) if a)}


def test_two_client_hosts_are_launched_tagged_priced_and_written_as_client_entries(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    log = Log()
    result = aws.up(session, options(state_dir, parties=3, client_hosts=2), log=log)

    assert len(result.instances) == 5 and result.client_hosts == 2
    assert result.names == ("p0", "p1", "p2", "client0", "client1")
    # One all-or-nothing launch of every instance, priced as one.
    assert [(p["MinCount"], p["MaxCount"]) for p in pgs.run_params] == [(5, 5)]
    assert "Estimated cost: 5 x t3.large at $0.0832/h = $0.4160/h" in log.text
    assert "3 servers and 2 hosts for the clients" in log.text
    by_id = {i["InstanceId"]: i for i in live_instances(ec2)}
    assert set(by_id) == {i.instance_id for i in result.instances}
    for instance in by_id.values():
        assert instance["State"]["Name"] == "running"
        assert instance["Placement"]["GroupName"] == "ltm-harness-c1"
        assert_managed(instance)
    assert sorted(tag_dict(i)["Name"] for i in by_id.values()) == [
        "c1-client0", "c1-client1", "c1-p0", "c1-p1", "c1-p2"]
    volumes = ec2.describe_volumes()["Volumes"]
    assert len(volumes) == 5
    for volume in volumes:
        assert_managed(volume)

    text = result.inventory.read_text()
    assert text.count("\n[[client]]\n") == 2 and "\n[client]\n" not in text
    inv = load_inventory(result.inventory)
    assert [h.name for h in inv.hosts] == ["p0", "p1", "p2"]
    assert [c.name for c in inv.clients] == ["client0", "client1"]
    for host, info in zip((*inv.hosts, *inv.clients), result.instances, strict=True):
        described = by_id[info.instance_id]
        assert (host.ssh_host, host.mpc_host) == (described["PublicIpAddress"],
                                                  described["PrivateIpAddress"])
        assert tag_dict(described)["Name"] == f"c1-{host.name}"
        assert (host.user, host.key) == ("ubuntu", str(result.key_file))
    assert len({c.mpc_host for c in inv.clients} | {h.mpc_host for h in inv.hosts}) == 5

    [cluster] = aws.status(session, "c1")
    assert [i.name for i in cluster.instances] == [
        "c1-p0", "c1-p1", "c1-p2", "c1-client0", "c1-client1"]
    assert {i.instance_id for i in cluster.instances} == set(by_id)


def test_the_security_group_admits_every_client_host_to_every_server_and_nobody_else(
        session: boto3.Session, ec2: Any, state_dir: Path) -> None:
    result = aws.up(session, options(state_dir, parties=3, client_hosts=2), log=Log())
    [group] = cluster_groups(ec2)
    by_id = {i["InstanceId"]: i for i in live_instances(ec2)}
    servers = [by_id[i.instance_id] for i in result.instances[:3]]
    clients = [by_id[i.instance_id] for i in result.instances[3:]]
    # Someone else's instance in the same VPC, outside the cluster.
    [stranger] = ec2.run_instances(ImageId=EXPECTED_AMI, InstanceType="t3.large",
                                   MinCount=1, MaxCount=1)["Instances"]
    stranger = next(i for i in live_instances(ec2) if i["InstanceId"] == stranger["InstanceId"])
    assert group["GroupId"] not in as_source(stranger)["groups"]

    for instance in servers + clients:  # each wears the cluster's group, and only it
        assert as_source(instance)["groups"] == {group["GroupId"]}
    ports = [BASE_PORT + i for i in range(3)]  # server i's MPC port and its stream port
    for i, port in enumerate(ports):
        for client in clients:
            assert admitted(group, port, **as_source(client)), (client["InstanceId"], i)
        for server in servers:
            assert admitted(group, port, **as_source(server))
        assert not admitted(group, port, **as_source(stranger))
        assert not admitted(group, port, addresses=(MY_CIDR.split("/")[0],))
        assert not admitted(group, port, addresses=("198.51.100.9", "172.31.0.99"))
    # SSH: the caller only, neither the stranger nor the rest of the internet.
    assert admitted(group, 22, addresses=(MY_CIDR.split("/")[0],))
    assert not admitted(group, 22, **as_source(stranger))
    assert not admitted(group, 22, addresses=("198.51.100.9",))
    # Nothing else is open to anyone: no rule names an address range but the caller's.
    assert [r["CidrIp"] for p in group["IpPermissions"] for r in p["IpRanges"]] == [MY_CIDR]


def test_the_client_hosts_keys_are_pinned_with_the_servers(
        session: boto3.Session, monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    waited: list[str] = []
    monkeypatch.setattr(provision, "wait_for_ssh",
                        lambda host, port, timeout: waited.append(host))
    monkeypatch.setattr(provision, "scan_host_key",
                        lambda host, port: known_hosts_line(host, port, "ssh-ed25519", "AAAA"))
    result = aws.up(session, options(state_dir, parties=2, client_hosts=2, wait_ssh=True,
                                     setup=None), log=Log())
    addresses = [i.public_ip for i in result.instances]
    assert len(set(addresses)) == 4 and waited == addresses
    assert result.known_hosts.read_text().splitlines() == [
        f"{a} ssh-ed25519 AAAA" for a in addresses]
    inv = load_inventory(result.inventory)
    assert [c.ssh_host for c in inv.clients] == addresses[2:]


def test_down_removes_every_client_host_and_status_no_longer_lists_them(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    up = aws.up(session, options(state_dir, parties=2, client_hosts=3), log=Log())
    assert len(up.instances) == 5
    [result] = aws.down(session, cluster="c1", state_dir=state_dir, yes=True, log=Log())
    assert sorted(result.terminated) == sorted(i.instance_id for i in up.instances)
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []
    assert aws.status(session) == []


def test_client_hosts_count_towards_the_placement_groups_limit(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    # 6 servers fit a spread group (7 per zone); with 2 client hosts, 8 do not.
    with pytest.raises(InputError, match="at most 7 instances per zone, not 8"):
        aws.up(session, options(state_dir, parties=6, client_hosts=2,
                                placement_strategy="spread"), log=Log())
    assert leftovers(ec2, pgs) == NOTHING
    aws.up(session, options(state_dir, parties=6, client_hosts=2), log=Log())
    assert pgs.groups["ltm-harness-c1"]["Strategy"] == "partition"


@pytest.mark.parametrize("client_hosts", [-1, aws.MAX_CLIENT_HOSTS + 1])
def test_up_refuses_a_bad_count_before_any_call(session: boto3.Session, ec2: Any,
                                                state_dir: Path, client_hosts: int) -> None:
    calls: list[str] = []
    session.events.register("before-call.ec2", lambda model, **_: calls.append(model.name))
    with pytest.raises(InputError, match=f"--client-hosts must be between 0 and "
                                         f"{aws.MAX_CLIENT_HOSTS}, got {client_hosts}"):
        aws.up(session, options(state_dir, client_hosts=client_hosts), log=Log())
    assert calls == []


# --- the command line ---------------------------------------------------------------------

def up_args(state_dir: Path, *extra: str) -> list[str]:
    return ["aws", "up", "--parties", "2", "--cluster", "demo", "--yes", "--no-wait-ssh",
            "--ssh-cidr", MY_CIDR, "--state-dir", str(state_dir), *extra]


def test_cli_up_status_down_with_two_client_hosts(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(up_args(state_dir, "--client-hosts", "2")) == 0
    out = capsys.readouterr().out
    assert "Estimated cost: 4 x t3.large" in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")
              and " i-" in line]
    assert listed == ["p0", "p1", "client0", "client1"], out
    assert [c.name for c in load_inventory(state_dir / "demo.toml").clients] == [
        "client0", "client1"]

    assert cli.main(["aws", "status"]) == 0
    out = capsys.readouterr().out
    assert "demo (eu-west-1): 4 instance(s)" in out
    assert "demo-client0" in out and "demo-client1" in out

    assert cli.main(["aws", "down", "--cluster", "demo", "--yes",
                     "--state-dir", str(state_dir)]) == 0
    assert "Removed cluster 'demo': 4 instance(s)" in capsys.readouterr().out
    assert leftovers(ec2, pgs) == NOTHING


@pytest.mark.parametrize("flags", [["--client"], ["--client", "--client-hosts", "1"]])
def test_cli_client_is_one_client_host(cli_session: boto3.Session, state_dir: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       flags: list[str]) -> None:
    assert cli.main(up_args(state_dir, *flags)) == 0
    assert "Estimated cost: 3 x t3.large" in capsys.readouterr().out
    assert "\n[client]\n" in (state_dir / "demo.toml").read_text()
    assert [c.name for c in load_inventory(state_dir / "demo.toml").clients] == ["client"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--client-hosts", "-1"], f"--client-hosts must lie in [0, {aws.MAX_CLIENT_HOSTS}]"),
    (["--client-hosts", str(aws.MAX_CLIENT_HOSTS + 1)],
     f"--client-hosts must lie in [0, {aws.MAX_CLIENT_HOSTS}]"),
    (["--client-hosts", "two"], "--client-hosts must be an integer"),
    (["--client", "--client-hosts", "2"],
     "--client means --client-hosts 1, which contradicts --client-hosts 2; drop --client"),
    (["--client-hosts", "0", "--client"],
     "--client means --client-hosts 1, which contradicts --client-hosts 0; drop --client"),
])
def test_cli_bad_client_hosts_is_one_line_before_any_call(
        cli_session: boto3.Session, state_dir: Path, capsys: pytest.CaptureFixture[str],
        flags: list[str], message: str) -> None:
    calls: list[str] = []
    cli_session.events.register("before-call.ec2", lambda model, **_: calls.append(model.name))
    assert cli.main(up_args(state_dir, *flags)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ltm: error: ") and message in err, err
    assert calls == []
    assert not state_dir.exists()
