"""`ltm aws up | status | down`: MPC clusters on EC2.

The handlers only translate arguments and print results; the work is done by
the plain functions in :mod:`harness.infra` (the repository's ``infra/``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness import infra as aws
from harness.cli.common import number
from harness.errors import InputError
from harness.remote import DEFAULT_BASE_PORT

__all__ = ["add_commands"]


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "aws",
        description="MPC clusters on EC2. Uses the standard AWS configuration "
                    "(profiles, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL).")
    commands = parser.add_subparsers(dest="aws_command", metavar="ACTION", required=True)
    _add_up(commands)
    _add_status(commands)
    _add_down(commands)


def _add_aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help="AWS profile (default: the standard AWS lookup)")
    parser.add_argument("--region", help="AWS region (default: the profile's or "
                                         "AWS_DEFAULT_REGION)")


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where key files and inventories live "
                             f"(default: {aws.default_state_dir()})")


def _add_up(commands: Any) -> None:
    p = commands.add_parser(
        "up", help="launch instances and write a hosts inventory",
        description="Launch one instance per party in one placement group, write the hosts "
                    "inventory, and (once SSH answers) run `ltm hosts setup` on them: a wheel "
                    "of this harness and MP-SPDZ.")
    p.add_argument("--parties", "-S", required=True, metavar="S",
                   type=number("--parties", low=2, high=aws.MPC_PORT_SPAN, integer=True),
                   help=f"number of parties (instances), in [2, {aws.MPC_PORT_SPAN}]")
    p.add_argument("--instance-type", default=aws.DEFAULT_INSTANCE_TYPE,
                   help=f"EC2 instance type (default: {aws.DEFAULT_INSTANCE_TYPE})")
    p.add_argument("--cluster", default=aws.DEFAULT_CLUSTER,
                   help=f"cluster name, used in tags and file names "
                        f"(default: {aws.DEFAULT_CLUSTER})")
    _add_aws_options(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--no-wait-ssh", dest="wait_ssh", action="store_false",
                   help="do not wait for SSH to answer (host keys are then not recorded)")
    p.add_argument("--ssh-timeout", default=600.0, metavar="SECONDS",
                   type=number("--ssh-timeout", low=0, high=86400, open_low=True),
                   help="how long to wait for SSH on all instances, in (0, 86400] "
                        "(default: 600)")
    p.add_argument("--ami", help="image id (default: the newest Ubuntu 24.04 amd64 "
                                 "image from Canonical)")
    p.add_argument("--mp-spdz", dest="setup", choices=("release", "local"), default="release",
                   help="how `ltm hosts setup` (run once SSH answers) gives the instances "
                        "MP-SPDZ: release (each downloads the official one) or local (upload "
                        "this machine's) (default: release)")
    p.add_argument("--client", action="store_true",
                   help="one more instance as the inventory's [client] host, which prepares "
                        "and sends the clients' shares inside the region (the same as "
                        "--client-hosts 1)")
    p.add_argument("--client-hosts", default=None, metavar="N",
                   type=number("--client-hosts", low=0, high=aws.MAX_CLIENT_HOSTS,
                               integer=True),
                   help="N more instances for the clients, in [0, "
                        f"{aws.MAX_CLIENT_HOSTS}]: the inventory's [client] host for 1, "
                        "[[client]] hosts client0, client1, ... for more, each preparing "
                        "its share of the clients and streaming it to every server "
                        "(default: 0, or 1 with --client)")
    p.add_argument("--no-setup", dest="setup", action="store_const", const=None,
                   help="only launch and write the inventory; run `ltm hosts setup` later")
    p.add_argument("--harness-spec", default=None, metavar="SPEC",
                   help="let the instances pip-install a published harness (a version pin "
                        "or git+https URL) instead of the wheel `ltm hosts setup` uploads")
    p.add_argument("--ssh-cidr", help="address allowed to SSH in (default: your public "
                                      "address, as a /32, from checkip.amazonaws.com)")
    p.add_argument("--base-port", default=DEFAULT_BASE_PORT,
                   type=number("--base-port", low=1024, high=65535 - aws.MPC_PORT_SPAN + 1,
                               integer=True),
                   help=f"first MPC port (server i listens on it + i); {aws.MPC_PORT_SPAN} ports "
                        "are opened to the cluster's own instances only, the parties and "
                        f"the client hosts (default: {DEFAULT_BASE_PORT})")
    p.add_argument("--placement-strategy", default="auto", choices=aws.PLACEMENT_STRATEGIES,
                   help="placement group strategy; auto: cluster, or spread for burstable "
                        "(t3) types, which EC2 keeps out of cluster groups (default: auto)")
    # 16 TiB: the largest EBS volume of the general-purpose types.
    p.add_argument("--volume-size", default=aws.DEFAULT_VOLUME_GB, metavar="GIB",
                   type=number("--volume-size", low=8, high=16384, integer=True),
                   help=f"root volume size, in [8, 16384] (default: {aws.DEFAULT_VOLUME_GB})")
    p.add_argument("--inventory", type=Path, default=None,
                   help="where to write the hosts inventory "
                        "(default: <state dir>/<cluster>.toml)")
    _add_state_dir(p)
    p.set_defaults(func=_up)


def _add_status(commands: Any) -> None:
    p = commands.add_parser("status", help="list clusters and their instances",
                            description="List the clusters (by tag) and their instances.")
    p.add_argument("--cluster", help="only this cluster (default: all)")
    _add_aws_options(p)
    p.set_defaults(func=_status)


def _add_down(commands: Any) -> None:
    p = commands.add_parser(
        "down", help="terminate a cluster and delete its resources",
        description="Terminate every instance tagged with the cluster and delete its security "
                    "group, key pair and placement group. Running it again is harmless.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--cluster", help=f"the cluster (default: {aws.DEFAULT_CLUSTER})")
    which.add_argument("--all", dest="all_clusters", action="store_true",
                       help="every cluster ltm-harness manages in the region")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    _add_aws_options(p)
    _add_state_dir(p)
    p.set_defaults(func=_down)


# --- handlers -------------------------------------------------------------------

def _up(args: argparse.Namespace) -> int:
    options = aws.UpOptions(
        parties=args.parties, cluster=args.cluster, instance_type=args.instance_type,
        ami=args.ami, ssh_cidr=args.ssh_cidr, harness_spec=args.harness_spec, setup=args.setup,
        client_hosts=_client_hosts(args),
        state_dir=args.state_dir, inventory=args.inventory, base_port=args.base_port,
        placement_strategy=args.placement_strategy, volume_gb=args.volume_size,
        wait_ssh=args.wait_ssh, ssh_timeout=args.ssh_timeout, yes=args.yes,
    )
    session = aws.make_session(args.profile, args.region)
    with aws.aws_errors():
        result = aws.up(session, options)
    _print_up(result)
    return 0


def _client_hosts(args: argparse.Namespace) -> int:
    """How many client hosts: ``--client`` is ``--client-hosts 1``."""
    if args.client_hosts is None:
        return 1 if args.client else 0
    if args.client and args.client_hosts != 1:
        raise InputError(f"--client means --client-hosts 1, which contradicts --client-hosts "
                         f"{args.client_hosts}; drop --client")
    return int(args.client_hosts)


def _print_up(result: aws.UpResult) -> None:
    print(f"Cluster {result.cluster!r} is up in {result.region}:")
    for name, instance in zip(result.names, result.instances, strict=True):
        print(f"  {name}  {instance.instance_id}  public {instance.public_ip}  "
              f"private {instance.private_ip}")
    print(f"Inventory: {result.inventory}")
    print(f"SSH key:   {result.key_file}")
    first = result.instances[0]
    if result.set_up:
        print(f"The instances are set up; check them with: ltm hosts check {result.inventory}")
    else:
        print("Once the instances finish installing their OS packages (ssh -i "
              f"{result.key_file} ubuntu@{first.public_ip} cloud-init status --wait), set "
              f"them up with: ltm hosts setup {result.inventory}")
    print(f"Remove the cluster with: ltm aws down --cluster {result.cluster}")


def _status(args: argparse.Namespace) -> int:
    session = aws.make_session(args.profile, args.region)
    with aws.aws_errors():
        clusters = aws.status(session, args.cluster)
    where = session.region_name or "the default region"
    if not clusters:
        which = f"cluster {args.cluster!r}" if args.cluster else "ltm-harness clusters"
        print(f"No {which} in {where}.")
        return 0
    for cluster in clusters:
        print(f"{cluster.name} ({where}): {cluster.summary()}")
        for i in cluster.instances:
            print(f"  {i.name or '-':<20} {i.instance_id}  {i.state:<13} {i.instance_type:<10} "
                  f"public {i.public_ip or '-'}  private {i.private_ip or '-'}")
    return 0


def _down(args: argparse.Namespace) -> int:
    session = aws.make_session(args.profile, args.region)
    with aws.aws_errors():
        results = aws.down(session, cluster=args.cluster, all_clusters=args.all_clusters,
                           state_dir=args.state_dir, yes=args.yes)
        others = [] if results or args.all_clusters else aws.status(session)
    if not results:
        _print_nothing_to_do(args, others)
        return 0
    for r in results:
        print(f"Removed cluster {r.cluster!r}: {len(r.terminated)} instance(s), "
              f"{len(r.security_groups)} security group(s), {len(r.key_pairs)} key pair(s), "
              f"{len(r.placement_groups)} placement group(s), {len(r.local_files)} local file(s)")
    return 0


def _print_nothing_to_do(args: argparse.Namespace, others: list[aws.ClusterStatus]) -> None:
    if args.all_clusters:
        print("Nothing to tear down: no ltm-harness clusters in this region.")
        return
    name = args.cluster or aws.DEFAULT_CLUSTER
    print(f"Nothing to tear down for cluster {name!r}: it has no resources left.")
    if others:
        print(f"Other clusters here: {', '.join(c.name for c in others)} "
              "(use --cluster NAME or --all)")
