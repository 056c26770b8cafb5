"""`ltm aws up | status | down` against moto's EC2 emulation; never real AWS.

moto 5 does not emulate placement groups, so :class:`PlacementGroups` keeps
them beside moto through botocore's event hooks: it answers the placement
group calls itself, refuses launches into unknown groups, and reports each
instance's group in DescribeInstances the way EC2 does.
"""

from __future__ import annotations

import argparse
import ast
import base64
import io
import os
import socket
import stat
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from _moto import PlacementGroups, _error
from botocore.exceptions import ClientError, NoCredentialsError
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.amis import Ami

from harness import infra as aws
from harness.cli import aws as _cmd_aws
from harness.errors import InputError, LtmError
from harness.infra._pricing import cost_estimate
from harness.infra._ssh import known_hosts_line, scan_host_key, wait_for_ssh
from harness.infra._userdata import render_user_data
from harness.infra.aws import lookup, provision, state
from harness.infra.aws import session as aws_session
from harness.remote.hosts import load_inventory

REGION = "eu-west-1"
MY_CIDR = "203.0.113.7/32"
EXPECTED_AMI = "ami-0000000000000a2d6"


# --- placement groups beside moto -------------------------------------------

# --- fixtures -----------------------------------------------------------------------

@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_EC2", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # Keep the developer's own AWS configuration and ~/.config out of the tests.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    # Our own images are added per test; moto's hundreds of defaults only cost time.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def pgs() -> PlacementGroups:
    return PlacementGroups()


@pytest.fixture
def session(aws_env: None, pgs: PlacementGroups) -> Iterator[boto3.Session]:
    with mock_aws():
        _add_images()
        s = boto3.Session(region_name=REGION)
        pgs.install(s)
        yield s


@pytest.fixture
def ec2(session: boto3.Session) -> Any:
    return session.client("ec2")


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _add_images() -> None:
    """Ubuntu images as Canonical publishes them, plus decoys the lookup must skip."""
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    noble = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-{date}"
    for ami_id, owner, arch, date in [
        (EXPECTED_AMI, lookup.CANONICAL_OWNER, "amd64", "20250610"),
        ("ami-0000000000000a2d5", lookup.CANONICAL_OWNER, "amd64", "20240423"),  # older
        ("ami-0000000000000a2d7", lookup.CANONICAL_OWNER, "arm64", "20250701"),  # wrong arch
        ("ami-0000000000000bad1", "111122223333", "amd64", "20250701"),  # not Canonical
    ]:
        created = datetime.strptime(date, "%Y%m%d").replace(tzinfo=timezone.utc)
        backend.amis[ami_id] = Ami(
            backend, ami_id, name=noble.format(arch=arch, date=date), owner_id=owner,
            architecture="x86_64" if arch == "amd64" else "arm64", virtualization_type="hvm",
            creation_date=created, root_device_name="/dev/sda1", public=True)


def options(state_dir: Path, **overrides: Any) -> aws.UpOptions:
    values: dict[str, Any] = {"parties": 3, "cluster": "c1", "ssh_cidr": MY_CIDR,
                              "state_dir": state_dir, "wait_ssh": False, "yes": True}
    values.update(overrides)
    return aws.UpOptions(**values)


class Log(list):
    def __call__(self, message: str) -> None:
        self.append(message)

    @property
    def text(self) -> str:
        return "\n".join(self)


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- what is left in the account -------------------------------------------------

def live_instances(ec2: Any) -> list[dict[str, Any]]:
    reservations = ec2.describe_instances(Filters=[
        {"Name": "instance-state-name", "Values": list(state.LIVE_STATES)}])["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def cluster_groups(ec2: Any, cluster: str = "c1") -> list[dict[str, Any]]:
    return ec2.describe_security_groups(Filters=[
        {"Name": f"tag:{state.TAG_CLUSTER}", "Values": [cluster]}])["SecurityGroups"]


def leftovers(ec2: Any, pgs: PlacementGroups) -> dict[str, Any]:
    """Everything a torn-down account should no longer hold."""
    groups = [g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]
              if g["GroupName"] != "default"]
    return {
        "instances": [i["InstanceId"] for i in live_instances(ec2)],
        "security_groups": groups,
        "key_pairs": [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]],
        "placement_groups": list(pgs.groups),
        "volumes": [v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]],
    }


NOTHING = {"instances": [], "security_groups": [], "key_pairs": [], "placement_groups": [],
           "volumes": []}


