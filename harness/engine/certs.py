"""Per-run TLS certificates for the parties.

MP-SPDZ authenticates parties by certificates named ``P<i>.pem`` whose common
name is ``P<i>``, found through OpenSSL's hashed directory lookup. Fresh ones
for every run mean no key outlives its run.

They are made with the ``cryptography`` library (as ``openssl req -x509 -newkey
ec`` would: a P-256 key, a self-signed certificate valid for two days), not by
running ``openssl`` twice per party, which cost a run a few tenths of a second;
:func:`subject_hash` is ``openssl x509 -hash``'s name for the file.

Loading the library's X.509 modules takes longer than signing (about 0.05 s
against a millisecond a party), so ``ltm`` starts a signer first of all
(:func:`start_signer`): a process forked before anything else is imported, which
loads them on the other core while the command loads its own modules, then signs
on request. The keys cross a pipe from it, never a file; it ends when this
process does. Without one, or once it is gone, the certificates are made here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import struct
import threading
from pathlib import Path
from typing import BinaryIO

from harness.fileio import copy_private, open_private, private_dir

__all__ = ["install_certificates", "make_certificates", "sign", "start_signer",
           "subject_hash"]

_LENGTH = struct.Struct("<I")


def make_certificates(parties: int, directory: Path) -> list[tuple[Path, Path, str]]:
    """Create P<i>.key / P<i>.pem in ``directory``; return (key, cert, hash) per party."""
    private_dir(directory)
    names = [f"P{i}" for i in range(parties)]
    signed = _signer.sign(names) if _signer is not None else None
    out = []
    for name, (key_pem, cert_pem) in zip(names, signed or sign(names), strict=True):
        key, pem = directory / f"{name}.key", directory / f"{name}.pem"
        with open_private(key) as fh:  # private from its creation
            fh.write(key_pem)
        pem.write_bytes(cert_pem)
        out.append((key, pem, subject_hash(name)))
    return out


def sign(names: list[str]) -> list[tuple[bytes, bytes]]:
    """A fresh key and self-signed certificate per common name: (key PEM, PKCS #8
    unencrypted; certificate PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    out = []
    for common_name in names:
        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(private.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(private, hashes.SHA256()))
        out.append((private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()),
                    cert.public_bytes(serialization.Encoding.PEM)))
    return out


class _Signer:
    """The forked signer, seen from this process: requests down one pipe, keys back up
    another."""

    def __init__(self) -> None:
        requests_r, requests_w = os.pipe()  # not inherited by anything this process execs
        replies_r, replies_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its work is checked through the parent
            try:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)  # a stop ends it, quietly
                os.close(requests_w)
                os.close(replies_r)
                _serve(os.fdopen(requests_r, "rb"), os.fdopen(replies_w, "wb"))
            finally:
                os._exit(0)  # never this process's atexit handlers, nor its buffers
        os.close(requests_r)
        os.close(replies_w)
        self.pid = pid
        self.requests = os.fdopen(requests_w, "wb")
        self.replies = os.fdopen(replies_r, "rb")
        self.turn = threading.Lock()  # one request at a time on the pipes

    def sign(self, names: list[str]) -> list[tuple[bytes, bytes]] | None:
        """The signer's keys and certificates for ``names``; None if it is gone."""
        try:
            with self.turn:
                _send(self.requests, json.dumps(names).encode())
                return [(_receive(self.replies), _receive(self.replies)) for _ in names]
        except (OSError, EOFError):
            _stop_signer()
            return None


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    sign([])  # loads the library now, while the parent loads its own modules
    while True:
        try:
            names = json.loads(_receive(requests))
        except EOFError:  # the parent has ended
            return
        for key_pem, cert_pem in sign(names):
            _send(replies, key_pem)
            _send(replies, cert_pem)


def _send(stream: BinaryIO, data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO) -> bytes:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the signer's pipe closed")
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the signer's pipe closed")
    return data


_signer: _Signer | None = None


def start_signer() -> None:
    """Fork the signer (once per process). Call it before loading other modules and
    before any thread starts: ``ltm`` does, for the commands that run parties."""
    global _signer
    if _signer is None:
        _signer = _Signer()


def _stop_signer() -> None:
    global _signer
    if _signer is None:
        return
    signer, _signer = _signer, None
    for stream in (signer.requests, signer.replies):
        try:
            stream.close()
        except OSError:
            pass
    try:
        os.waitpid(signer.pid, 0)  # it exits on the closed pipe
    except ChildProcessError:
        pass


def subject_hash(common_name: str) -> str:
    """OpenSSL's subject hash (``X509_NAME_hash``) of the name CN=``common_name``.

    The first four bytes, little-endian, of the SHA-1 of the name's canonical
    encoding: its RDN sets without the outer SEQUENCE, each value a UTF8String
    lower-cased with its spaces collapsed (ASCII names here).
    """
    value = " ".join(common_name.split()).lower().encode()
    if len(value) > 127:
        raise ValueError(f"common name too long for this encoder: {common_name!r}")
    oid = bytes([0x06, 0x03, 0x55, 0x04, 0x03])  # 2.5.4.3, commonName
    attribute = bytes([0x0C, len(value)]) + value  # UTF8String
    sequence = bytes([0x30, len(oid) + len(attribute)]) + oid + attribute
    rdn = bytes([0x31, len(sequence)]) + sequence
    return f"{int.from_bytes(hashlib.sha1(rdn).digest()[:4], 'little'):08x}"


def install_certificates(certs: list[tuple[Path, Path, str]], party: int,
                         player_data: Path) -> None:
    """Give a party its own key and everyone's certificate (with hash names)."""
    private_dir(player_data)
    for i, (key, pem, digest) in enumerate(certs):
        shutil.copyfile(pem, player_data / pem.name)
        shutil.copyfile(pem, player_data / f"{digest}.0")
        if i == party:
            copy_private(key, player_data / key.name)
