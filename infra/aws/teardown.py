"""Removing clusters: `ltm aws down`, and `up`'s rollback of what it had made.

Both only delete resources that carry the cluster's tag, and keep going past a
resource that will not go, so that one stuck resource does not strand the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from harness.errors import InputError
from harness.retry import retry

from .lookup import cluster_statuses, describe_instances, tag_filters
from .session import Aborted, confirm, error_code, say
from .state import (
    DEFAULT_CLUSTER,
    Ask,
    ClusterStatus,
    Created,
    DownResult,
    Entry,
    Log,
    default_state_dir,
    local_files,
)

__all__ = ["down", "rollback"]


# --- undoing -------------------------------------------------------------------------

def rollback(ec2: Any, created: Created, *, log: Log = say,
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


def _undo_instances(ec2: Any, cluster: str, entry: Entry, log: Log, sleep: Any) -> None:
    # An interrupt inside run_instances leaves no ids; the cluster tag still finds them,
    # and `up` checked that no instance carried it before.
    ids = set(entry.ids) | {i["InstanceId"] for i in describe_instances(
        ec2, tag_filters(cluster))}
    if ids:
        log(f"  terminating {', '.join(sorted(ids))} ...")
        _terminate(ec2, sorted(ids))


def _undo_security_group(ec2: Any, cluster: str, entry: Entry, log: Log, sleep: Any) -> None:
    filters = [*tag_filters(cluster), {"Name": "group-name", "Values": [entry.name]}]
    for group in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]:
        log(f"  deleting security group {group['GroupId']}")
        _delete_security_group(ec2, group["GroupId"], sleep)


def _undo_key_pair(ec2: Any, cluster: str, entry: Entry, log: Log, sleep: Any) -> None:
    filters = [*tag_filters(cluster), {"Name": "key-name", "Values": [entry.name]}]
    for key in ec2.describe_key_pairs(Filters=filters)["KeyPairs"]:
        log(f"  deleting key pair {key['KeyName']}")
        ec2.delete_key_pair(KeyName=key["KeyName"])


def _undo_placement_group(ec2: Any, cluster: str, entry: Entry, log: Log,
                          sleep: Any) -> None:
    filters = [*tag_filters(cluster), {"Name": "group-name", "Values": [entry.name]}]
    for group in ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]:
        log(f"  deleting placement group {group['GroupName']}")
        _delete_placement_group(ec2, group["GroupName"], sleep)


def _undo_local_file(ec2: Any, cluster: str, entry: Entry, log: Log, sleep: Any) -> None:
    path = Path(entry.name)
    if path.exists():
        log(f"  removing {path}")
        path.unlink()


_UNDO: dict[str, Callable[[Any, str, Entry, Log, Any], None]] = {
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


def _delete(action: Callable[[], None], transient: set[str], gone: set[str],
            sleep: Callable[[float], None], attempts: int = 24, delay: float = 5.0) -> None:
    """Run ``action``, retrying while AWS reports a transient dependency; "gone" is success."""
    from botocore.exceptions import ClientError

    def once() -> None:
        try:
            action()
        except ClientError as exc:
            if error_code(exc) not in gone:
                raise

    retry(once, when=lambda exc: isinstance(exc, ClientError) and error_code(exc) in transient,
          attempts=attempts, delay=delay, sleep=sleep)


def _delete_security_group(ec2: Any, group_id: str, sleep: Callable[[float], None]) -> None:
    # Network interfaces of just-terminated instances linger for a little while.
    _delete(lambda: ec2.delete_security_group(GroupId=group_id),
            transient={"DependencyViolation"}, gone={"InvalidGroup.NotFound"}, sleep=sleep)


def _delete_placement_group(ec2: Any, name: str, sleep: Callable[[float], None]) -> None:
    _delete(lambda: ec2.delete_placement_group(GroupName=name),
            transient={"InvalidPlacementGroup.InUse"},
            gone={"InvalidPlacementGroup.Unknown"}, sleep=sleep)


# --- down ------------------------------------------------------------------------------

def down(session: Any, *, cluster: str | None = None, all_clusters: bool = False,
         state_dir: Path | None = None, yes: bool = False, log: Log = say,
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
    targets = cluster_statuses(ec2, None if all_clusters else cluster or DEFAULT_CLUSTER)
    if not all_clusters:
        name = cluster or DEFAULT_CLUSTER
        if not targets and local_files(state_dir, name):
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
    files = local_files(state_dir, target.name)
    for path in files:
        log(f"Removing {path}")
        path.unlink(missing_ok=True)
    return DownResult(cluster=target.name, terminated=tuple(ids),
                      security_groups=target.security_groups, key_pairs=target.key_pairs,
                      placement_groups=target.placement_groups, local_files=tuple(files))