def tag_dict(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags") or resource.get("TagSet") or []}


def assert_managed(resource: dict[str, Any], cluster: str = "c1") -> None:
    tags = tag_dict(resource)
    assert tags[state.TAG_CLUSTER] == cluster
    assert tags[state.TAG_MANAGED] == "true"
    assert tags["Name"]


# --- up -------------------------------------------------------------------------------

def test_up_builds_a_locked_down_tagged_cluster(session: boto3.Session, ec2: Any,
                                                pgs: PlacementGroups, state_dir: Path) -> None:
    log = Log()
    result = aws.up(session, options(state_dir), log=log)

    assert len(result.instances) == 3
    [group] = cluster_groups(ec2)
    group_id = group["GroupId"]
    ingress = group["IpPermissions"]
    assert len(ingress) == 2
    ssh = next(p for p in ingress if p["FromPort"] == 22)
    assert (ssh["IpProtocol"], ssh["ToPort"]) == ("tcp", 22)
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == [MY_CIDR]
    assert not ssh["UserIdGroupPairs"] and not ssh["Ipv6Ranges"]
    mpc = next(p for p in ingress if p["FromPort"] == 14000)
    assert (mpc["IpProtocol"], mpc["ToPort"]) == ("tcp", 14099)
    assert [pair["GroupId"] for pair in mpc["UserIdGroupPairs"]] == [group_id]
    assert not mpc["IpRanges"] and not mpc["Ipv6Ranges"] and not mpc["PrefixListIds"]
    opened_to = [r["CidrIp"] for p in ingress for r in p["IpRanges"]]
    assert "0.0.0.0/0" not in opened_to
    assert not [r for p in ingress for r in p["Ipv6Ranges"]]

    instances = live_instances(ec2)
    assert sorted(i["InstanceId"] for i in instances) == sorted(
        i.instance_id for i in result.instances)
    for instance in instances:
        assert instance["State"]["Name"] == "running"
        assert instance["ImageId"] == EXPECTED_AMI
        assert instance["InstanceType"] == "t3.large"
        assert instance["KeyName"] == "ltm-harness-c1"
        assert instance["Placement"]["GroupName"] == "ltm-harness-c1"
        assert [g["GroupId"] for g in instance["NetworkInterfaces"][0]["Groups"]] == [group_id]
        assert_managed(instance)
    assert sorted(tag_dict(i)["Name"] for i in instances) == ["c1-p0", "c1-p1", "c1-p2"]

    volumes = ec2.describe_volumes()["Volumes"]
    assert len(volumes) == 3
    for volume in volumes:
        assert_managed(volume)
    assert_managed(group)
    [key] = ec2.describe_key_pairs()["KeyPairs"]
    assert key["KeyName"] == "ltm-harness-c1"
    assert_managed(key)
    [placement] = pgs.groups.values()
    assert placement["GroupName"] == "ltm-harness-c1"
    assert_managed(placement)
    assert placement["Strategy"] == result.placement_strategy == "spread"  # t3: not "cluster"
    assert [p["MinCount"] for p in pgs.run_params] == [3]  # one all-or-nothing launch

    user_data = base64.b64decode(ec2.describe_instance_attribute(
        InstanceId=instances[0]["InstanceId"], Attribute="userData")["UserData"]["Value"])
    # Only OS packages: nothing is installed from a package index by name.
    assert b"apt-get install -y python3-venv" in user_data
    assert b"bin/pip" not in user_data and b"ltm-harness\n" not in user_data
    assert b"mpspdz install" not in user_data
    assert "Estimated cost: 3 x t3.large at $0.0832/h = $0.2496/h" in log.text
    assert "out of 'cluster' placement groups" in log.text


def test_up_writes_the_inventory_and_a_private_key(session: boto3.Session, ec2: Any,
                                                    state_dir: Path) -> None:
    log = Log()
    result = aws.up(session, options(state_dir, base_port=15000), log=log)

    assert result.key_file == state_dir / "c1.pem"
    assert stat.S_IMODE(result.key_file.stat().st_mode) == 0o600
    assert result.key_file.read_text().startswith("-----BEGIN")
    assert result.inventory == state_dir / "c1.toml"
    inv = load_inventory(result.inventory)
    assert (inv.cluster, inv.region, inv.base_port) == ("c1", REGION, 15000)
    assert inv.known_hosts == state_dir / "c1.known_hosts"
    assert inv.known_hosts.read_text() == ""  # --no-wait-ssh: nothing scanned
    assert not result.host_keys_recorded
    assert "ssh-keyscan" in log.text
    by_id = {i["InstanceId"]: i for i in live_instances(ec2)}
    assert [h.name for h in inv.hosts] == ["p0", "p1", "p2"]
    for host, info in zip(inv.hosts, result.instances, strict=True):
        described = by_id[info.instance_id]
        assert host.ssh_host == described["PublicIpAddress"]
        assert host.mpc_host == described["PrivateIpAddress"]
        assert host.user == "ubuntu"
        assert host.key == str(result.key_file)
        assert host.mp_spdz == "/home/ubuntu/.local/share/ltm-harness/mp-spdz"
        assert host.ssh_port == 22
    assert [i.launch_index for i in result.instances] == [0, 1, 2]
    # The MPC rule follows --base-port.
    [group] = cluster_groups(ec2)
    assert {(p["FromPort"], p["ToPort"]) for p in group["IpPermissions"]} == {
        (22, 22), (15000, 15099)}


def test_up_with_a_client_host_adds_one_instance_as_the_inventorys_client(
        session: boto3.Session, ec2: Any, state_dir: Path) -> None:
    log = Log()
    result = aws.up(session, options(state_dir, parties=3, client_hosts=1), log=log)
    assert len(result.instances) == 4 and result.client_hosts == 1
    assert result.names == ("p0", "p1", "p2", "client")
    assert "[client]\n" in result.inventory.read_text()  # the table older inventories use
    inv = load_inventory(result.inventory)
    assert [h.name for h in inv.hosts] == ["p0", "p1", "p2"]
    assert len(inv.clients) == 1 and inv.clients[0].name == "client"
    last = result.instances[3]
    assert (inv.clients[0].ssh_host, inv.clients[0].mpc_host) == (last.public_ip, last.private_ip)
    names = {t["Value"] for i in live_instances(ec2) for t in i["Tags"] if t["Key"] == "Name"}
    assert names == {"c1-p0", "c1-p1", "c1-p2", "c1-client"}
    assert "Estimated cost: 4 x t3.large" in log.text


def test_up_records_host_keys_when_waiting_for_ssh(session: boto3.Session,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    state_dir: Path) -> None:
    waited: list[str] = []
    monkeypatch.setattr(provision, "wait_for_ssh",
                        lambda host, port, timeout: waited.append(host))
    monkeypatch.setattr(provision, "scan_host_key",
                        lambda host, port: known_hosts_line(host, port, "ssh-ed25519", "AAAA"))
    import harness.remote.setup as remote_setup

    calls: list[tuple] = []
    monkeypatch.setattr(remote_setup, "wait_for_marker",
                        lambda inv, marker, timeout: calls.append(("wait", inv, marker)))
    monkeypatch.setattr(remote_setup, "setup_hosts",
                        lambda inv, mode, echo: calls.append(("setup", inv, mode)))
    result = aws.up(session, options(state_dir, parties=2, wait_ssh=True), log=Log())
    assert waited == [i.public_ip for i in result.instances]
    assert result.host_keys_recorded
    # once SSH answers and cloud-init's packages are in, the same setup as `ltm hosts setup`
    assert calls == [("wait", result.inventory, "/var/lib/ltm-harness/ready"),
                     ("setup", result.inventory, "release")]
    assert result.set_up
    calls.clear()
    again = aws.up(session, options(state_dir, parties=2, wait_ssh=True, setup=None,
                                    cluster="c2"), log=Log())
    assert calls == [] and not again.set_up
    assert result.known_hosts.read_text().splitlines() == [
        f"{i.public_ip} ssh-ed25519 AAAA" for i in result.instances]


@pytest.mark.parametrize(("instance_type", "requested", "strategy"), [
    ("c5.large", "auto", "cluster"),
    ("t3.large", "cluster", "cluster"),
    ("t3.large", "partition", "partition"),
])
def test_placement_strategy_choice(session: boto3.Session, pgs: PlacementGroups,
                                   state_dir: Path, instance_type: str, requested: str,
                                   strategy: str) -> None:
    aws.up(session, options(state_dir, instance_type=instance_type,
                            placement_strategy=requested), log=Log())
    assert pgs.groups["ltm-harness-c1"]["Strategy"] == strategy


def test_placement_strategy_rules() -> None:
    assert lookup.placement_strategy("auto", "t3.large", 7) == "spread"
    assert lookup.placement_strategy("auto", "t3a.xlarge", 8) == "partition"
    assert lookup.placement_strategy("auto", "m5.large", 50) == "cluster"
    with pytest.raises(InputError, match="at most 7"):
        lookup.placement_strategy("spread", "m5.large", 8)
    with pytest.raises(InputError, match="unknown placement strategy"):
        lookup.placement_strategy("packed", "m5.large", 2)


def test_image_is_looked_up_not_hard_coded(ec2: Any) -> None:
    image = lookup.find_image(ec2)
    assert image.image_id == EXPECTED_AMI
    assert "ubuntu-noble-24.04-amd64-server-20250610" in image.name
    assert lookup.find_image(ec2, "ami-0000000000000a2d5").image_id == "ami-0000000000000a2d5"


def test_image_lookup_failure_names_the_fix(ec2: Any) -> None:
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    for ami_id in [a for a, ami in backend.amis.items() if ami.owner_id == lookup.CANONICAL_OWNER]:
        del backend.amis[ami_id]
    with pytest.raises(aws.AwsError, match="pass --ami"):
        lookup.find_image(ec2)


def test_ami_override_is_used(session: boto3.Session, ec2: Any, state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2, ami="ami-0000000000000a2d5"), log=Log())
    assert {i["ImageId"] for i in live_instances(ec2)} == {"ami-0000000000000a2d5"}


