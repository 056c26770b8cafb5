"""moto 5 does not emulate EC2 placement groups: :class:`PlacementGroups` keeps them
beside it, through botocore's events, for every test that drives `ltm aws`."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.awsrequest import AWSResponse


def _response(parsed: dict[str, Any], status: int = 200) -> tuple[AWSResponse, dict[str, Any]]:
    return AWSResponse("https://ec2.emulated", status, {}, None), parsed


def _error(code: str, message: str) -> tuple[AWSResponse, dict[str, Any]]:
    return _response({"Error": {"Code": code, "Message": message}}, 400)


class PlacementGroups:
    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        self.members: dict[str, str] = {}  # live instance id -> group name
        self.run_params: list[dict[str, Any]] = []

    def install(self, session: boto3.Session) -> None:
        events = session.events
        events.register("before-parameter-build.ec2.*", self._stash_params)
        events.register("before-call.ec2.CreatePlacementGroup", self._create)
        events.register("before-call.ec2.DescribePlacementGroups", self._describe)
        events.register("before-call.ec2.DeletePlacementGroup", self._delete)
        events.register("before-call.ec2.RunInstances", self._check_run)
        events.register("after-call.ec2.RunInstances", self._after_run)
        events.register("after-call.ec2.TerminateInstances", self._after_terminate)
        events.register("after-call.ec2.DescribeInstances", self._after_describe)

    @staticmethod
    def _stash_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        # before-call only sees the serialised request; keep the API-level parameters.
        context["api_params"] = dict(params)

    def _create(self, context: dict[str, Any], **_: Any) -> Any:
        p = context["api_params"]
        name = p["GroupName"]
        if name in self.groups:
            return _error("InvalidPlacementGroup.Duplicate", f"{name} already exists")
        tags = [t for spec in p.get("TagSpecifications", [])
                if spec["ResourceType"] == "placement-group" for t in spec["Tags"]]
        group = {"GroupName": name, "Strategy": p["Strategy"], "State": "available",
                 "GroupId": f"pg-{len(self.groups):017x}", "Tags": tags}
        if "PartitionCount" in p:
            group["PartitionCount"] = p["PartitionCount"]
        self.groups[name] = group
        return _response({"PlacementGroup": group})

    def _describe(self, context: dict[str, Any], **_: Any) -> Any:
        p = context["api_params"]
        groups = list(self.groups.values())
        for name in p.get("GroupNames", []):
            if name not in self.groups:
                return _error("InvalidPlacementGroup.Unknown", f"{name} is unknown")
        if p.get("GroupNames"):
            groups = [g for g in groups if g["GroupName"] in p["GroupNames"]]
        for f in p.get("Filters", []):
            groups = [g for g in groups if self._value(g, f["Name"]) in f["Values"]]
        return _response({"PlacementGroups": groups})

    @staticmethod
    def _value(group: dict[str, Any], name: str) -> str | None:
        if name.startswith("tag:"):
            return next((t["Value"] for t in group["Tags"] if t["Key"] == name[4:]), None)
        return {"group-name": group["GroupName"], "strategy": group["Strategy"]}[name]

    def _delete(self, context: dict[str, Any], **_: Any) -> Any:
        name = context["api_params"]["GroupName"]
        if name not in self.groups:
            return _error("InvalidPlacementGroup.Unknown", f"{name} is unknown")
        if name in self.members.values():
            return _error("InvalidPlacementGroup.InUse", f"{name} has running instances")
        del self.groups[name]
        return _response({})

    def _check_run(self, context: dict[str, Any], **_: Any) -> Any:
        params = context["api_params"]
        self.run_params.append(params)
        name = params.get("Placement", {}).get("GroupName")
        if name and name not in self.groups:
            return _error("InvalidPlacementGroup.Unknown", f"{name} is unknown")
        return None

    def _after_run(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        name = context["api_params"].get("Placement", {}).get("GroupName")
        for instance in parsed.get("Instances", []):
            if name:
                self.members[instance["InstanceId"]] = name
                instance.setdefault("Placement", {})["GroupName"] = name

    def _after_terminate(self, parsed: dict[str, Any], **_: Any) -> None:
        for change in parsed.get("TerminatingInstances", []):
            self.members.pop(change["InstanceId"], None)

    def _after_describe(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation["Instances"]:
                group = self.members.get(instance["InstanceId"], "")
                instance.setdefault("Placement", {})["GroupName"] = group
