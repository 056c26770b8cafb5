"""Fresh machines on this one: new users, each with its own sshd, optionally in its own
network namespace behind a shaped link, like new cloud instances.

Each :class:`FreshHost` is a new unprivileged user whose home holds nothing but
``~/.ssh/authorized_keys`` (no harness, no MP-SPDZ), and an ``sshd`` that lets
only that user in. :class:`FreshCluster` puts hosts into namespaces on one
bridge (addresses ``10.232.<k>.<i+1>``), shapes every host's link in both
directions with a network profile (:mod:`harness.engine.netns`), and gives this
machine (the "laptop") an address on the bridge to reach them over SSH.

The hosts have no internet. Their pip installs from a wheelhouse of the
harness's dependencies, built here once (kept in /var/tmp between runs) and
named by the sshd's ``SetEnv`` (the hosts' package configuration, as a mirror
would be on a real network).

``close`` kills every process of the users (found by uid in /proc), deletes the
namespaces and the users with their homes.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine.netns import profile_for, tbf_args
from harness.remote.loopback import host_keypair, sshd_config, start_server, wait_ready

_START_SECONDS = 15.0

# A host whose /dev its users cannot enter (mode 0700, as some machines start): sshd runs
# in a mount namespace of its own over a /dev of that mode holding the usual devices
# (root, sshd itself, still opens them; the login user cannot). This machine's /dev is
# never changed.
_CLOSED_DEV = r"""set -e
mount --make-rprivate /
old=$(mktemp -d)
mount --rbind /dev "$old"
mount -t tmpfs -o mode=0700,size=1m ltm-closed-dev /dev
for f in null zero full random urandom tty; do
  touch "/dev/$f"; mount --bind "$old/$f" "/dev/$f"