# --- asking first ---------------------------------------------------------------------

def test_without_yes_and_without_a_terminal_up_refuses(session: boto3.Session, ec2: Any,
                                                       pgs: PlacementGroups,
                                                       state_dir: Path) -> None:
    log = Log()
    with pytest.raises(InputError, match="no terminal to ask on; pass --yes"):
        aws.up(session, options(state_dir, yes=False), log=log, stdin=io.StringIO())
    assert "Estimated cost: 3 x t3.large" in log.text
    assert leftovers(ec2, pgs) == NOTHING
    assert not state_dir.exists()


def test_confirmation_is_asked_and_honoured(session: boto3.Session, ec2: Any,
                                            pgs: PlacementGroups, state_dir: Path) -> None:
    prompts: list[str] = []

    def answer(reply: str) -> Any:
        def ask(prompt: str) -> str:
            prompts.append(prompt)
            return reply
        return ask

    with pytest.raises(aws.Aborted, match="nothing was launched"):
        aws.up(session, options(state_dir, yes=False), log=Log(), ask=answer("n"),
               stdin=FakeTty())
    assert leftovers(ec2, pgs) == NOTHING
    result = aws.up(session, options(state_dir, yes=False), log=Log(), ask=answer("yes"),
                    stdin=FakeTty())
    assert len(result.instances) == 3
    assert prompts == ["Launch 3 x t3.large in eu-west-1? [y/N] "] * 2


