"""`ltm aws up`: plan, ask, then create a cluster and write its hosts inventory.

`up` records each resource in a :class:`~.state.Created` log as it makes it;
on any error or interrupt it undoes exactly those resources, newest first
(:func:`~.teardown.rollback`), and re-raises. After a signal (SIGINT, SIGTERM or
SIGHUP, which the CLI raises in the main thread where `up` waits) it first says
in one line how far each instance had got, and the undo is given
:data:`_ROLLBACK_SECONDS`: the command ends within 2 seconds, and what could not go
that fast (groups whose instances are still shutting down) is named for
`ltm aws down`.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.errors import InputError, LtmError
from harness.remote import Host, Inventory, write_inventory
from harness.retry import retry

from .._pricing import cost_estimate
from .._sleep import nap
from .._ssh import scan_host_key, wait_for_ssh
from .._userdata import LOGIN_USER, READY_MARKER, REMOTE_MP_SPDZ, render_user_data
from .lookup import (
    Subnet,
    cluster_statuses,
    default_subnet,
    find_image,
    instance_info,
    party_order,
    placement_strategy,
    resource_name,
    tag_spec,
)
from .session import Aborted, AwsError, caller_cidr, confirm, normalise_cidr, region_of, say
from .state import (
    MAX_CLIENT_HOSTS,
    MPC_PORT_SPAN,
    Ask,
    Created,
    Image,
    InstanceInfo,
    Log,
    UpOptions,
    UpResult,
    default_state_dir,
    instance_names,
    write_state_file,
)
from .teardown import POLL_SECONDS, rollback, wait_for_states

__all__ = ["up", "wait_until_running"]

# How long an interrupted `up` spends undoing what it made: with the CLI's own exit,
# inside the 2 seconds a stopped command may take.
_ROLLBACK_SECONDS = 1.2

_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}$")


@dataclass(frozen=True)
class _Plan:
    options: UpOptions
    region: str
    image: Image
    subnet: Subnet
    ssh_cidr: str
    strategy: str
    name: str
    key_file: Path
    inventory: Path
    known_hosts: Path


def up(session: Any, options: UpOptions, *, log: Log = say, ask: Ask = input,
       stdin: TextIO | None = None) -> UpResult:
    """Launch ``options.parties`` instances (and ``options.client_hosts`` more for the
    clients) and write their hosts inventory.

    Prints the plan and its hourly cost and asks before creating anything. On
    any error or interrupt after that, deletes what it created and re-raises.
    """
    _validate(options)
    region = region_of(session)
    ec2 = session.client("ec2")
    plan = _make_plan(ec2, region, options)
    _print_plan(plan, log)
    if not confirm(f"Launch {_count(options)} x {options.instance_type} in {plan.region}?",
                   assume_yes=options.yes, ask=ask, stdin=stdin):
        raise Aborted("not confirmed; nothing was launched")
    created = Created(options.cluster)
    progress = _Progress()
    try:
        return _provision(ec2, plan, created, log, progress)
    except KeyboardInterrupt:
        log(progress.interrupted())
        rollback(ec2, created, log=log, within=_ROLLBACK_SECONDS)
        raise
    except BaseException as exc:
        log(f"`ltm aws up` failed ({type(exc).__name__}); removing what it created ...")
        rollback(ec2, created, log=log)
        raise


@dataclass
class _Progress:
    """How far `up` got, for the one line an interrupt prints."""

    stage: str = "creating the placement group, key pair and security group"
    launched: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    answered: list[str] = field(default_factory=list)  # instances whose SSH answered

    def interrupted(self) -> str:
        def ids(which: Iterable[str]) -> str:
            return ", ".join(i for i in self.launched if i in set(which)) or "none"

        if not self.launched:
            return f"up interrupted while {self.stage}: no instance launched; removing " \
                   "what it created"
        return (f"up interrupted while {self.stage}: {len(self.launched)} instance(s) "
                f"launched ({', '.join(self.launched)}); running: {ids(self.running)}; "
                f"SSH answered: {ids(self.answered)}; removing what it created")


def _validate(options: UpOptions) -> None:
    if not _CLUSTER_NAME.match(options.cluster):
        raise InputError(f"--cluster {options.cluster!r}: use 1-40 letters, digits and "
                         "hyphens, starting with a letter or digit")
    if not 2 <= options.parties <= MPC_PORT_SPAN:
        raise InputError(f"--parties must be between 2 and {MPC_PORT_SPAN}, "
                         f"got {options.parties}")
    if not 0 <= options.client_hosts <= MAX_CLIENT_HOSTS:
        raise InputError(f"--client-hosts must be between 0 and {MAX_CLIENT_HOSTS}, got "
                         f"{options.client_hosts}; for more, give each group of clients "
                         "a cluster of its own")
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
    # The client hosts share the placement group: spread's limit counts them too.
    strategy = placement_strategy(options.placement_strategy, options.instance_type,
                                  _count(options))
    existing = cluster_statuses(ec2, options.cluster)
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
        subnet=default_subnet(ec2, options.instance_type),
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
    log(f"SSH open to {plan.ssh_cidr}; MPC and stream ports {o.base_port}-"
        f"{o.base_port + MPC_PORT_SPAN - 1} open between the cluster's instances only")
    if o.placement_strategy == "auto" and plan.strategy != "cluster":
        log(f"  (EC2 keeps burstable types such as {o.instance_type} out of 'cluster' "
            "placement groups; choose e.g. --instance-type c5.large for the tightest packing)")
    if o.client_hosts:
        hosts = "one host" if o.client_hosts == 1 else f"{o.client_hosts} hosts"
        log(f"  ({o.parties} servers and {hosts} for the clients, which stream their "
            "shares to every server)")
    log(cost_estimate(o.instance_type, _count(o)))


def _provision(ec2: Any, plan: _Plan, created: Created, log: Log,
               progress: _Progress) -> UpResult:
    _create_placement_group(ec2, plan, created)
    _create_key_pair(ec2, plan, created)
    group_id = _create_security_group(ec2, plan, created)
    progress.stage = "launching the instances"
    ids = _launch(ec2, plan, group_id, created)
    progress.launched = list(ids)
    progress.stage = "waiting for the instances to run"
    log(f"Launched {', '.join(ids)}; waiting for them to run ...")
    instances = wait_until_running(ec2, ids, running=progress.running)
    progress.running.update(ids)
    _name_instances(ec2, plan, instances)
    progress.stage = "waiting for SSH"
    recorded = _record_host_keys(plan, instances, created, log, progress.answered)
    progress.stage = "writing the hosts inventory"
    inventory = _inventory(plan, instances)
    write_inventory(inventory, plan.inventory)
    log(f"Wrote the hosts inventory {plan.inventory}")
    progress.stage = "setting up the instances"
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
        client_hosts=plan.options.client_hosts,
        names=instance_names(plan.options.parties, plan.options.client_hosts),
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
        TagSpecifications=[tag_spec("placement-group", plan.options.cluster, plan.name)],
    )
    entry.ids.append(plan.name)


def _create_key_pair(ec2: Any, plan: _Plan, created: Created) -> None:
    entry = created.add("key-pair", plan.name)
    response = ec2.create_key_pair(
        KeyName=plan.name,
        TagSpecifications=[tag_spec("key-pair", plan.options.cluster, plan.name)],
    )
    entry.ids.append(response.get("KeyPairId", plan.name))
    created.add("local-file", str(plan.key_file))
    write_state_file(plan.key_file, response["KeyMaterial"], mode=0o600)


def _create_security_group(ec2: Any, plan: _Plan, created: Created) -> str:
    o = plan.options
    entry = created.add("security-group", plan.name)
    group_id = ec2.create_security_group(
        GroupName=plan.name,
        Description=f"ltm-harness cluster {o.cluster}: SSH from one address, MPC among members",
        VpcId=plan.subnet.vpc_id,
        TagSpecifications=[tag_spec("security-group", o.cluster, plan.name)],
    )["GroupId"]
    entry.ids.append(group_id)
    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
         "IpRanges": [{"CidrIp": plan.ssh_cidr, "Description": "SSH from the ltm caller"}]},
        # Naming the group itself admits exactly the instances that wear it: the parties
        # and the client hosts, which stream their shares to base_port + i of server i.
        {"IpProtocol": "tcp", "FromPort": o.base_port,
         "ToPort": o.base_port + MPC_PORT_SPAN - 1,
         "UserIdGroupPairs": [{"GroupId": group_id,
                               "Description": "MPC and client streams within the cluster"}]},
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
        TagSpecifications=[tag_spec(kind, o.cluster, o.cluster)
                           for kind in ("instance", "volume", "network-interface")],
        # Lets botocore's automatic retries of this call not launch a second cluster.
        ClientToken=uuid.uuid4().hex,
    )
    entry.ids.extend(i["InstanceId"] for i in response["Instances"])
    return list(entry.ids)


def wait_until_running(ec2: Any, ids: list[str], *, delay: float = POLL_SECONDS,
                       max_attempts: int = 120, running: set[str] | None = None,
                       sleep: Callable[[float], None] = nap,
                       ) -> tuple[InstanceInfo, ...]:
    """Wait until every instance runs; return them in launch order (party order).

    ``running`` collects the ids seen running so far (for an interrupt's report).
    """
    described = wait_for_states(ec2, ids, "running",
                                fatal=("shutting-down", "terminated", "stopping"),
                                reached=running, delay=delay, max_attempts=max_attempts,
                                sleep=sleep)
    infos = [instance_info(i) for i in described]
    missing = [i.instance_id for i in infos if not i.public_ip or not i.private_ip]
    if missing:
        raise AwsError(f"instance(s) {', '.join(missing)} got no public or private address; "
                       "check the default subnet assigns public IPs")
    return tuple(sorted(infos, key=party_order))


def _name_instances(ec2: Any, plan: _Plan, instances: tuple[InstanceInfo, ...]) -> None:
    names = instance_names(plan.options.parties, plan.options.client_hosts)
    for name, instance in zip(names, instances, strict=True):
        ec2.create_tags(Resources=[instance.instance_id],
                        Tags=[{"Key": "Name", "Value": f"{plan.options.cluster}-{name}"}])


def _record_host_keys(plan: _Plan, instances: tuple[InstanceInfo, ...], created: Created,
                      log: Log, answered: list[str]) -> bool:
    lines: list[str] = []
    if plan.options.wait_ssh:
        deadline = time.monotonic() + plan.options.ssh_timeout
        for instance in instances:
            assert instance.public_ip is not None  # checked by wait_until_running
            log(f"Waiting for SSH on {instance.public_ip} ...")
            wait_for_ssh(instance.public_ip, 22,
                         timeout=max(1.0, deadline - time.monotonic()))
            lines.append(_scan_host_key(instance.public_ip))
            answered.append(instance.instance_id)
    created.add("local-file", str(plan.known_hosts))
    write_state_file(plan.known_hosts, "".join(line + "\n" for line in lines), mode=0o644)
    if not lines:
        log(f"Host keys not recorded (--no-wait-ssh): once SSH answers, run "
            f"`ssh-keyscan {' '.join(str(i.public_ip) for i in instances)} >> "
            f"{plan.known_hosts}`")
    return bool(lines)


def _scan_host_key(host: str, attempts: int = 3, pause: float = 5.0) -> str:
    # Trust on first use, seconds after launch, at the address we launched: the
    # narrowest window we can offer without an extra round trip through the console.
    # sshd may accept connections a moment before it can complete a handshake.
    return retry(lambda: scan_host_key(host, 22), when=LtmError, attempts=attempts,
                 delay=pause, sleep=nap)


def _count(options: UpOptions) -> int:
    return options.parties + options.client_hosts


def _inventory(plan: _Plan, instances: tuple[InstanceInfo, ...]) -> Inventory:
    names = instance_names(plan.options.parties, plan.options.client_hosts)
    hosts = tuple(
        Host(name=name, ssh_host=str(i.public_ip), user=LOGIN_USER, key=str(plan.key_file),
             mpc_host=str(i.private_ip), mp_spdz=REMOTE_MP_SPDZ)
        for name, i in zip(names, instances, strict=True)
    )
    # In launch order, the parties come first and the client hosts after them; the
    # inventory writes one client host as [client], several as [[client]] entries.
    parties = plan.options.parties
    return Inventory(hosts=hosts[:parties], known_hosts=plan.known_hosts,
                     base_port=plan.options.base_port, cluster=plan.options.cluster,
                     region=plan.region, clients=hosts[parties:])

