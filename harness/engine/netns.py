"""Local network emulation: every party in its own network namespace.

A run with prefix ``ltm-<pid>-<hex>`` creates, and afterwards removes:

* ``<prefix>-sw``, the "switch": a bridge ``br0`` and one veth end ``p<i>`` per party;
* ``<prefix>-p<i>`` for party i: ``lo`` and ``eth0`` (the other veth end) with the
  address ``10.231.0.<i+1>/24``;
* with ``client=True``, ``<prefix>-c`` for the clients: ``eth0`` at ``10.231.0.254/24``,
  its switch end ``c``. The clients' upload starts there.

Nothing is created in the host's own namespace, so the host's interfaces, routes and
firewall stay untouched, interface names only need to be unique within their namespace
(the kernel's 15-character limit never bites), and concurrent runs cannot collide.

Each party's link is shaped like an instance's NIC, in both directions: the egress of
``eth0`` is what the "instance" sends, the egress of the switch-side ``p<i>`` is what it
receives (EC2 quotes its bandwidth for inbound and outbound traffic simultaneously).
The kernel here has tbf/htb but no netem, so bandwidth is emulated, latency, jitter and
loss are not.

The clients' link is not shaped. The client namespace stands for n independent client
devices, each sending a few kilobytes, not for one machine whose NIC carries every
share; what limits the upload is each server's inbound link, which all clients share.
So each server receives at its profile's rate, all servers at once, and the upload
lasts as long as the slowest server's (the one receiving the most bytes). (An AWS
``[client]`` host is different: one NIC sends every server its shares, see
:mod:`harness.experiments.estimate`.)
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from harness.errors import InputError, LtmError
from harness.stream import pid_alive

__all__ = ["Profile", "PROFILES", "profile_for", "check_requirements", "NetworkEmulation",
           "NetworkEmulationError", "remove_stale", "tbf_args", "NAME_PREFIX", "SUBNET"]

NAME_PREFIX = "ltm-"
SUBNET = "10.231.0"  # /24, private; every run has its own bridge, so runs may share it
_STALE = re.compile(r"^ltm-(\d+)-[0-9a-f]+-(?:sw|p\d+|c)$")
CLIENT_HOST = 254  # the clients' address in SUBNET, above the 250 parties
_COMMAND_TIMEOUT = 30.0
# The veths use GSO, so one queued "packet" can be ~64 KiB plus headers. A bucket smaller
# than that would make tbf split or drop such packets; 128 KiB leaves room.
MIN_BUCKET = 128 * 1024
_MAX_BUCKET = 2**32 - 1  # tbf's burst is a u32 byte count (TCA_TBF_BURST)
_QUEUE_SECONDS = 0.05  # queue at most ~50 ms of the sustained rate before dropping
# /usr/sbin is not on every PATH (e.g. sudo without secure_path), so look there too.
_SBIN = (Path("/usr/sbin"), Path("/sbin"))


class NetworkEmulationError(LtmError):
    """Creating or removing the emulated network failed (the message has ip/tc's stderr)."""


@dataclass(frozen=True)
class Profile:
    """How each party's link is shaped, per direction.

    ``rate_mbit`` is the sustained rate (None: no shaping at all). With ``peak_mbit``
    the link behaves like EC2's network I/O credits: a token bucket of ``bucket_bytes``
    fills at ``rate_mbit`` while the link is quieter than that, and while it has tokens,
    traffic may go at up to ``peak_mbit``. A full bucket lets about
    ``bucket_bytes * peak / (peak - rate)`` bytes through at the peak rate.
    """

    name: str
    rate_mbit: float | None = None
    peak_mbit: float | None = None
    bucket_bytes: int = MIN_BUCKET
    summary: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.rate_mbit is None:
            if self.peak_mbit is not None:
                raise ValueError(f"profile {self.name}: peak_mbit needs rate_mbit")
            return
        if self.rate_mbit <= 0:
            raise ValueError(f"profile {self.name}: rate_mbit must be positive")
        if self.peak_mbit is not None and self.peak_mbit <= self.rate_mbit:
            raise ValueError(f"profile {self.name}: peak_mbit must exceed rate_mbit")
        if not MIN_BUCKET <= self.bucket_bytes <= _MAX_BUCKET:
            raise ValueError(f"profile {self.name}: bucket_bytes must be in "
                             f"[{MIN_BUCKET}, {_MAX_BUCKET}]")

    @property
    def shaped(self) -> bool:
        return self.rate_mbit is not None


# Source for t3.large: Amazon EC2 User Guide, "General purpose instances", network
# performance: "Up to 5 Gigabit"; baseline 0.512 Gbps, burst 5.0 Gbps
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/general-purpose-instances.html,
# now in https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html), and "Amazon EC2
# instance network bandwidth": instances of 16 vCPUs or fewer burst beyond the baseline
# with a network I/O credit mechanism, "for a limited time, typically from 5 to 60
# minutes" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html).
#
# AWS does not publish the credit bucket in bytes; 5 minutes at 5 Gbps is ~170 GB of
# credit, far beyond what tbf can hold (a u32 byte count). So "t3.large" is an instance
# with full credits as far as tbf allows: the largest bucket, ~4.3 GB, i.e. ~4.8 GB per
# direction at 5 Gbps before falling back to 0.512 Gbps (real instances keep bursting
# longer); "t3.large-baseline" is the other bound, an instance whose credits are spent.
_T3_SOURCE = ("AWS EC2 User Guide: general-purpose-instances.html (network performance, "
              "t3.large baseline 0.512 / burst 5.0 Gbps) and "
              "ec2-instance-network-bandwidth.html (I/O credits, burst 5-60 min)")

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("none", summary="own namespaces and a bridge, no shaping"),
    Profile("t3.large", rate_mbit=512, peak_mbit=5000, bucket_bytes=_MAX_BUCKET,
            summary="EC2 t3.large with network credits: 5 Gbit/s bursts, "
                    "0.512 Gbit/s baseline per direction", source=_T3_SOURCE),
    Profile("t3.large-baseline", rate_mbit=512,
            summary="EC2 t3.large with its network credits spent: 0.512 Gbit/s "
                    "per direction", source=_T3_SOURCE),
)}