def test_confirm_treats_end_of_input_as_no() -> None:
    def eof(prompt: str) -> str:
        raise EOFError

    assert aws_session.confirm("Go?", assume_yes=False, ask=eof, stdin=FakeTty()) is False
    assert aws_session.confirm("Go?", assume_yes=True, ask=eof, stdin=io.StringIO()) is True


def test_unknown_instance_type_is_priced_unknown_but_allowed(session: boto3.Session,
                                                             state_dir: Path) -> None:
    log = Log()
    result = aws.up(session, options(state_dir, parties=2, instance_type="c7i.large"), log=log)
    assert "Estimated cost: unknown for 2 x c7i.large" in log.text
    assert {i.instance_type for i in result.instances} == {"c7i.large"}


def test_cost_estimate_table() -> None:
    assert cost_estimate("t3.large", 1).startswith(
        "Estimated cost: 1 x t3.large at $0.0832/h = $0.0832/h")
    assert "unlimited credit mode" in cost_estimate("t3.large", 2)
    assert "$0.1920/h" in cost_estimate("m5.large", 2)
    assert "unlimited" not in cost_estimate("m5.large", 2)
    assert "unknown" in cost_estimate("z9.huge", 2)


# --- refusing bad requests before creating anything -------------------------------------

@pytest.mark.parametrize(("overrides", "message"), [
    ({"parties": 1}, "--parties must be between 2 and 100"),
    ({"cluster": "bad name"}, "--cluster 'bad name'"),
    ({"ssh_cidr": "0.0.0.0/0"}, "whole internet"),
    ({"ssh_cidr": "2001:db8::1"}, "IPv6"),
    ({"ssh_cidr": "my-laptop"}, "not an IPv4 address"),
    ({"base_port": 80}, "--base-port"),
    ({"harness_spec": "a\nb"}, "--harness-spec"),
])
def test_bad_options_create_nothing(session: boto3.Session, ec2: Any, pgs: PlacementGroups,
                                    state_dir: Path, overrides: dict[str, Any],
                                    message: str) -> None:
    with pytest.raises(InputError, match=message):
        aws.up(session, options(state_dir, **overrides), log=Log())
    assert leftovers(ec2, pgs) == NOTHING


def test_up_refuses_an_existing_cluster(session: boto3.Session, ec2: Any,
                                        state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2), log=Log())
    before = live_instances(ec2)
    with pytest.raises(InputError, match="already exists.*ltm aws down --cluster c1"):
        aws.up(session, options(state_dir, parties=2, inventory=state_dir / "other.toml"),
               log=Log())
    assert live_instances(ec2) == before


@pytest.mark.parametrize("existing", ["hosts.toml", "hosts.known_hosts"])
def test_up_refuses_to_overwrite_an_inventory(session: boto3.Session, ec2: Any,
                                              pgs: PlacementGroups, tmp_path: Path,
                                              state_dir: Path, existing: str) -> None:
    (tmp_path / existing).write_text("mine")
    with pytest.raises(InputError, match=f"{existing} already exists"):
        aws.up(session, options(state_dir, inventory=tmp_path / "hosts.toml"), log=Log())
    assert (tmp_path / existing).read_text() == "mine"
    assert leftovers(ec2, pgs) == NOTHING


