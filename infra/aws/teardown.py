"""Removing clusters: `ltm aws down`, and `up`'s rollback of what it had made.

Both only delete resources that carry the cluster's tag, and keep going past a
resource that will not go, so that one stuck resource does not strand the rest.

Both are stopped by a signal within a moment: waiting on EC2 is a polling loop
(:func:`wait_for_states`) whose sleeps a signal cuts. An interrupted `down` says
what it had removed and leaves what is left for a second `down`, which finds it
by its tags (a terminating instance still counts); an interrupted `up` rolls back
within a time limit (:func:`rollback`'s ``within``) and names what it left for
`down`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

from harness.errors import InputError
from harness.remote import Stop, Stopped
from harness.retry import retry

from .._sleep import nap
from .lookup import cluster_statuses, describe_instances, tag_filters
from .session import Aborted, AwsError, confirm, error_code, say
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

__all__ = ["down", "rollback", "wait_for_states"]

# How often a wait asks EC2 again (the boto3 waiters' own delay).
POLL_SECONDS = 5.0


# --- waiting ---------------------------------------------------------------------------

def wait_for_states(ec2: Any, ids: list[str], wanted: str, *, fatal: Collection[str] = (),
                    reached: set[str] | None = None, delay: float = POLL_SECONDS,
                    max_attempts: int = 120,
                    sleep: Callable[[float], None] = nap) -> list[dict[str, Any]]:
    """Poll until every instance of ``ids`` is in state ``wanted``; their descriptions.

    Stands in for boto3's waiters, which sleep where nothing can cut them short: here
    every sleep is ``sleep``, which a signal in the main thread (or a :class:`Stop`'s
    ``sleep``) ends at once. ``reached`` collects, as the wait goes on, the ids already
    there, so an interrupted caller can say which were. An instance in a ``fatal``
    state, or not there after ``max_attempts`` polls, is an AwsError.
    """
    from botocore.exceptions import ClientError

    for attempt in range(max_attempts):
        try:
            reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
        except ClientError as exc:
            # A just-launched instance may not be visible yet (EC2 is eventually consistent).
            if error_code(exc) != "InvalidInstanceID.NotFound":
                raise
            reservations = []
        instances = [i for r in reservations for i in r["Instances"]]
        states = {i["InstanceId"]: i["State"]["Name"] for i in instances}
        if reached is not None:
            reached.update(i for i, s in states.items() if s == wanted)
        bad = sorted(f"{i} ({s})" for i, s in states.items() if s in fatal)
        if bad:
            raise AwsError(f"instance(s) {', '.join(bad)} will not reach '{wanted}'; see "
                           "their state reason in the EC2 console")
        if len(states) == len(set(ids)) and all(s == wanted for s in states.values()):
            return instances
        if attempt + 1 < max_attempts:
            sleep(delay)
    late = sorted(set(ids) - (reached or set()))
    raise AwsError(f"instance(s) {', '.join(late) or ', '.join(ids)} did not reach "
                   f"'{wanted}' within {delay * max_attempts:g} s")


# --- undoing -------------------------------------------------------------------------

def rollback(ec2: Any, created: Created, *, log: Log = say,
             sleep: Callable[[float], None] = nap,
             within: float | None = None) -> list[str]:
    """Delete what ``created`` records, newest first; return what could not be deleted.

    Keeps going past failures so that one stuck resource does not strand the rest.
    With ``within`` (seconds: after a signal, when the command must end at once) it
    gives up waiting after that long: instances are asked to terminate but not waited
    for, and what could not go yet (a security group whose instances are still
    shutting down) is named for `ltm aws down`, which finds it by its tags.
    """
    if within is None:
        failed = _undo_all(ec2, created, log, sleep, [])
    else:
        failed = _undo_within(ec2, created, log, within)
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
        ec2.terminate_instances(InstanceIds=sorted(ids))
        try:
            _wait_terminated(ec2, sorted(ids), sleep)
        except Stopped:
            # Asked to terminate, which EC2 finishes by itself; `down` finds them anyway.
            log("  (they are still shutting down)")


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


def _undo_all(ec2: Any, created: Created, log: Log, sleep: Callable[[float], None],
              done: list[Entry]) -> list[str]:
    failed: list[str] = []
    for entry in reversed(created.entries):
        try:
            _UNDO[entry.kind](ec2, created.cluster, entry, log, sleep)
            done.append(entry)
        except Stopped:
            failed.append(f"{entry.kind} {entry.name}")
            log(f"  {entry.kind} {entry.name}: not removed yet (stopped waiting)")
        except Exception as exc:  # reported; the rest must still be undone
            failed.append(f"{entry.kind} {entry.name}")
            log(f"  could not remove {entry.kind} {entry.name}: {exc}")
    return failed


def _undo_within(ec2: Any, created: Created, log: Log, seconds: float) -> list[str]:
    """:func:`_undo_all` on a thread, given up after ``seconds``.

    On a thread so that an AWS request that hangs cannot hold the command past its
    limit either; once the limit passes, every wait of the undo ends (``stop``), and
    what it had not finished is reported as left behind.
    """
    stop = Stop()
    done: list[Entry] = []
    out: list[list[str]] = []
    thread = threading.Thread(target=lambda: out.append(_undo_all(ec2, created, log,
                                                                  stop.sleep, done)),
                              name="ltm-rollback", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        stop.stop()
        thread.join(_LAST_WORD_SECONDS)
    if out:
        return out[0]
    return [f"{e.kind} {e.name}" for e in reversed(created.entries) if e not in done]


# After the time limit, how long the undo gets to say what it could not finish.
_LAST_WORD_SECONDS = 0.3


_UNDO: dict[str, Callable[[Any, str, Entry, Log, Any], None]] = {
    "instances": _undo_instances,
    "security-group": _undo_security_group,
    "key-pair": _undo_key_pair,
    "placement-group": _undo_placement_group,
    "local-file": _undo_local_file,
}


def _wait_terminated(ec2: Any, ids: list[str], sleep: Callable[[float], None],
                     gone: set[str] | None = None) -> None:
    # The security and placement groups cannot go while their instances exist.
    wait_for_states(ec2, ids, "terminated", fatal=("pending", "stopping"), reached=gone,
                    sleep=sleep)


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
         sleep: Callable[[float], None] = nap) -> list[DownResult]:
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
    again = None if all_clusters else targets[0].name  # which command finishes the job
    results: list[DownResult] = []
    for target in targets:
        progress = _Progress(target)
        try:
            results.append(_teardown(ec2, target, state_dir, log, sleep, progress))
        except KeyboardInterrupt:
            log(progress.interrupted([r.cluster for r in results],
                                     [t.name for t in targets[len(results) + 1:]], again))
            raise
    return results


def _ask_before_down(targets: list[ClusterStatus], *, yes: bool, ask: Ask,
                     stdin: TextIO | None, log: Log) -> None:
    for target in targets:
        log(f"Cluster {target.name!r}: {target.summary()}")
    names = ", ".join(repr(t.name) for t in targets)
    if not confirm(f"Delete cluster(s) {names}?", assume_yes=yes, ask=ask, stdin=stdin):
        raise Aborted("not confirmed; nothing was deleted")


class _Progress:
    """What one cluster's teardown has done so far: for the line an interrupt prints."""

    def __init__(self, target: ClusterStatus) -> None:
        self.target = target
        self.asked: list[str] = []  # instances asked to terminate
        self.gone: set[str] = set()  # instances seen terminated
        self.deleted: list[str] = []

    def interrupted(self, finished: list[str], untouched: list[str], again: str | None) -> str:
        t = self.target
        left = [i for i in (x.instance_id for x in t.instances) if i not in self.gone]
        shutting = [i for i in left if i in self.asked]
        not_asked = [i for i in left if i not in self.asked]
        rest = [x for x in (*t.security_groups, *t.key_pairs, *t.placement_groups)
                if x not in self.deleted]
        parts = [f"down interrupted on cluster {t.name!r}"]
        if finished:
            parts.append(f"removed cluster(s) {', '.join(map(repr, finished))}")
        parts.append(f"terminated: {', '.join(sorted(self.gone)) or 'none'}")
        if shutting:
            parts.append(f"still shutting down: {', '.join(shutting)}")
        if not_asked:
            parts.append(f"not terminated: {', '.join(not_asked)}")
        parts.append(f"deleted: {', '.join(self.deleted) or 'nothing'}")
        if rest:
            parts.append(f"left: {', '.join(rest)}")
        if untouched:
            parts.append(f"not started: {', '.join(map(repr, untouched))}")
        rerun = ("`ltm aws down --all`" if again is None
                 else f"`ltm aws down --cluster {again}`")
        return "; ".join(parts) + f"; run {rerun} again to finish"