def profile_for(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError(f"unknown --network profile {name!r}; choose one of: "
                         f"{', '.join(PROFILES)}") from None


def _tool(name: str) -> str:
    found = shutil.which(name) or next(
        (str(d / name) for d in _SBIN if (d / name).exists()), None)
    if found is None:
        raise InputError(f"--network needs the `{name}` command from iproute2; install it "
                         "(Debian/Ubuntu: apt-get install iproute2) or leave out --network")
    return found


def check_requirements() -> tuple[str, str]:
    """Root and iproute2, or a one-line error. Returns the paths of ``ip`` and ``tc``."""
    if os.geteuid() != 0:
        raise InputError("--network needs root to create network namespaces; run as root "
                         "(e.g. with sudo) or leave out --network")
    return _tool("ip"), _tool("tc")


def _run(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=_COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise NetworkEmulationError(f"`{' '.join(argv)}` timed out after "
                                    f"{_COMMAND_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().replace("\n", "; ")
        raise NetworkEmulationError(f"`{' '.join(argv)}` failed (status {done.returncode}): "
                                    f"{detail or 'no output'}")
    return done.stdout


def _namespaces(ip: str) -> list[str]:
    # Lines look like "name (id: 3)" or just "name".
    return [line.split()[0] for line in _run([ip, "netns", "list"]).splitlines()
            if line.strip()]


def _kill_inside(ip: str, ns: str) -> None:
    """SIGKILL whatever still runs in ``ns``: a namespace lives as long as its processes."""
    try:
        pids = _run([ip, "netns", "pids", ns]).split()
    except NetworkEmulationError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _delete(ip: str, names: Sequence[str]) -> list[str]:
    """Delete namespaces (their veths and the bridge go with them); return failures."""
    failed = []
    for ns in names:
        _kill_inside(ip, ns)
        try:
            _run([ip, "netns", "delete", ns])
        except NetworkEmulationError as exc:
            failed.append(f"{ns}: {exc}")
    return failed


def remove_stale() -> list[str]:
    """Remove ``ltm-<pid>-...`` namespaces whose creating process is gone.

    A run killed with SIGKILL (or interrupted while tearing down) cannot clean up after
    itself; the next run does. Namespaces of live processes, e.g. concurrent runs, stay.
    """
    ip, _ = check_requirements()
    stale = [ns for ns in _namespaces(ip)
             if (m := _STALE.match(ns)) and not pid_alive(int(m.group(1)))]
    _delete(ip, stale)
    return stale


def tbf_args(profile: Profile) -> list[str]:
    """The ``tc qdisc add ... root`` arguments for one direction of one link."""
    if profile.rate_mbit is None:
        return []
    rate = int(profile.rate_mbit * 1e6)
    limit = max(3 * MIN_BUCKET, int(rate / 8 * _QUEUE_SECONDS))
    args = ["tbf", "rate", f"{rate}bit", "burst", f"{profile.bucket_bytes}b",
            "limit", f"{limit}b"]
    if profile.peak_mbit is not None:
        # The peak bucket ("mtu") must hold one GSO packet, like the main bucket.
        args += ["peakrate", f"{int(profile.peak_mbit * 1e6)}bit", "mtu", f"{MIN_BUCKET}b"]
    return args


class NetworkEmulation:
    """Namespaces, bridge and shaping for ``parties`` parties, as a context manager.

    Everything is removed on exit, also after an exception or KeyboardInterrupt, and
    when creating it fails half-way.
    """

    BRIDGE = "br0"
    PARTY_DEV = "eth0"

    def __init__(self, profile: Profile | str, parties: int, *, client: bool = False) -> None:
        self.profile = profile_for(profile)
        if not 1 <= parties <= 250:
            raise InputError(f"--network supports 1 to 250 parties, got {parties}")
        self.parties = parties
        self.client = client
        self.prefix = f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.switch = f"{self.prefix}-sw"
        self._ip = self._tc = ""
        self._active = False

    def namespace(self, i: int) -> str:
        return f"{self.prefix}-p{i}"

    def address(self, i: int) -> str:
        if not 0 <= i < self.parties:
            raise IndexError(f"party {i} of {self.parties}")
        return f"{SUBNET}.{i + 1}"

    @property
    def client_namespace(self) -> str:
        return f"{self.prefix}-c"

    @property
    def client_address(self) -> str:
        return f"{SUBNET}.{CLIENT_HOST}"

    def wrap_client(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the clients' namespace (created with ``client=True``)."""
        if not self.client:
            raise RuntimeError("NetworkEmulation.wrap_client without client=True")
        return self._exec(self.client_namespace, argv)

    def wrap(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run in party i's namespace.

        ``ip netns exec`` switches namespace and then execs (it forks only in batch
        mode), so the command keeps the pid and process group the caller started.
        """
        return self._exec(self.namespace(i), argv)

    def _exec(self, ns: str, argv: Sequence[str]) -> list[str]:
        if not self._active:
            raise RuntimeError("NetworkEmulation.wrap outside its `with` block")
        return [self._ip, "netns", "exec", ns, *argv]

    def __enter__(self) -> NetworkEmulation:
        self._ip, self._tc = check_requirements()
        remove_stale()
        try:
            self._create()
        except BaseException:
            self._teardown()
            raise
        self._active = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._active = False
        failed = self._teardown()
        if not failed:
            return
        message = ("could not remove the emulated network (" + "; ".join(failed) + "); "
                   f"remove it with: ip netns delete NAME for each {self.prefix}-* "
                   "in `ip netns list`")
        if exc is None:
            raise NetworkEmulationError(message)
        if hasattr(exc, "add_note"):  # 3.11+: keep the original error, mention the leak
            exc.add_note(message)

    def _create(self) -> None:
        ip, tc, sw = self._ip, self._tc, self.switch
        _run([ip, "netns", "add", sw])
        _run([ip, "-n", sw, "link", "add", "name", self.BRIDGE, "type", "bridge"])
        _run([ip, "-n", sw, "link", "set", self.BRIDGE, "up"])
        for i in range(self.parties):
            ns, port_dev = self.namespace(i), f"p{i}"
            self._attach(ns, port_dev, self.address(i))
            if self.profile.shaped:
                shape = tbf_args(self.profile)
                _run([tc, "-n", ns, "qdisc", "add", "dev", self.PARTY_DEV, "root", *shape])
                _run([tc, "-n", sw, "qdisc", "add", "dev", port_dev, "root", *shape])
        if self.client:  # never shaped: see the module's docstring
            self._attach(self.client_namespace, "c", self.client_address)

    def _attach(self, ns: str, port_dev: str, address: str) -> None:
        """A namespace ``ns`` with ``eth0`` at ``address``, plugged into the bridge."""
        ip, sw = self._ip, self.switch
        _run([ip, "netns", "add", ns])
        _run([ip, "-n", ns, "link", "set", "lo", "up"])
        # Created inside the switch namespace with the peer straight in ``ns``: no
        # interface ever appears in the host's namespace.
        _run([ip, "-n", sw, "link", "add", "name", port_dev, "type", "veth",
              "peer", "name", self.PARTY_DEV, "netns", ns])
        _run([ip, "-n", sw, "link", "set", port_dev, "master", self.BRIDGE, "up"])
        _run([ip, "-n", ns, "addr", "add", f"{address}/24", "dev", self.PARTY_DEV])
        _run([ip, "-n", ns, "link", "set", self.PARTY_DEV, "up"])

    def _teardown(self) -> list[str]:
        # Everything under our prefix, not a list of what we think we made: a command
        # interrupted half-way may have created a namespace without our noticing.
        try:
            ours = [ns for ns in _namespaces(self._ip) if ns.startswith(self.prefix + "-")]
        except NetworkEmulationError as exc:
            return [str(exc)]
        return _delete(self._ip, ours)
