"""MPC clusters on EC2: provision (`up`), list (`status`) and remove (`down`).

Every resource is tagged ``ltm-harness:cluster=<name>`` and
``ltm-harness:managed=true``; `down` and `status` find resources by those tags
alone, so they work from any machine with the same AWS account. Only the
standard AWS configuration is used (profiles, ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``), so the code can equally be pointed at an EC2 emulator.

`up` records each resource in a :class:`Created` log as it makes it; on any
error or interrupt it undoes exactly those resources, newest first, and
re-raises.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.errors import InputError, LtmError
from harness.fileio import write_atomic
from harness.remote import DEFAULT_BASE_PORT, Host, Inventory, write_inventory
from infra._pricing import cost_estimate
from infra._ssh import scan_host_key, wait_for_ssh
from infra._userdata import LOGIN_USER, READY_MARKER, REMOTE_MP_SPDZ, render_user_data

__all__ = [
    "CANONICAL_OWNER",
    "DEFAULT_CLUSTER",
    "DEFAULT_INSTANCE_TYPE",
    "MPC_PORT_SPAN",
    "REMOTE_MP_SPDZ",
    "TAG_CLUSTER",
    "TAG_MANAGED",
    "Aborted",
    "AwsError",
    "ClusterStatus",
    "Created",
    "DownResult",
    "Image",
    "InstanceInfo",
    "UpOptions",
    "UpResult",
    "aws_errors",
    "caller_cidr",
    "confirm",
    "default_state_dir",
    "down",
    "find_image",
    "make_session",
    "normalise_cidr",
    "placement_strategy",
    "resource_name",
    "rollback",
    "status",
    "up",
    "wait_until_running",
]

TAG_CLUSTER = "ltm-harness:cluster"
TAG_MANAGED = "ltm-harness:managed"
CANONICAL_OWNER = "099720109477"
# Canonical names 24.04 images ".../hvm-ssd-gp3/..."; older releases used "hvm-ssd".
UBUNTU_IMAGE_NAME = "ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*"
DEFAULT_CLUSTER = "ltm-demo"
DEFAULT_INSTANCE_TYPE = "t3.large"
DEFAULT_VOLUME_GB = 20
# The MPC rule opens a fixed span, so the same group serves any party count up to it.
MPC_PORT_SPAN = 100
CHECKIP_URL = "https://checkip.amazonaws.com"
PLACEMENT_STRATEGIES = ("auto", "cluster", "spread", "partition")
# EC2 keeps terminated instances visible for a while; they are gone for our purposes.
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
_SPREAD_LIMIT_PER_AZ = 7
_BURSTABLE = re.compile(r"^t\d[a-z]*\.")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}$")

Log = Callable[[str], None]
Ask = Callable[[str], str]


class AwsError(LtmError):
    """AWS refused a request, or could not be reached or authenticated against."""


class Aborted(LtmError):
    """The user declined the confirmation question."""


def _say(message: str) -> None:
    print(message, flush=True)


# --- data returned to callers ------------------------------------------------

@dataclass(frozen=True)
class Image:
    image_id: str
    name: str
    creation_date: str
    root_device_name: str


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    name: str
    state: str
    instance_type: str
    public_ip: str | None
    private_ip: str | None
    launch_index: int = 0
    placement_group: str | None = None


@dataclass(frozen=True)
class ClusterStatus:
    """What exists in AWS under one cluster tag."""

    name: str
    instances: tuple[InstanceInfo, ...] = ()
    security_groups: tuple[str, ...] = ()
    key_pairs: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()

    def summary(self) -> str:
        return (f"{len(self.instances)} instance(s), {len(self.security_groups)} security "
                f"group(s), {len(self.key_pairs)} key pair(s), "
                f"{len(self.placement_groups)} placement group(s)")


@dataclass(frozen=True)
class UpOptions:
    parties: int
    cluster: str = DEFAULT_CLUSTER
    instance_type: str = DEFAULT_INSTANCE_TYPE
    ami: str | None = None  # None: look up the newest Ubuntu 24.04 image
    ssh_cidr: str | None = None  # None: ask checkip.amazonaws.com for the caller's address
    harness_spec: str | None = None  # a published harness the instances pip-install
    # `ltm hosts setup --mp-spdz` once SSH answers: "release", "local", or None (skip it)
    setup: str | None = "release"
    client: bool = False  # one more instance, the inventory's [client] (the clients' host)
    state_dir: Path | None = None  # None: default_state_dir()
    inventory: Path | None = None  # None: <state_dir>/<cluster>.toml
    base_port: int = DEFAULT_BASE_PORT
    placement_strategy: str = "auto"
    volume_gb: int = DEFAULT_VOLUME_GB
    wait_ssh: bool = True
    ssh_timeout: float = 600.0
    yes: bool = False


@dataclass(frozen=True)
class UpResult:
    cluster: str
    region: str
    instances: tuple[InstanceInfo, ...]
    inventory: Path
    key_file: Path
    known_hosts: Path
    placement_strategy: str
    host_keys_recorded: bool
    set_up: bool = False
    client: bool = False  # the last instance is the [client] host


@dataclass(frozen=True)
class DownResult:
    cluster: str
    terminated: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    key_pairs: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()
    local_files: tuple[Path, ...] = ()


# --- the record of what `up` created ----------------------------------------

@dataclass
class _Entry:
    kind: str  # "placement-group" | "key-pair" | "security-group" | "instances" | "local-file"
    name: str  # the resource's name (or the file's path, or the cluster for instances)
    ids: list[str] = field(default_factory=list)


@dataclass
class Created:
    """The resources one `up` has made, in order.

    An entry is added just *before* the call that creates the resource, by
    name, and gets its id once the call returns: an interrupt in mid-call then
    still leaves enough to find the resource. Undoing only deletes resources
    that carry this cluster's tag, so a name clash with someone else's
    resource never deletes theirs.
    """

    cluster: str
    entries: list[_Entry] = field(default_factory=list)

    def add(self, kind: str, name: str) -> _Entry:
        entry = _Entry(kind, name)
        self.entries.append(entry)
        return entry


# --- sessions, errors, questions --------------------------------------------

def make_session(profile: str | None = None, region: str | None = None) -> Any:
    """A boto3 session from the standard AWS configuration (profile, env, config files)."""
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound:
        raise AwsError(f"no AWS profile named {profile!r}; check --profile against "
                       "~/.aws/config") from None


def _region(session: Any) -> str:
    if not session.region_name:
        raise InputError("no AWS region configured: pass --region, set AWS_DEFAULT_REGION, "
                         "or give your profile a region")
    return str(session.region_name)


_ERROR_HINTS = {
    "UnauthorizedOperation": "your AWS credentials lack the EC2 permission for this",
    "AuthFailure": "AWS rejected the credentials; check your profile or keys",
    "VcpuLimitExceeded": "ask AWS for a higher vCPU limit, or use fewer or smaller instances",
    "InsufficientInstanceCapacity": "try again later, or another --instance-type or --region",
    "InvalidAMIID.NotFound": "check --ami exists in this region",
}


@contextmanager
def aws_errors() -> Iterator[None]:
    """Turn boto3's exceptions into one-line AwsErrors for the CLI."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        NoRegionError,
        WaiterError,
    )

    try:
        yield
    except ClientError as exc:
        code = _error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        hint = _ERROR_HINTS.get(code)
        raise AwsError(f"AWS refused {exc.operation_name}: {code}: {message}"
                       + (f"; {hint}" if hint else "")) from None
    except NoCredentialsError:
        raise AwsError("no AWS credentials found: configure a profile (--profile) or set "
                       "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") from None
    except NoRegionError:
        raise InputError("no AWS region configured: pass --region or set "
                         "AWS_DEFAULT_REGION") from None
    except WaiterError as exc:
        raise AwsError(f"gave up waiting: {exc}") from None
    except BotoCoreError as exc:
        raise AwsError(f"AWS request failed: {exc}") from None


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def confirm(question: str, *, assume_yes: bool, ask: Ask = input,
            stdin: TextIO | None = None) -> bool:
    """Ask a yes/no question; refuse (InputError) when there is no terminal to ask on."""
    if assume_yes:
        return True
    stream = sys.stdin if stdin is None else stdin
    try:
        interactive = stream is not None and stream.isatty()
    except (AttributeError, OSError, ValueError):
        interactive = False
    if not interactive:
        raise InputError(f"{question} needs a yes, but there is no terminal to ask on; "
                         "pass --yes to go ahead")
    try:
        answer = ask(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


# --- the caller's address ------------------------------------------------------

def normalise_cidr(text: str) -> str:
    """An IPv4 address or network as CIDR; a bare address becomes a /32."""
    try:
        network = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise InputError(f"--ssh-cidr {text!r} is not an IPv4 address or network; "
                         "give e.g. 203.0.113.7/32") from None
    if network.version != 4:
        raise InputError(f"--ssh-cidr {text!r} is IPv6; the security group is IPv4 only: "
                         "give your public IPv4 address")
    if network.prefixlen == 0:
        raise InputError("--ssh-cidr 0.0.0.0/0 would open SSH to the whole internet; "
                         "give your own address as a /32")
    return str(network)


def caller_cidr(url: str = CHECKIP_URL, timeout: float = 5.0) -> str:
    """This machine's public IPv4 address as a /32, as AWS's checkip service sees it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read(64).decode("ascii", "replace").strip()
        address = ipaddress.IPv4Address(text)
    except (OSError, ValueError) as exc:
        raise LtmError(f"could not learn your public IP address from {url} ({exc}); "
                       "pass --ssh-cidr ADDRESS/32") from None
    return f"{address}/32"


# --- look-ups ------------------------------------------------------------------

def find_image(ec2: Any, ami: str | None = None) -> Image:
    """The image to boot: ``ami`` if given, else Canonical's newest Ubuntu 24.04 amd64."""
    if ami is not None:
        images = ec2.describe_images(ImageIds=[ami])["Images"]
        if not images:
            raise InputError(f"--ami {ami} does not exist in this region")
    else:
        images = ec2.describe_images(
            Owners=[CANONICAL_OWNER],
            Filters=[
                {"Name": "name", "Values": [UBUNTU_IMAGE_NAME]},
                {"Name": "architecture", "Values": ["x86_64"]},
                {"Name": "virtualization-type", "Values": ["hvm"]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
        if not images:
            raise AwsError("found no Ubuntu 24.04 amd64 image from Canonical in this region; "
                           "pass --ami IMAGE_ID")
    newest = max(images, key=lambda image: image.get("CreationDate", ""))
    return Image(
        image_id=newest["ImageId"],
        name=newest.get("Name", ""),
        creation_date=newest.get("CreationDate", ""),
        root_device_name=newest.get("RootDeviceName") or "/dev/sda1",
    )


@dataclass(frozen=True)
class _Subnet:
    subnet_id: str
    zone: str
    vpc_id: str


def _default_subnet(ec2: Any, instance_type: str) -> _Subnet:
    # One subnet means one availability zone, which a placement group needs anyway.
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise AwsError("this region has no default VPC; create one with "
                       "`aws ec2 create-default-vpc` or choose another --region")
    vpc_id = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": "default-for-az", "Values": ["true"]},
    ])["Subnets"]
    if not subnets:
        raise AwsError(f"the default VPC {vpc_id} has no default subnets; recreate them with "
                       "`aws ec2 create-default-subnet`")
    subnets.sort(key=lambda s: s["AvailabilityZone"])
    offered = _zones_offering(ec2, instance_type)
    chosen = next((s for s in subnets if s["AvailabilityZone"] in offered), None)
    if chosen is None and offered:
        raise InputError(f"{instance_type} is not offered in any zone with a default subnet; "
                         "choose another --instance-type or --region")
    chosen = chosen or subnets[0]
    return _Subnet(chosen["SubnetId"], chosen["AvailabilityZone"], vpc_id)


def _zones_offering(ec2: Any, instance_type: str) -> set[str]:
    from botocore.exceptions import ClientError

    try:
        offerings = ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        )["InstanceTypeOfferings"]
    except ClientError:
        return set()  # not allowed or not emulated: let run_instances decide
    return {o["Location"] for o in offerings}


def placement_strategy(requested: str, instance_type: str, parties: int) -> str:
    """The placement group strategy to use.

    "cluster" packs instances close together, which is what MPC latency wants,
    but EC2 does not admit burstable (T-family) instances to cluster groups;
    "auto" therefore falls back to "spread" for them (or "partition" beyond
    spread's 7 instances per zone).
    """
    if requested not in PLACEMENT_STRATEGIES:
        raise InputError(f"unknown placement strategy {requested!r}; "
                         f"choose one of {', '.join(PLACEMENT_STRATEGIES)}")
    if requested != "auto":
        chosen = requested
    elif not _BURSTABLE.match(instance_type):
        chosen = "cluster"
    else:
        chosen = "spread" if parties <= _SPREAD_LIMIT_PER_AZ else "partition"
    if chosen == "spread" and parties > _SPREAD_LIMIT_PER_AZ:
        raise InputError(f"a spread placement group holds at most {_SPREAD_LIMIT_PER_AZ} "
                         f"instances per zone, not {parties}; use --placement-strategy "
                         "partition or cluster")
    return chosen


# --- tags ----------------------------------------------------------------------

def _tags(cluster: str, name: str) -> list[dict[str, str]]:
    return [
        {"Key": TAG_CLUSTER, "Value": cluster},
        {"Key": TAG_MANAGED, "Value": "true"},
        {"Key": "Name", "Value": name},
    ]


def _tag_spec(resource_type: str, cluster: str, name: str) -> dict[str, Any]:
    return {"ResourceType": resource_type, "Tags": _tags(cluster, name)}


def _tag_filters(cluster: str | None) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
    if cluster is not None:
        filters.append({"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]})
    return filters


def _cluster_of(resource: dict[str, Any]) -> str | None:
    for tag in resource.get("Tags") or []:
        if tag.get("Key") == TAG_CLUSTER:
            return str(tag.get("Value"))
    return None


def _tag_value(resource: dict[str, Any], key: str) -> str:
    for tag in resource.get("Tags") or []:
        if tag.get("Key") == key:
            return str(tag.get("Value"))
    return ""


def resource_name(cluster: str) -> str:
    """The name of the cluster's security group, key pair and placement group."""
    return f"ltm-harness-{cluster}"


# --- status ----------------------------------------------------------------------

def status(session: Any, cluster: str | None = None) -> list[ClusterStatus]:
    """Every cluster (or just ``cluster``) with live resources, sorted by name."""
    ec2 = session.client("ec2")
    return _cluster_statuses(ec2, cluster)


def _cluster_statuses(ec2: Any, cluster: str | None) -> list[ClusterStatus]:
    filters = _tag_filters(cluster)
    found: dict[str, dict[str, list[Any]]] = {}

    def bucket(resource: dict[str, Any], kind: str, value: Any) -> None:
        name = _cluster_of(resource)
        if name is not None:
            found.setdefault(name, {}).setdefault(kind, []).append(value)

    for instance in _describe_instances(ec2, filters):
        bucket(instance, "instances", _instance_info(instance))
    for group in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
        bucket(group, "security_groups", group["GroupId"])
    for key in ec2.describe_key_pairs(Filters=filters)["KeyPairs"]:
        bucket(key, "key_pairs", key["KeyName"])
    for group in ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]:
        bucket(group, "placement_groups", group["GroupName"])
    return [
        ClusterStatus(
            name=name,
            instances=tuple(sorted(kinds.get("instances", []), key=_party_order)),
            security_groups=tuple(kinds.get("security_groups", [])),
            key_pairs=tuple(kinds.get("key_pairs", [])),
            placement_groups=tuple(kinds.get("placement_groups", [])),
        )
        for name, kinds in sorted(found.items())
    ]


def _paginate(ec2: Any, method: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    for page in ec2.get_paginator(method).paginate(**kwargs):
        yield from page[key]


def _describe_instances(ec2: Any, filters: list[dict[str, Any]], *,
                        ids: list[str] | None = None) -> list[dict[str, Any]]:
    live = [*filters, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    kwargs: dict[str, Any] = {"Filters": live}
    if ids:
        kwargs["InstanceIds"] = ids
    return [instance
            for reservation in _paginate(ec2, "describe_instances", "Reservations", **kwargs)
            for instance in reservation["Instances"]]


def _instance_info(instance: dict[str, Any]) -> InstanceInfo:
    return InstanceInfo(
        instance_id=instance["InstanceId"],
        name=_tag_value(instance, "Name"),
        state=instance["State"]["Name"],
        instance_type=instance.get("InstanceType", ""),
        public_ip=instance.get("PublicIpAddress"),
        private_ip=instance.get("PrivateIpAddress"),
        launch_index=int(instance.get("AmiLaunchIndex", 0)),
        placement_group=(instance.get("Placement") or {}).get("GroupName") or None,
    )


def _party_order(info: InstanceInfo) -> tuple[int, str]:
    return info.launch_index, info.instance_id


# --- up ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    options: UpOptions
    region: str
    image: Image
    subnet: _Subnet
    ssh_cidr: str
    strategy: str
    name: str
    key_file: Path
    inventory: Path
    known_hosts: Path


def up(session: Any, options: UpOptions, *, log: Log = _say, ask: Ask = input,
       stdin: TextIO | None = None) -> UpResult:
    """Launch ``options.parties`` instances and write their hosts inventory.

    Prints the plan and its hourly cost and asks before creating anything. On
    any error or interrupt after that, deletes what it created and re-raises.
    """
    _validate(options)
    region = _region(session)
    ec2 = session.client("ec2")
    plan = _make_plan(ec2, region, options)
    _print_plan(plan, log)
    if not confirm(f"Launch {_count(options)} x {options.instance_type} in {plan.region}?",
                   assume_yes=options.yes, ask=ask, stdin=stdin):
        raise Aborted("not confirmed; nothing was launched")
    created = Created(options.cluster)
    try:
        return _provision(ec2, plan, created, log)
    except BaseException as exc:
        log(f"`ltm aws up` failed ({type(exc).__name__}); removing what it created ...")
        rollback(ec2, created, log=log)
        raise


def _validate(options: UpOptions) -> None:
    if not _CLUSTER_NAME.match(options.cluster):
        raise InputError(f"--cluster {options.cluster!r}: use 1-40 letters, digits and "
                         "hyphens, starting with a letter or digit")
    if not 2 <= options.parties <= MPC_PORT_SPAN:
        raise InputError(f"--parties must be between 2 and {MPC_PORT_SPAN}, "
                         f"got {options.parties}")
    if not 1024 <= options.base_port <= 65535 - MPC_PORT_SPAN + 1:
        raise InputError(f"--base-port must be between 1024 and {65535 - MPC_PORT_SPAN + 1}, "
                         f"got {options.base_port}")
    if options.harness_spec is not None and (not options.harness_spec.strip()
                                             or "\n" in options.harness_spec):
        raise InputError("--harness-spec must be one pip requirement (a name, pin or URL)")
    if options.volume_gb < 8:
        raise InputError(f"--volume-size must be at least 8 GiB, got {options.volume_gb}")


def _make_plan(ec2: Any, region: str, options: UpOptions) -> _Plan:
    # Everything that can fail without cost is checked here, before the question.
    ssh_cidr = normalise_cidr(options.ssh_cidr) if options.ssh_cidr else caller_cidr()
    strategy = placement_strategy(options.placement_strategy, options.instance_type,
                                  options.parties)
    existing = _cluster_statuses(ec2, options.cluster)
    if existing:
        raise InputError(f"cluster {options.cluster!r} already exists in {region} "
                         f"({existing[0].summary()}); choose another --cluster or remove it "
                         f"with `ltm aws down --cluster {options.cluster}`")
    state_dir = options.state_dir or default_state_dir()
    inventory = options.inventory or state_dir / f"{options.cluster}.toml"
    for path in (inventory, inventory.with_suffix(".known_hosts")):
        if path.exists():
            raise InputError(f"{path} already exists; remove it (`ltm aws down --cluster "
                             f"{options.cluster}` does for the default paths) or pass "
                             "--inventory PATH")
    return _Plan(
        options=options,
        region=region,
        image=find_image(ec2, options.ami),
        subnet=_default_subnet(ec2, options.instance_type),
        ssh_cidr=ssh_cidr,
        strategy=strategy,
        name=resource_name(options.cluster),
        key_file=state_dir / f"{options.cluster}.pem",
        inventory=inventory,
        known_hosts=inventory.with_suffix(".known_hosts"),
    )


def _print_plan(plan: _Plan, log: Log) -> None:
    o = plan.options
    log(f"Cluster {o.cluster!r} in {plan.region} ({plan.subnet.zone}): {_count(o)} x "
        f"{o.instance_type}, placement group strategy {plan.strategy!r}")
    log(f"Image: {plan.image.image_id} ({plan.image.name or 'unnamed'})")
    log(f"SSH open to {plan.ssh_cidr}; MPC ports {o.base_port}-"
        f"{o.base_port + MPC_PORT_SPAN - 1} open between the cluster's instances only")
    if o.placement_strategy == "auto" and plan.strategy != "cluster":
        log(f"  (EC2 keeps burstable types such as {o.instance_type} out of 'cluster' "
            "placement groups; choose e.g. --instance-type c5.large for the tightest packing)")
    if o.client:
        log(f"  ({o.parties} servers and one host for the clients)")
    log(cost_estimate(o.instance_type, _count(o)))


def _provision(ec2: Any, plan: _Plan, created: Created, log: Log) -> UpResult:
    _create_placement_group(ec2, plan, created)
    _create_key_pair(ec2, plan, created)
    group_id = _create_security_group(ec2, plan, created)
    ids = _launch(ec2, plan, group_id, created)
    log(f"Launched {', '.join(ids)}; waiting for them to run ...")
    instances = wait_until_running(ec2, ids)
    _name_instances(ec2, plan, instances)
    recorded = _record_host_keys(plan, instances, created, log)
    inventory = _inventory(plan, instances)
    write_inventory(inventory, plan.inventory)
    log(f"Wrote the hosts inventory {plan.inventory}")
    set_up = _setup_hosts(plan, recorded, log)
    return UpResult(
        cluster=plan.options.cluster,
        region=plan.region,
        instances=instances,
        inventory=plan.inventory,
        key_file=plan.key_file,
        known_hosts=plan.known_hosts,
        placement_strategy=plan.strategy,
        host_keys_recorded=recorded,
        set_up=set_up,
        client=plan.options.client,
    )


def _setup_hosts(plan: _Plan, recorded: bool, log: Log) -> bool:
    """`ltm hosts setup` on the new instances, once their OS packages are in."""
    mode = plan.options.setup
    if mode is None:
        return False
    if not recorded:
        log(f"Not set up (--no-wait-ssh): once SSH answers, run `ltm hosts trust "
            f"{plan.inventory}` and `ltm hosts setup {plan.inventory} --mp-spdz {mode}`")
        return False
    from harness.remote import setup_hosts, wait_for_marker

    log("Waiting for the instances' OS packages (cloud-init) ...")
    wait_for_marker(plan.inventory, READY_MARKER, timeout=plan.options.ssh_timeout)
    log(f"Setting up the instances (`ltm hosts setup --mp-spdz {mode}`) ...")
    setup_hosts(plan.inventory, mode=mode, echo=log)
    return True


def _create_placement_group(ec2: Any, plan: _Plan, created: Created) -> None:
    entry = created.add("placement-group", plan.name)
    ec2.create_placement_group(
        GroupName=plan.name,
        Strategy=plan.strategy,
        **({"PartitionCount": 7} if plan.strategy == "partition" else {}),
        TagSpecifications=[_tag_spec("placement-group", plan.options.cluster, plan.name)],
    )
    entry.ids.append(plan.name)


def _create_key_pair(ec2: Any, plan: _Plan, created: Created) -> None:
    entry = created.add("key-pair", plan.name)
    response = ec2.create_key_pair(
        KeyName=plan.name,
        TagSpecifications=[_tag_spec("key-pair", plan.options.cluster, plan.name)],
    )
    entry.ids.append(response.get("KeyPairId", plan.name))
    created.add("local-file", str(plan.key_file))
    _write_atomic(plan.key_file, response["KeyMaterial"], mode=0o600)


def _create_security_group(ec2: Any, plan: _Plan, created: Created) -> str:
    o = plan.options
    entry = created.add("security-group", plan.name)
    group_id = ec2.create_security_group(
        GroupName=plan.name,
        Description=f"ltm-harness cluster {o.cluster}: SSH from one address, MPC among members",
        VpcId=plan.subnet.vpc_id,
        TagSpecifications=[_tag_spec("security-group", o.cluster, plan.name)],
    )["GroupId"]
    entry.ids.append(group_id)
    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
         "IpRanges": [{"CidrIp": plan.ssh_cidr, "Description": "SSH from the ltm caller"}]},
        # Naming the group itself admits exactly the instances that wear it.
        {"IpProtocol": "tcp", "FromPort": o.base_port,
         "ToPort": o.base_port + MPC_PORT_SPAN - 1,
         "UserIdGroupPairs": [{"GroupId": group_id,
                               "Description": "MPC between the cluster's parties"}]},
    ])
    return group_id


def _launch(ec2: Any, plan: _Plan, group_id: str, created: Created) -> list[str]:
    o = plan.options
    entry = created.add("instances", o.cluster)
    response = ec2.run_instances(
        ImageId=plan.image.image_id,
        InstanceType=o.instance_type,
        # MinCount = MaxCount: a cluster with a missing party is useless.
        MinCount=_count(o),
        MaxCount=_count(o),
        KeyName=plan.name,
        Placement={"GroupName": plan.name},
        NetworkInterfaces=[{
            "DeviceIndex": 0,
            "SubnetId": plan.subnet.subnet_id,
            "Groups": [group_id],
            "AssociatePublicIpAddress": True,
            "DeleteOnTermination": True,
        }],
        BlockDeviceMappings=[{
            "DeviceName": plan.image.root_device_name,
            "Ebs": {"VolumeSize": o.volume_gb, "VolumeType": "gp3",
                    "DeleteOnTermination": True},
        }],
        UserData=render_user_data(o.harness_spec),
        MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
        TagSpecifications=[_tag_spec(kind, o.cluster, o.cluster)
                           for kind in ("instance", "volume", "network-interface")],
        # Lets botocore's automatic retries of this call not launch a second cluster.
        ClientToken=uuid.uuid4().hex,
    )
    entry.ids.extend(i["InstanceId"] for i in response["Instances"])
    return list(entry.ids)


def wait_until_running(ec2: Any, ids: list[str], *, delay: int = 5,
                       max_attempts: int = 120) -> tuple[InstanceInfo, ...]:
    """Wait until every instance runs; return them in launch order (party order)."""
    from botocore.exceptions import WaiterError

    try:
        ec2.get_waiter("instance_running").wait(
            InstanceIds=ids, WaiterConfig={"Delay": delay, "MaxAttempts": max_attempts})
    except WaiterError as exc:
        raise AwsError(f"the instances did not reach 'running': {exc}") from None
    reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    infos = [_instance_info(i) for r in reservations for i in r["Instances"]]
    missing = [i.instance_id for i in infos if not i.public_ip or not i.private_ip]
    if missing:
        raise AwsError(f"instance(s) {', '.join(missing)} got no public or private address; "
                       "check the default subnet assigns public IPs")
    return tuple(sorted(infos, key=_party_order))


def _name_instances(ec2: Any, plan: _Plan, instances: tuple[InstanceInfo, ...]) -> None:
    for party, instance in enumerate(instances):
        ec2.create_tags(Resources=[instance.instance_id],
                        Tags=[{"Key": "Name", "Value": f"{plan.options.cluster}-"
                                                       f"{_instance_name(party, plan.options)}"}])


def _record_host_keys(plan: _Plan, instances: tuple[InstanceInfo, ...], created: Created,
                      log: Log) -> bool:
    lines: list[str] = []
    if plan.options.wait_ssh:
        deadline = time.monotonic() + plan.options.ssh_timeout
        for instance in instances:
            assert instance.public_ip is not None  # checked by wait_until_running
            log(f"Waiting for SSH on {instance.public_ip} ...")
            wait_for_ssh(instance.public_ip, 22,
                         timeout=max(1.0, deadline - time.monotonic()))
            lines.append(_scan_host_key(instance.public_ip))
    created.add("local-file", str(plan.known_hosts))
    _write_atomic(plan.known_hosts, "".join(line + "\n" for line in lines), mode=0o644)
    if not lines:
        log(f"Host keys not recorded (--no-wait-ssh): once SSH answers, run "
            f"`ssh-keyscan {' '.join(str(i.public_ip) for i in instances)} >> "
            f"{plan.known_hosts}`")
    return bool(lines)


def _scan_host_key(host: str, attempts: int = 3, pause: float = 5.0) -> str:
    # Trust on first use, seconds after launch, at the address we launched: the
    # narrowest window we can offer without an extra round trip through the console.
    for attempt in range(attempts):
        try:
            return scan_host_key(host, 22)
        except LtmError:
            # sshd may accept connections a moment before it can complete a handshake.
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def _count(options: UpOptions) -> int:
    return options.parties + (1 if options.client else 0)


def _inventory(plan: _Plan, instances: tuple[InstanceInfo, ...]) -> Inventory:
    hosts = tuple(
        Host(name=_instance_name(party, plan.options), ssh_host=str(i.public_ip),
             user=LOGIN_USER, key=str(plan.key_file), mpc_host=str(i.private_ip),
             mp_spdz=REMOTE_MP_SPDZ)
        for party, i in enumerate(instances)
    )
    # The last instance (launch order) is the clients' host with --client.
    parties = plan.options.parties
    return Inventory(hosts=hosts[:parties], known_hosts=plan.known_hosts,
                     base_port=plan.options.base_port, cluster=plan.options.cluster,
                     region=plan.region, client=hosts[parties] if plan.options.client else None)


def _instance_name(index: int, options: UpOptions) -> str:
    return "client" if options.client and index == options.parties else f"p{index}"


# --- undoing -------------------------------------------------------------------------

def rollback(ec2: Any, created: Created, *, log: Log = _say,
             sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Delete what ``created`` records, newest first; return what could not be deleted.

    Keeps going past failures so that one stuck resource does not strand the rest.
    """
    failed: list[str] = []
    for entry in reversed(created.entries):
        try:
            _UNDO[entry.kind](ec2, created.cluster, entry, log, sleep)
        except Exception as exc:  # reported; the rest must still be undone
            failed.append(f"{entry.kind} {entry.name}")
            log(f"  could not remove {entry.kind} {entry.name}: {exc}")
    if failed:
        log(f"Left behind: {', '.join(failed)}; remove them with "
            f"`ltm aws down --cluster {created.cluster}`")
    else:
        log("Removed everything `ltm aws up` had created.")
    return failed


def _undo_instances(ec2: Any, cluster: str, entry: _Entry, log: Log, sleep: Any) -> None:
    # An interrupt inside run_instances leaves no ids; the cluster tag still finds them,
    # and `up` checked that no instance carried it before.
    ids = set(entry.ids) | {i["InstanceId"] for i in _describe_instances(
        ec2, _tag_filters(cluster))}
    if ids:
        log(f"  terminating {', '.join(sorted(ids))} ...")
        _terminate(ec2, sorted(ids))


def _undo_security_group(ec2: Any, cluster: str, entry: _Entry, log: Log, sleep: Any) -> None:
    filters = [*_tag_filters(cluster), {"Name": "group-name", "Values": [entry.name]}]
    for group in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]:
        log(f"  deleting security group {group['GroupId']}")
        _delete_security_group(ec2, group["GroupId"], sleep)


def _undo_key_pair(ec2: Any, cluster: str, entry: _Entry, log: Log, sleep: Any) -> None:
    filters = [*_tag_filters(cluster), {"Name": "key-name", "Values": [entry.name]}]
    for key in ec2.describe_key_pairs(Filters=filters)["KeyPairs"]:
        log(f"  deleting key pair {key['KeyName']}")
        ec2.delete_key_pair(KeyName=key["KeyName"])


def _undo_placement_group(ec2: Any, cluster: str, entry: _Entry, log: Log,
                          sleep: Any) -> None:
    filters = [*_tag_filters(cluster), {"Name": "group-name", "Values": [entry.name]}]
    for group in ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]:
        log(f"  deleting placement group {group['GroupName']}")
        _delete_placement_group(ec2, group["GroupName"], sleep)


def _undo_local_file(ec2: Any, cluster: str, entry: _Entry, log: Log, sleep: Any) -> None:
    path = Path(entry.name)
    if path.exists():
        log(f"  removing {path}")
        path.unlink()


_UNDO: dict[str, Callable[[Any, str, _Entry, Log, Any], None]] = {
    "instances": _undo_instances,
    "security-group": _undo_security_group,
    "key-pair": _undo_key_pair,
    "placement-group": _undo_placement_group,
    "local-file": _undo_local_file,
}


def _terminate(ec2: Any, ids: list[str]) -> None:
    ec2.terminate_instances(InstanceIds=ids)
    # The security and placement groups cannot go while their instances exist.
    ec2.get_waiter("instance_terminated").wait(
        InstanceIds=ids, WaiterConfig={"Delay": 5, "MaxAttempts": 120})


def _retrying(action: Callable[[], None], transient: set[str], gone: set[str],
              sleep: Callable[[float], None], attempts: int = 24, delay: float = 5.0) -> None:
    """Run ``action``, retrying while AWS reports a transient dependency; "gone" is success."""
    from botocore.exceptions import ClientError

    for attempt in range(attempts):
        try:
            action()
            return
        except ClientError as exc:
            code = _error_code(exc)
            if code in gone:
                return
            if code not in transient or attempt == attempts - 1:
                raise
        sleep(delay)


def _delete_security_group(ec2: Any, group_id: str, sleep: Callable[[float], None]) -> None:
    # Network interfaces of just-terminated instances linger for a little while.
    _retrying(lambda: ec2.delete_security_group(GroupId=group_id),
              transient={"DependencyViolation"}, gone={"InvalidGroup.NotFound"}, sleep=sleep)


def _delete_placement_group(ec2: Any, name: str, sleep: Callable[[float], None]) -> None:
    _retrying(lambda: ec2.delete_placement_group(GroupName=name),
              transient={"InvalidPlacementGroup.InUse"},
              gone={"InvalidPlacementGroup.Unknown"}, sleep=sleep)


# --- down ------------------------------------------------------------------------------

def down(session: Any, *, cluster: str | None = None, all_clusters: bool = False,
         state_dir: Path | None = None, yes: bool = False, log: Log = _say,
         ask: Ask = input, stdin: TextIO | None = None,
         sleep: Callable[[float], None] = time.sleep) -> list[DownResult]:
    """Remove a cluster (default: DEFAULT_CLUSTER) or all of them; idempotent.

    Returns one result per cluster that had anything to remove: an empty list
    means there was nothing (a second `down` is a no-op).
    """
    if cluster is not None and all_clusters:
        raise InputError("give either --cluster NAME or --all, not both")
    ec2 = session.client("ec2")
    state_dir = state_dir or default_state_dir()
    targets = _cluster_statuses(ec2, None if all_clusters else cluster or DEFAULT_CLUSTER)
    if not all_clusters:
        name = cluster or DEFAULT_CLUSTER
        if not targets and _local_files(state_dir, name):
            targets = [ClusterStatus(name)]  # AWS side already gone: just tidy up
    if not targets:
        return []
    _ask_before_down(targets, yes=yes, ask=ask, stdin=stdin, log=log)
    return [_teardown(ec2, target, state_dir, log, sleep) for target in targets]


def _ask_before_down(targets: list[ClusterStatus], *, yes: bool, ask: Ask,
                     stdin: TextIO | None, log: Log) -> None:
    for target in targets:
        log(f"Cluster {target.name!r}: {target.summary()}")
    names = ", ".join(repr(t.name) for t in targets)
    if not confirm(f"Delete cluster(s) {names}?", assume_yes=yes, ask=ask, stdin=stdin):
        raise Aborted("not confirmed; nothing was deleted")


def _teardown(ec2: Any, target: ClusterStatus, state_dir: Path, log: Log,
              sleep: Callable[[float], None]) -> DownResult:
    ids = [i.instance_id for i in target.instances]
    if ids:
        log(f"Terminating {', '.join(ids)} ...")
        _terminate(ec2, ids)
    for group_id in target.security_groups:
        log(f"Deleting security group {group_id}")
        _delete_security_group(ec2, group_id, sleep)
    for key in target.key_pairs:
        log(f"Deleting key pair {key}")
        ec2.delete_key_pair(KeyName=key)
    for group in target.placement_groups:
        log(f"Deleting placement group {group}")
        _delete_placement_group(ec2, group, sleep)
    files = _local_files(state_dir, target.name)
    for path in files:
        log(f"Removing {path}")
        path.unlink(missing_ok=True)
    return DownResult(cluster=target.name, terminated=tuple(ids),
                      security_groups=target.security_groups, key_pairs=target.key_pairs,
                      placement_groups=target.placement_groups, local_files=tuple(files))


# --- local state -------------------------------------------------------------------

def default_state_dir() -> Path:
    """Where key files and inventories go: ``$XDG_CONFIG_HOME/ltm-harness/aws``."""
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "ltm-harness" / "aws"


def _local_files(state_dir: Path, cluster: str) -> list[Path]:
    candidates = [state_dir / f"{cluster}{suffix}"
                  for suffix in (".pem", ".toml", ".known_hosts")]
    return [path for path in candidates if path.exists()]


def _write_atomic(path: Path, text: str, *, mode: int) -> None:
    # The key file must never exist, even briefly, with looser permissions.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text, mode=mode)