def _teardown(ec2: Any, target: ClusterStatus, state_dir: Path, log: Log,
              sleep: Callable[[float], None], progress: _Progress) -> DownResult:
    ids = [i.instance_id for i in target.instances]
    if ids:
        log(f"Terminating {', '.join(ids)} ...")
        ec2.terminate_instances(InstanceIds=ids)
        progress.asked.extend(ids)
        _wait_terminated(ec2, ids, sleep, progress.gone)
    for group_id in target.security_groups:
        log(f"Deleting security group {group_id}")
        _delete_security_group(ec2, group_id, sleep)
        progress.deleted.append(group_id)
    for key in target.key_pairs:
        log(f"Deleting key pair {key}")
        ec2.delete_key_pair(KeyName=key)
        progress.deleted.append(key)
    for group in target.placement_groups:
        log(f"Deleting placement group {group}")
        _delete_placement_group(ec2, group, sleep)
        progress.deleted.append(group)
    # Last: while anything is left in AWS, the key file is what reaches its instances.
    files = local_files(state_dir, target.name)
    for path in files:
        log(f"Removing {path}")
        path.unlink(missing_ok=True)
    return DownResult(cluster=target.name, terminated=tuple(ids),
                      security_groups=target.security_groups, key_pairs=target.key_pairs,
                      placement_groups=target.placement_groups, local_files=tuple(files))
