# ruff: noqa: F811 - the fixtures of test_aws, imported by name, are parameters here
"""`ltm aws up | down` stop within 2 seconds of SIGINT, SIGTERM or SIGHUP (moto; never AWS).

Each case runs the command in-process (``harness.cli.main``) in the main thread,
as the CLI runs, while a helper thread sends the signal to this process once the
command is inside a slow step: waiting for SSH on an address that never answers,
or waiting on EC2 while the emulation (:class:`Lag`) keeps instances pending or
shutting down, as real EC2 does for a minute. It checks the exit status, the
time from the signal to the return, the one line that says what had finished,
and that nothing tagged is left, or, where EC2 cannot be that fast, that a
second `ltm aws down` finishes the job.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from test_aws import (  # noqa: F401 - fixtures, used by name
    MY_CIDR,
    NOTHING,
    PlacementGroups,
    _error,
    aws_env,
    cli_session,
    ec2,
    leftovers,
    no_network,
    pgs,
    session,
    state_dir,
)

from harness import cli
from harness.infra.aws import provision

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_STOP_SECONDS = 2.0
_PHASE_SECONDS = 30.0


class Lag:
    """EC2's slowness, beside moto: launched instances stay "pending" while ``pending``,
    and terminated ones "shutting-down" while ``shutting_down``, during which their
    security and placement groups cannot be deleted (as on EC2)."""

    def __init__(self, session: boto3.Session) -> None:
        self.pending = False
        self.shutting_down = False
        self.held: set[str] = set()  # launched while pending
        self.terminated: set[str] = set()
        self.seen_slow = threading.Event()  # DescribeInstances answered a slow state
        events = session.events
        events.register("after-call.ec2.RunInstances", self._launched)
        events.register("after-call.ec2.TerminateInstances", self._terminated)
        events.register("after-call.ec2.DescribeInstances", self._describe)
        events.register_first("before-call.ec2.DeleteSecurityGroup", self._in_use(
            "DependencyViolation"))
        events.register_first("before-call.ec2.DeletePlacementGroup", self._in_use(
            "InvalidPlacementGroup.InUse"))

    def _launched(self, parsed: dict[str, Any], **_: Any) -> None:
        if self.pending:
            self.held.update(i["InstanceId"] for i in parsed.get("Instances", []))

    def _terminated(self, parsed: dict[str, Any], **_: Any) -> None:
        self.terminated.update(c["InstanceId"] for c in parsed.get("TerminatingInstances", []))

    def _describe(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation["Instances"]:
                i = instance["InstanceId"]
                if self.shutting_down and i in self.terminated:
                    instance["State"] = {"Code": 32, "Name": "shutting-down"}
                    self.seen_slow.set()
                elif self.pending and i in self.held and i not in self.terminated:
                    instance["State"] = {"Code": 0, "Name": "pending"}
                    self.seen_slow.set()

    def _in_use(self, code: str) -> Callable[..., Any]:
        def refuse(**_: Any) -> Any:
            return _error(code, "instances are still shutting down") \
                if self.shutting_down and self.terminated else None
        return refuse


@pytest.fixture
def lag(session: boto3.Session) -> Lag:
    return Lag(session)


def interrupted(argv: list[str], sig: int, reached: Callable[[], bool],
                capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """``ltm ARGV``, sent ``sig`` once ``reached()``; asserts it ended at once, as
    interrupted; its output."""
    sent: list[float] = []

    def send() -> None:
        deadline = time.monotonic() + _PHASE_SECONDS
        while not reached():
            if time.monotonic() > deadline:
                return  # the command ended some other way: the asserts below say how
            time.sleep(0.01)
        sent.append(time.monotonic())
        os.kill(os.getpid(), sig)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    code = cli.main(argv)
    ended = time.monotonic()
    sender.join()
    out, err = capsys.readouterr()
    assert sent, f"the slow step was never reached (status {code}):\n{out}{err}"
    took = ended - sent[0]
    assert took <= _STOP_SECONDS, f"took {took:.2f} s to stop:\n{out}{err}"
    assert code == 128 + sig, out + err
    assert err.strip().splitlines()[-1] == f"ltm: interrupted by {signal.Signals(sig).name}"
    assert "Traceback" not in out + err
    return out + err, err


def up_args(state_dir: Path, *extra: str) -> list[str]:
    return ["aws", "up", "--parties", "2", "--cluster", "c1", "--yes", "--ssh-cidr", MY_CIDR,
            "--state-dir", str(state_dir), *extra]


def down_args(state_dir: Path) -> list[str]:
    return ["aws", "down", "--cluster", "c1", "--yes", "--state-dir", str(state_dir)]


def launched_ids(out: str) -> list[str]:
    line = next(x for x in out.splitlines() if x.startswith("Launched "))
    return line.removeprefix("Launched ").split(";")[0].split(", ")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_up_waiting_for_ssh_stops_at_once_and_removes_everything(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, state_dir: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        sig: int) -> None:
    def unanswered(parsed: dict[str, Any], **_: Any) -> None:
        # TEST-NET-1: an address where no SSH server will ever answer.
        for reservation in parsed.get("Reservations", []):
            for n, instance in enumerate(reservation["Instances"]):
                if instance.get("PublicIpAddress"):
                    instance["PublicIpAddress"] = f"192.0.2.{n + 1}"

    cli_session.events.register("after-call.ec2.DescribeInstances", unanswered)
    waiting = threading.Event()
    real_wait = provision.wait_for_ssh

    def wait_for_ssh(host: str, port: int, timeout: float) -> float:
        waiting.set()
        return real_wait(host, port, timeout=timeout)

    monkeypatch.setattr(provision, "wait_for_ssh", wait_for_ssh)
    started: list[float] = []

    def in_the_wait() -> bool:
        # A moment after it starts, so the signal finds it waiting, as a user's would (at
        # the very first instant it could land inside a socket's constructor, which no
        # code can guard, and leave Python to close that socket).
        if waiting.is_set() and not started:
            started.append(time.monotonic())
        return bool(started) and time.monotonic() > started[0] + 0.3

    out, _ = interrupted(up_args(state_dir), sig, in_the_wait, capsys)
    ids = launched_ids(out)
    assert (f"up interrupted while waiting for SSH: 2 instance(s) launched ({', '.join(ids)}); "
            f"running: {', '.join(ids)}; SSH answered: none; removing what it created") in out
    assert "Removed everything `ltm aws up` had created." in out, out
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_up_with_client_hosts_interrupted_removes_them_with_the_servers(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, lag: Lag,
        state_dir: Path, capsys: pytest.CaptureFixture[str], sig: int) -> None:
    lag.pending = True  # caught while the 2 servers and 2 client hosts start
    out, _ = interrupted(up_args(state_dir, "--client-hosts", "2", "--no-wait-ssh"), sig,
                         lag.seen_slow.is_set, capsys)
    ids = launched_ids(out)
    assert len(ids) == 4
    assert (f"up interrupted while waiting for the instances to run: 4 instance(s) launched "
            f"({', '.join(ids)}); running: none; SSH answered: none; removing what it "
            "created") in out, out
    assert lag.terminated == set(ids)
    assert "Removed everything `ltm aws up` had created." in out, out
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_up_waiting_for_instances_stops_at_once_and_down_finishes_what_ec2_is_slow_at(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, lag: Lag,
        state_dir: Path, capsys: pytest.CaptureFixture[str], sig: int) -> None:
    lag.pending = lag.shutting_down = True
    out, _ = interrupted(up_args(state_dir, "--no-wait-ssh"), sig, lag.seen_slow.is_set,
                         capsys)
    ids = launched_ids(out)
    assert (f"up interrupted while waiting for the instances to run: 2 instance(s) launched "
            f"({', '.join(ids)}); running: none; SSH answered: none; removing what it "
            "created") in out, out
    assert lag.terminated == set(ids)  # asked to terminate before the command ended
    assert "(they are still shutting down)" in out, out
    assert ("Left behind: security-group ltm-harness-c1, placement-group ltm-harness-c1; "
            "remove them with `ltm aws down --cluster c1`") in out, out
    assert leftovers(ec2, pgs)["key_pairs"] == []
    assert list(state_dir.iterdir()) == []

    lag.shutting_down = False  # EC2 finishes terminating by itself
    assert cli.main(down_args(state_dir)) == 0
    assert "Removed cluster 'c1': 0 instance(s), 1 security group(s)" in capsys.readouterr().out
    assert leftovers(ec2, pgs) == NOTHING


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_down_stops_at_once_says_what_it_removed_and_a_second_down_converges(
        cli_session: boto3.Session, ec2: Any, pgs: PlacementGroups, lag: Lag,
        state_dir: Path, capsys: pytest.CaptureFixture[str], sig: int) -> None:
    assert cli.main(up_args(state_dir, "--no-wait-ssh")) == 0
    up_out = capsys.readouterr().out
    ids = launched_ids(up_out)
    [group] = [g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]
               if g["GroupName"] == "ltm-harness-c1"]
    lag.shutting_down = True
    out, _ = interrupted(down_args(state_dir), sig, lag.seen_slow.is_set, capsys)
    assert (f"down interrupted on cluster 'c1'; terminated: none; still shutting down: "
            f"{', '.join(ids)}; deleted: nothing; left: {group}, ltm-harness-c1, "
            "ltm-harness-c1; run `ltm aws down --cluster c1` again to finish") in out, out
    # Nothing local went yet: the key file still reaches what is left.
    assert sorted(p.name for p in state_dir.iterdir()) == ["c1.known_hosts", "c1.pem",
                                                           "c1.toml"]

    # EC2 finishes terminating by itself; the next down finds the rest by its tags.
    lag.shutting_down = False
    assert cli.main(down_args(state_dir)) == 0
    assert "Removed cluster 'c1'" in capsys.readouterr().out
    assert leftovers(ec2, pgs) == NOTHING
    assert list(state_dir.iterdir()) == []
    assert cli.main(down_args(state_dir)) == 0
    assert "Nothing to tear down for cluster 'c1'" in capsys.readouterr().out