done
mkdir /dev/pts /dev/shm
mount --rbind "$old/pts" /dev/pts
umount -l "$old"; rmdir "$old"
exec "$@"
"""
CLOSED_DEV = ("unshare", "--mount", "sh", "-c", _CLOSED_DEV, "closed-dev")


def sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def user_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def namespaces() -> list[str]:
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip()]


def wheelhouse() -> Path:
    """The harness's base dependencies as wheels, readable by every user (pip: --find-links):
    what ``ltm hosts setup`` installs on a host (no extra's).

    Kept between runs (keyed by the requirements and this Python), as a mirror
    would be: building it costs about as much as the rest of the rehearsal.
    """
    import hashlib

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    requirements = [r for r in deps["project"]["dependencies"] if "python_version <" not in r]
    key = hashlib.sha256(f"{sys.version_info[:2]} {requirements}".encode()).hexdigest()[:16]
    root = Path("/var/tmp") / f"ltm-rehearsal-wheels-{key}"
    if (root / "complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    os.chmod(root, 0o755)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                    "-w", str(root), *requirements], check=True, timeout=600,
                   capture_output=True)
    for path in root.iterdir():
        os.chmod(path, 0o644)
    (root / "complete").write_text("")
    return root


@dataclass
class FreshHost:
    name: str
    user: str
    root: Path  # root-owned: the sshd's config and host key
    address: str
    port: int
    netns: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = field(default=None, repr=False)
    uid: int = -1
    wrap: tuple[str, ...] = ()  # what sshd is started under (e.g. CLOSED_DEV)

    @property
    def home(self) -> Path:
        return Path("/home") / self.user

    def create(self, client_pub: str) -> None:
        # '*' and not '!': OpenSSH without PAM refuses a locked ('!') account.
        sh("useradd", "-m", "-s", "/bin/bash", "-p", "*", self.user)
        self.uid = pwd.getpwnam(self.user).pw_uid
        ssh = self.home / ".ssh"
        ssh.mkdir(mode=0o700)
        (ssh / "authorized_keys").write_text(client_pub)
        os.chmod(ssh / "authorized_keys", 0o600)
        for path in (ssh, ssh / "authorized_keys"):
            os.chown(path, self.uid, self.uid)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        key = self.root / "ssh_host_ed25519_key"
        if not key.exists():
            host_keypair(key, f"{self.name}-host")
        config = self.root / "sshd_config"
        config.write_text(sshd_config(port=self.port, address=self.address, host_key=key,
                                      pid_file=self.root / "sshd.pid",
                                      authorized_keys=".ssh/authorized_keys",
                                      allow_users=self.user, env=self.env))
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        prefix = ("ip", "netns", "exec", self.netns) if self.netns else ()
        self.proc = start_server(config, self.root / "sshd.log", (*prefix, *self.wrap))
        proc = self.proc
        wait_ready(self.address, self.port, lambda: proc.poll() is None, self.log, self.name,
                   timeout=_START_SECONDS)

    def log(self) -> str:
        try:
            return (self.root / "sshd.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
            self.proc = None
        if self.uid >= 0:
            for _ in range(50):
                pids = user_pids(self.uid)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)

    def remove(self) -> None:
        self.stop()
        if self.uid >= 0:
            subprocess.run(["userdel", "-r", "-f", self.user], capture_output=True, timeout=60)
            shutil.rmtree(self.home, ignore_errors=True)


class FreshCluster:
    """Fresh hosts; with ``profile``, each in its own shaped namespace on one bridge."""

    def __init__(self, root: Path, profile: str | None = None) -> None:
        self.root = root
        self.tag = secrets.token_hex(3)
        self.profile = profile_for(profile) if profile else None
        self.subnet = f"10.232.{secrets.randbelow(200) + 20}"
        self.hosts: list[FreshHost] = []
        self.created: list[str] = []
        self.laptop_dev = f"ltmr{self.tag}"
        self.client_key = root / "laptop_key"
        root.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        if self.profile is not None:
            self._switch()

    @property
    def switch(self) -> str:
        return f"ltmr-{self.tag}-sw"

    def _switch(self) -> None:
        sw = self.switch
        sh("ip", "netns", "add", sw)
        self.created.append(sw)
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        # The laptop's end stays in this namespace so that the test can SSH in.
        sh("ip", "link", "add", self.laptop_dev, "type", "veth", "peer", "name", "laptop",
           "netns", sw)
        sh("ip", "-n", sw, "link", "set", "laptop", "master", "br0", "up")
        sh("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.laptop_dev)
        sh("ip", "link", "set", self.laptop_dev, "up")

    def add(self, name: str, env: dict[str, str] | None = None,
            wrap: tuple[str, ...] = ()) -> FreshHost:
        i = len(self.hosts)
        user = f"ltmr{self.tag}{name}"
        if self.profile is not None:
            ns = f"ltmr-{self.tag}-{name}"
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.switch, "link", "add", f"h{i}", "type", "veth", "peer",
               "name", "eth0", "netns", ns)
            sh("ip", "-n", self.switch, "link", "set", f"h{i}", "master", "br0", "up")
            address = f"{self.subnet}.{i + 1}"
            sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            if self.profile.shaped:
                shape = tbf_args(self.profile)
                sh("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", *shape)
                sh("tc", "-n", self.switch, "qdisc", "add", "dev", f"h{i}", "root", *shape)
            host = FreshHost(name, user, self.root / name, address, 22, ns, env or {})
        else:
            port = _free_port()
            host = FreshHost(name, user, self.root / name, "127.0.0.1", port, None, env or {})
        host.wrap = wrap
        self.hosts.append(host)
        host.create(self.client_key.with_suffix(".pub").read_text())
        host.start()
        return host

    def close(self) -> list[str]:
        """Remove everything; returns what could not be removed (for the test to assert)."""
        for host in self.hosts:
            host.remove()
        if self.profile is not None:
            subprocess.run(["ip", "link", "delete", self.laptop_dev], capture_output=True,
                           timeout=30)
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
        left = [ns for ns in namespaces() if ns.startswith(f"ltmr-{self.tag}-")]
        left += [f"pid {pid} of {h.user}" for h in self.hosts if h.uid >= 0
                 for pid in user_pids(h.uid)]
        left += [h.user for h in self.hosts if _user_exists(h.user)]
        return left


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
