"""Finding things in EC2: the image, the subnet, the placement strategy, and every
cluster's resources by their tags (`ltm aws status`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError

from .session import AwsError
from .state import (
    LIVE_STATES,
    PLACEMENT_STRATEGIES,
    TAG_CLUSTER,
    TAG_MANAGED,
    ClusterStatus,
    Image,
    InstanceInfo,
)

__all__ = [
    "CANONICAL_OWNER",
    "Subnet",
    "cluster_statuses",
    "default_subnet",
    "describe_instances",
    "find_image",
    "instance_info",
    "party_order",
    "placement_strategy",
    "resource_name",
    "status",
    "tag_filters",
    "tag_spec",
]

CANONICAL_OWNER = "099720109477"
# Canonical names 24.04 images ".../hvm-ssd-gp3/..."; older releases used "hvm-ssd".
UBUNTU_IMAGE_NAME = "ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*"
_SPREAD_LIMIT_PER_AZ = 7
_BURSTABLE = re.compile(r"^t\d[a-z]*\.")


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
class Subnet:
    subnet_id: str
    zone: str
    vpc_id: str


def default_subnet(ec2: Any, instance_type: str) -> Subnet:
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
    return Subnet(chosen["SubnetId"], chosen["AvailabilityZone"], vpc_id)


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


def tag_spec(resource_type: str, cluster: str, name: str) -> dict[str, Any]:
    return {"ResourceType": resource_type, "Tags": _tags(cluster, name)}


def tag_filters(cluster: str | None) -> list[dict[str, Any]]:
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
    return cluster_statuses(ec2, cluster)


def cluster_statuses(ec2: Any, cluster: str | None) -> list[ClusterStatus]:
    filters = tag_filters(cluster)
    found: dict[str, dict[str, list[Any]]] = {}

    def bucket(resource: dict[str, Any], kind: str, value: Any) -> None:
        name = _cluster_of(resource)
        if name is not None:
            found.setdefault(name, {}).setdefault(kind, []).append(value)

    for instance in describe_instances(ec2, filters):
        bucket(instance, "instances", instance_info(instance))
    for group in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
        bucket(group, "security_groups", group["GroupId"])
    for key in ec2.describe_key_pairs(Filters=filters)["KeyPairs"]:
        bucket(key, "key_pairs", key["KeyName"])
    for group in ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]:
        bucket(group, "placement_groups", group["GroupName"])
    return [
        ClusterStatus(
            name=name,
            instances=tuple(sorted(kinds.get("instances", []), key=party_order)),
            security_groups=tuple(kinds.get("security_groups", [])),
            key_pairs=tuple(kinds.get("key_pairs", [])),
            placement_groups=tuple(kinds.get("placement_groups", [])),
        )
        for name, kinds in sorted(found.items())
    ]


def _paginate(ec2: Any, method: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    for page in ec2.get_paginator(method).paginate(**kwargs):
        yield from page[key]


def describe_instances(ec2: Any, filters: list[dict[str, Any]], *,
                        ids: list[str] | None = None) -> list[dict[str, Any]]:
    live = [*filters, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    kwargs: dict[str, Any] = {"Filters": live}
    if ids:
        kwargs["InstanceIds"] = ids
    return [instance
            for reservation in _paginate(ec2, "describe_instances", "Reservations", **kwargs)
            for instance in reservation["Instances"]]


def instance_info(instance: dict[str, Any]) -> InstanceInfo:
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


def party_order(info: InstanceInfo) -> tuple[int, str]:
    return info.launch_index, info.instance_id

