"""SSH host keys: fetching a server's key, fingerprints, and the known_hosts file.

The known_hosts file is OpenSSH's format, so the same file works with ``ssh
-o UserKnownHostsFile=...`` and with paramiko. Edits keep every line that is
not about the host being changed (comments, other hosts, hashed entries), and
replace the file atomically so a crash never leaves half a file of trust.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.errors import InputError, LtmError
from harness.fileio import write_atomic

__all__ = [
    "ServerKey",
    "fetch_host_key",
    "fingerprint",
    "known_target",
    "pinned_keys",
    "write_pinned",
]


@dataclass(frozen=True)
class ServerKey:
    key_type: str  # e.g. ssh-ed25519
    base64: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(base64.b64decode(self.base64))


def fingerprint(blob: bytes) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint (unpadded base64 of the key blob's hash)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def known_target(host: str, port: int) -> str:
    # OpenSSH (and paramiko's lookup) name non-default ports as [host]:port.
    return host if port == 22 else f"[{host}]:{port}"


def fetch_host_key(host: str, port: int, *, timeout: float,
                   prefer: tuple[str, ...] = ()) -> ServerKey:
    """The key the server proves it holds, from a key exchange alone.

    Nothing is authenticated, so no credential reaches an untrusted server.
    ``prefer`` puts key types first, as paramiko's client does for types
    already pinned: a server with several keys then shows the one that the
    runner will check, not a different one that would look like a changed key.
    """
    sock = socket.create_connection((host, port), timeout=timeout)
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        if prefer:
            options = transport.get_security_options()
            wanted = [_algorithm(t, options.key_types) for t in prefer]
            wanted = [t for t in wanted if t]
            options.key_types = wanted + [t for t in options.key_types if t not in wanted]
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
    finally:
        transport.close()
        sock.close()
    return ServerKey(key.get_name(), key.get_base64())


def _algorithm(key_type: str, offered: tuple[str, ...]) -> str | None:
    # An "ssh-rsa" key is negotiated under the rsa-sha2 signature algorithms.
    if key_type == "ssh-rsa":
        return next((a for a in ("rsa-sha2-512", "rsa-sha2-256") if a in offered), None)
    return key_type if key_type in offered else None


def pinned_keys(known_hosts: Path, target: str) -> list[ServerKey]:
    """The keys ``known_hosts`` holds for ``target`` (hashed entries included)."""
    keys = paramiko.HostKeys()
    try:
        keys.load(str(known_hosts))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"cannot read {known_hosts}: {exc.strerror}") from None
    found = keys.lookup(target) or {}
    return [ServerKey(name, key.get_base64()) for name, key in found.items()]


def _names_match(names: str, target: str) -> list[str] | None:
    """The line's host names without ``target``, or None if it does not name it."""
    parts = names.split(",")
    kept = []
    for name in parts:
        hashed = name.startswith("|1|")
        if name == target or (hashed and paramiko.HostKeys.hash_host(target, name) == name):
            continue
        kept.append(name)
    return None if len(kept) == len(parts) else kept


def write_pinned(known_hosts: Path, keys: list[tuple[str, ServerKey]], *,
                 replace: bool) -> None:
    """Pin each ``(target, key)``; with ``replace``, first drop what was pinned for them."""
    try:
        lines = known_hosts.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        raise InputError(f"cannot read {known_hosts}: {exc.strerror}") from None
    if replace:
        for target, _ in keys:
            lines = list(_without(lines, target))
    lines += [f"{target} {key.key_type} {key.base64}" for target, key in keys]
    _atomic_write(known_hosts, "".join(line + "\n" for line in lines))


def _without(lines: list[str], target: str):
    for line in lines:
        stripped = line.strip()
        fields = stripped.split()
        if not stripped or stripped.startswith("#") or len(fields) < 3:
            yield line
            continue
        marker = fields[0] if fields[0].startswith("@") else None
        names_at = 1 if marker else 0
        kept = _names_match(fields[names_at], target)
        if kept is None:
            yield line
        elif kept:
            fields[names_at] = ",".join(kept)
            yield " ".join(fields)


def _atomic_write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        write_atomic(path, text, mode=mode)
    except OSError as exc:
        raise LtmError(f"cannot write {path}: {exc.strerror}; check the directory's "
                       "permissions") from None