def test_ssh_cidr_defaults_to_the_callers_address(session: boto3.Session, ec2: Any,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  state_dir: Path) -> None:
    monkeypatch.setattr(provision, "caller_cidr", lambda: "198.51.100.9/32")
    aws.up(session, options(state_dir, parties=2, ssh_cidr=None), log=Log())
    [group] = cluster_groups(ec2)
    ssh = next(p for p in group["IpPermissions"] if p["FromPort"] == 22)
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == ["198.51.100.9/32"]


def test_caller_cidr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen",
                        lambda url, timeout: io.BytesIO(b"198.51.100.9\n"))
    assert aws_session.caller_cidr() == "198.51.100.9/32"
    monkeypatch.setattr(urllib.request, "urlopen",
                        lambda url, timeout: io.BytesIO(b"<html>captive portal</html>"))
    with pytest.raises(LtmError, match="pass --ssh-cidr"):
        aws_session.caller_cidr()

    def offline(url: str, timeout: float) -> Any:
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(LtmError, match="network unreachable.*pass --ssh-cidr"):
        aws_session.caller_cidr()


def test_normalise_cidr() -> None:
    assert aws_session.normalise_cidr("203.0.113.7") == "203.0.113.7/32"
    assert aws_session.normalise_cidr(" 10.1.2.3/24 ") == "10.1.2.0/24"


# --- tearing down on failure -------------------------------------------------------------

def test_failed_launch_removes_group_key_and_placement_group(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    def no_capacity(**_: Any) -> Any:
        return _error("InsufficientInstanceCapacity", "no t3.large left in this zone")

    session.events.register("before-call.ec2.RunInstances", no_capacity)
    log = Log()
    with pytest.raises(ClientError, match="InsufficientInstanceCapacity"):
        aws.up(session, options(state_dir), log=log)
    assert "removing what it created" in log.text
    assert "Removed everything" in log.text
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []  # the saved key went too


def test_interrupt_while_waiting_terminates_the_instances(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups,
        monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    def interrupted(ec2: Any, ids: list[str], **_: Any) -> Any:
        assert len(live_instances(ec2)) == 3  # they exist when the interrupt comes
        raise KeyboardInterrupt

    monkeypatch.setattr(provision, "wait_until_running", interrupted)
    with pytest.raises(KeyboardInterrupt):
        aws.up(session, options(state_dir), log=Log())
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []


def test_interrupt_inside_run_instances_still_finds_the_instances(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    def lost_reply(**_: Any) -> None:
        raise KeyboardInterrupt  # the instances exist, but `up` never sees their ids

    session.events.register("after-call.ec2.RunInstances", lost_reply)
    with pytest.raises(KeyboardInterrupt):
        aws.up(session, options(state_dir), log=Log())
    assert leftovers(ec2, pgs) == NOTHING


def test_failure_writing_the_inventory_undoes_everything(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups,
        monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(provision, "write_inventory", full_disk)
    with pytest.raises(OSError, match="No space"):
        aws.up(session, options(state_dir), log=Log())
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []


def test_rollback_never_deletes_a_same_named_resource_it_did_not_create(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    ec2.create_key_pair(KeyName="ltm-harness-c1")  # someone else's, untagged
    with pytest.raises(ClientError, match="Duplicate"):
        aws.up(session, options(state_dir), log=Log())
    assert [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]] == ["ltm-harness-c1"]
    assert pgs.groups == {}


def test_rollback_reports_what_it_could_not_remove(session: boto3.Session, ec2: Any,
                                                   pgs: PlacementGroups,
                                                   state_dir: Path) -> None:
    def broken(**_: Any) -> Any:
        return _error("InternalError", "try later")

    session.events.register("before-call.ec2.RunInstances",
                            lambda **_: _error("Unsupported", "no"))
    session.events.register_first("before-call.ec2.DeletePlacementGroup", broken)
    log = Log()
    with pytest.raises(ClientError, match="Unsupported"):
        aws.up(session, options(state_dir), log=log)
    assert "could not remove placement-group ltm-harness-c1" in log.text
    assert "ltm aws down --cluster c1" in log.text
    assert cluster_groups(ec2) == []  # the rest was still removed


# --- status and down -----------------------------------------------------------------------

def test_status_lists_clusters_by_tag(session: boto3.Session, state_dir: Path) -> None:
    assert aws.status(session) == []
    aws.up(session, options(state_dir, parties=2, cluster="a"), log=Log())
    aws.up(session, options(state_dir, parties=3, cluster="b"), log=Log())
    clusters = aws.status(session)
    assert [c.name for c in clusters] == ["a", "b"]
    a, b = clusters
    assert [i.name for i in b.instances] == ["b-p0", "b-p1", "b-p2"]
    assert {i.state for i in b.instances} == {"running"}
    assert a.security_groups and a.key_pairs == ("ltm-harness-a",)
    assert a.placement_groups == ("ltm-harness-a",)
    assert [c.name for c in aws.status(session, "b")] == ["b"]


def test_down_removes_everything_and_is_idempotent(session: boto3.Session, ec2: Any,
                                                   pgs: PlacementGroups,
                                                   state_dir: Path) -> None:
    up = aws.up(session, options(state_dir), log=Log())
    log = Log()
    [result] = aws.down(session, cluster="c1", state_dir=state_dir, yes=True, log=log)
    assert sorted(result.terminated) == sorted(i.instance_id for i in up.instances)
    assert result.key_pairs == ("ltm-harness-c1",)
    assert result.placement_groups == ("ltm-harness-c1",)
    assert len(result.security_groups) == 1
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []
    assert aws.down(session, cluster="c1", state_dir=state_dir, yes=True, log=log) == []


def test_down_retries_a_deletion_while_its_dependency_lingers(
        session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2), log=Log())
    calls: list[str] = []

    def lingering(**_: Any) -> Any:
        # EC2 keeps a terminated instance's network interface a little while.
        calls.append("DeleteSecurityGroup")
        if len(calls) <= 2:
            return _error("DependencyViolation", "has a dependent object")
        return None

    session.events.register("before-call.ec2.DeleteSecurityGroup", lingering)
    sleeps: list[float] = []
    aws.down(session, cluster="c1", state_dir=state_dir, yes=True, log=Log(),
             sleep=sleeps.append)
    assert len(calls) == 3 and sleeps == [5.0, 5.0]
    assert leftovers(ec2, pgs) == NOTHING


def test_a_deletion_error_that_is_not_transient_is_not_retried(
        session: boto3.Session, state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2), log=Log())
    session.events.register("before-call.ec2.DeleteSecurityGroup",
                            lambda **_: _error("UnauthorizedOperation", "denied"))
    sleeps: list[float] = []
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        aws.down(session, cluster="c1", state_dir=state_dir, yes=True, log=Log(),
                 sleep=sleeps.append)
    assert sleeps == []


def test_down_asks_first(session: boto3.Session, ec2: Any, state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2), log=Log())
    with pytest.raises(InputError, match="pass --yes"):
        aws.down(session, cluster="c1", state_dir=state_dir, log=Log(), stdin=io.StringIO())
    with pytest.raises(aws.Aborted):
        aws.down(session, cluster="c1", state_dir=state_dir, log=Log(), stdin=FakeTty(),
                 ask=lambda prompt: "")
    assert len(live_instances(ec2)) == 2


def test_down_all(session: boto3.Session, ec2: Any, pgs: PlacementGroups,
                  state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2, cluster="a"), log=Log())
    aws.up(session, options(state_dir, parties=2, cluster="b"), log=Log())
    results = aws.down(session, all_clusters=True, state_dir=state_dir, yes=True, log=Log())
    assert [r.cluster for r in results] == ["a", "b"]
    assert leftovers(ec2, pgs) == NOTHING
    with pytest.raises(InputError, match="not both"):
        aws.down(session, cluster="a", all_clusters=True, yes=True)


def test_down_leaves_other_clusters_and_untagged_resources(session: boto3.Session, ec2: Any,
                                                           state_dir: Path) -> None:
    aws.up(session, options(state_dir, parties=2, cluster="a"), log=Log())
    aws.up(session, options(state_dir, parties=2, cluster="b"), log=Log())
    ec2.create_key_pair(KeyName="personal")
    aws.down(session, cluster="a", state_dir=state_dir, yes=True, log=Log())
    assert [c.name for c in aws.status(session)] == ["b"]
    assert sorted(k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]) == [
        "ltm-harness-b", "personal"]
    assert (state_dir / "b.pem").exists() and not (state_dir / "a.pem").exists()


def test_down_tidies_local_files_when_aws_is_already_clean(session: boto3.Session,
                                                          state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "ltm-demo.pem").write_text("stale")
    [result] = aws.down(session, state_dir=state_dir, yes=True, log=Log())
    assert result.cluster == "ltm-demo"
    assert result.local_files == (state_dir / "ltm-demo.pem",)
    assert list(state_dir.iterdir()) == []


# --- the CLI ----------------------------------------------------------------------------------

def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Parse like `ltm` and report errors like harness.cli.main does."""
    parser = argparse.ArgumentParser(prog="ltm")
    _cmd_aws.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except LtmError as exc:
        print(f"ltm: error: {exc}", file=sys.stderr)
        code = 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli_session(session: boto3.Session, monkeypatch: pytest.MonkeyPatch) -> boto3.Session:
    made: list[tuple[Any, Any]] = []

    def make_session(profile: str | None, region: str | None) -> boto3.Session:
        made.append((profile, region))
        return session

    monkeypatch.setattr(aws, "make_session", make_session)
    return session


def test_cli_up_status_down(cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups,
                            state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sd = ["--state-dir", str(state_dir)]
    code, out, err = run_cli(["aws", "up", "--parties", "2", "--cluster", "demo", "--yes",
                              "--no-wait-ssh", "--ssh-cidr", MY_CIDR, *sd], capsys)
    assert (code, err) == (0, "")
    assert "Estimated cost: 2 x t3.large" in out
    assert f"Inventory: {state_dir / 'demo.toml'}" in out
    assert "ltm aws down --cluster demo" in out

    code, out, _ = run_cli(["aws", "status"], capsys)
    assert code == 0
    assert "demo (eu-west-1): 2 instance(s)" in out and "demo-p1" in out

    code, out, _ = run_cli(["aws", "down", "--cluster", "demo", "--yes", *sd], capsys)
    assert code == 0
    assert "Removed cluster 'demo': 2 instance(s)" in out
    assert leftovers(ec2, pgs) == NOTHING

    code, out, _ = run_cli(["aws", "down", "--cluster", "demo", "--yes", *sd], capsys)
    assert code == 0
    assert "Nothing to tear down for cluster 'demo'" in out
    code, out, _ = run_cli(["aws", "status"], capsys)
    assert "No ltm-harness clusters in eu-west-1." in out


def test_cli_up_without_yes_and_without_tty_is_one_clear_error(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO())
    code, out, err = run_cli(["aws", "up", "--parties", "2", "--no-wait-ssh", "--ssh-cidr",
                              MY_CIDR, "--state-dir", str(state_dir)], capsys)
    assert code == 1
    assert "Estimated cost" in out
    assert err.startswith("ltm: error: ") and err.count("\n") == 1
    assert "pass --yes" in err
    assert leftovers(ec2, pgs) == NOTHING


def test_cli_turns_aws_errors_into_one_line(cli_session: boto3.Session, state_dir: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    cli_session.events.register("before-call.ec2.RunInstances",
                                lambda **_: _error("VcpuLimitExceeded", "too many vCPUs"))
    code, _, err = run_cli(["aws", "up", "--parties", "2", "--yes", "--no-wait-ssh",
                            "--ssh-cidr", MY_CIDR, "--state-dir", str(state_dir)], capsys)
    assert code == 1
    assert err.startswith("ltm: error: AWS refused RunInstances: VcpuLimitExceeded")
    assert "higher vCPU limit" in err


def test_cli_down_points_at_other_clusters(cli_session: boto3.Session, state_dir: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    aws.up(cli_session, options(state_dir, parties=2, cluster="other"), log=Log())
    code, out, _ = run_cli(["aws", "down", "--yes", "--state-dir", str(state_dir)], capsys)
    assert code == 0
    assert "Nothing to tear down for cluster 'ltm-demo'" in out
    assert "Other clusters here: other" in out


def test_cli_parser_options(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="ltm")
    _cmd_aws.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["aws", "up", "-S", "4", "--instance-type", "m5.large",
                              "--region", "us-east-1", "--profile", "lab", "--ami", "ami-1",
                              "--harness-spec", "git+https://example.org/ltm.git",
                              "--placement-strategy", "cluster"])
    assert (args.parties, args.instance_type, args.region, args.profile) == (
        4, "m5.large", "us-east-1", "lab")
    assert (args.ami, args.harness_spec, args.placement_strategy) == (
        "ami-1", "git+https://example.org/ltm.git", "cluster")
    assert args.wait_ssh and not args.yes and args.cluster == aws.DEFAULT_CLUSTER
    assert args.setup == "release"
    assert parser.parse_args(["aws", "up", "-S", "3", "--no-setup"]).setup is None
    assert parser.parse_args(["aws", "up", "-S", "3", "--client"]).client
    assert parser.parse_args(["aws", "up", "-S", "3", "--mp-spdz", "local"]).setup == "local"
    with pytest.raises(SystemExit):
        parser.parse_args(["aws", "down", "--cluster", "a", "--all"])
    capsys.readouterr()


# --- sessions and errors -------------------------------------------------------------------

def test_make_session_honours_region_and_reports_unknown_profiles(aws_env: None) -> None:
    assert aws.make_session(None, "us-west-2").region_name == "us-west-2"
    assert aws.make_session(None, None).region_name == REGION
    with pytest.raises(aws.AwsError, match="no AWS profile named 'nope'"):
        aws.make_session("nope", None)


def test_aws_errors_translation() -> None:
    with pytest.raises(aws.AwsError, match="no AWS credentials found"), aws.aws_errors():
        raise NoCredentialsError
    error = ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "denied"}},
                        "CreateSecurityGroup")
    with pytest.raises(aws.AwsError,
                       match="CreateSecurityGroup: UnauthorizedOperation: denied; your AWS"), \
            aws.aws_errors():
        raise error


def test_missing_region_is_an_input_error(aws_env: None, monkeypatch: pytest.MonkeyPatch,
                                          state_dir: Path) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with mock_aws(), pytest.raises(InputError, match="no AWS region configured"):
        aws.up(aws.make_session(None, None), options(state_dir), log=Log())


def test_the_public_names_are_what_the_command_line_uses() -> None:
    tree = ast.parse(Path(_cmd_aws.__file__).read_text())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "aws"}
    assert "up" in used and used <= set(aws.__all__)
    assert aws.hourly_price("t3.large") == 0.0832  # harness.experiments.estimate's
    for name in aws.__all__:
        assert getattr(aws, name) is not None


# --- user data ------------------------------------------------------------------------------

def test_user_data_installs_os_packages_only_and_passes_shellcheck(tmp_path: Path) -> None:
    script = render_user_data()
    assert script.startswith("#!/bin/bash\n")
    assert "set -euxo pipefail" in script
    assert "apt-get install -y python3-venv python3-pip" in script
    assert "pip\" install" not in script and "mpspdz install" not in script
    assert "touch /var/lib/ltm-harness/ready" in script
    pinned = render_user_data("ltm-harness>=0.2")
    assert "install 'ltm-harness>=0.2'" in pinned  # quoted: not a shell redirection
    assert ('"$venv/bin/ltm" mpspdz install --prefix '
            "/home/ubuntu/.local/share/ltm-harness/mp-spdz\n") in pinned
    assert "sudo -u ubuntu" in pinned
    for name, text in (("default", script), ("pinned", pinned),
                       ("git", render_user_data("git+https://example.org/ltm.git"))):
        path = tmp_path / f"{name}.sh"
        path.write_text(text)
        for argv in (["bash", "-n", str(path)], ["shellcheck", "-s", "bash", str(path)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"{argv[0]} on the {name} user data: {done.stdout}"


# --- waiting for SSH ------------------------------------------------------------------------

def test_wait_for_ssh_returns_once_the_port_answers() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert wait_for_ssh("127.0.0.1", port, timeout=5, interval=0.05) < 5


def test_wait_for_ssh_gives_up_on_a_closed_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound but not listening: connections are refused
        with pytest.raises(LtmError, match=f"SSH on 127.0.0.1:{port} did not answer within"):
            wait_for_ssh("127.0.0.1", port, timeout=0.3, interval=0.05, connect_timeout=0.1)


def test_wait_for_ssh_retries_until_the_server_starts() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        timer = threading.Timer(0.3, server.listen)
        timer.start()
        try:
            assert 0.2 < wait_for_ssh("127.0.0.1", port, timeout=5, interval=0.05) < 5
        finally:
            timer.cancel()


def test_scan_host_key_reads_the_servers_key() -> None:
    import paramiko

    host_key = paramiko.RSAKey.generate(1024)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        done = threading.Event()

        def serve() -> None:
            conn, _ = server.accept()
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            try:
                transport.start_server(server=paramiko.ServerInterface())
                done.wait(5)
            except (paramiko.SSHException, EOFError, OSError):
                pass
            finally:
                transport.close()
                conn.close()

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            line = scan_host_key("127.0.0.1", port, timeout=5)
        finally:
            done.set()
            thread.join(5)
    assert line == f"[127.0.0.1]:{port} ssh-rsa {host_key.get_base64()}"
    assert known_hosts_line("1.2.3.4", 22, "ssh-ed25519", "AAA") == "1.2.3.4 ssh-ed25519 AAA"


def test_scan_host_key_fails_clearly_when_nothing_speaks_ssh() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def hang_up() -> None:
            conn, _ = server.accept()
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
            conn.close()

        thread = threading.Thread(target=hang_up)
        thread.start()
        with pytest.raises(LtmError, match="could not read the SSH host key"):
            scan_host_key("127.0.0.1", port, timeout=2)
        thread.join(5)


def test_state_dir_default_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert aws.default_state_dir() == tmp_path / "ltm-harness" / "aws"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert aws.default_state_dir() == tmp_path / "home/.config/ltm-harness/aws"
    assert os.fspath(aws.default_state_dir()).endswith(".config/ltm-harness/aws")


def test_without_the_aws_extra_the_command_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    monkeypatch.setitem(sys.modules, "boto3", None)  # as if not installed
    assert main(["aws", "status"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("ltm: error: this command needs boto3, which is not installed; install it "
                   "with: pip install 'ltm-harness[aws]'\n")
