"""`ltm hosts setup`: bad input is refused in one line before anything is uploaded.

The whole path on fresh hosts (install, check, runs, idempotence) is the
rehearsal in tests/remote/test_rehearsal.py; these tests stop setups early, so they
need no pip install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _fresh import CLOSED_DEV, FreshCluster

from harness.cli import main
from harness.remote.bundle import debian_package

pytestmark = pytest.mark.root


def _inventory(path: Path, entries: list[dict], client: dict | None = None) -> Path:
    lines = ['known_hosts = "known_hosts"', "base_port = 15000"]

    def table(header: str, entry: dict) -> list[str]:
        body = [f"{k} = {v}" if isinstance(v, int) else f'{k} = "{v}"' for k, v in entry.items()]
        return ["", header, *body]

    for entry in entries:
        lines += table("[[party]]", {"mp_spdz": "~/.local/share/ltm-harness/mp-spdz",
                                     "workdir": "~/ltm-runs", **entry})
    if client:
        lines += table("[client]", client)
    path.write_text("\n".join(lines) + "\n")
    return path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ltm: error: "), err
    return err[0]


def _fake_mpspdz(root: Path, binary: str | None) -> Path:
    root.mkdir()
    (root / "compile.py").write_text("# stand-in\n")
    (root / "Compiler").mkdir()
    (root / "Compiler" / "__init__.py").write_text("")
    if binary is not None:
        (root / "semi2k-party.x").write_text(binary)
        os.chmod(root / "semi2k-party.x", 0o755)
    return root


def test_two_parties_on_one_machine_and_a_client_that_is_a_party_are_refused(tmp_path, capsys):
    a = {"name": "a", "ssh_host": "10.0.0.1", "user": "u", "mpc_host": "10.0.0.1"}
    b = {**a, "name": "b"}
    inv = _inventory(tmp_path / "same.toml", [a, b])
    assert main(["hosts", "setup", str(inv), "--yes"]) == 1
    line = _one_error_line(capsys)
    assert "'a' and 'b' are the same machine (10.0.0.1:22)" in line
    c = {**a, "name": "b", "ssh_host": "10.0.0.2", "mpc_host": "10.0.0.2"}
    inv = _inventory(tmp_path / "client.toml", [a, c], client={**c, "name": "cl"})
    assert main(["hosts", "setup", str(inv), "--yes"]) == 1
    assert "the client host 'cl' (10.0.0.2:22) is also party 'b'" in _one_error_line(capsys)
    assert not (tmp_path / "known_hosts").exists()


def test_local_mpspdz_without_the_party_binary_is_refused(tmp_path, capsys):
    a = {"name": "a", "ssh_host": "10.0.0.1", "user": "u", "mpc_host": "10.0.0.1"}
    b = {**a, "name": "b", "ssh_host": "10.0.0.2"}
    inv = _inventory(tmp_path / "hosts.toml", [a, b])
    mp = _fake_mpspdz(tmp_path / "mp", binary=None)
    assert main(["hosts", "setup", str(inv), "--yes", "--mp-spdz-dir", str(mp)]) == 1
    line = _one_error_line(capsys)
    assert f"the local MP-SPDZ at {mp} lacks semi2k-party.x" in line


@pytest.mark.mpspdz
def test_small_disk_and_foreign_cpu_fail_together_and_nothing_is_marked_ready(tmp_path,
                                                                                capsys):
    cluster = FreshCluster(tmp_path / "cluster")
    mounted = None
    try:
        small, other = cluster.add("small"), cluster.add("other")
        # A home with 64 MiB free, too little for a venv: refused before any upload.
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,uid={small.uid},mode=0700",
                        "tmpfs", str(small.home)], check=True)
        mounted = small.home
        ssh = small.home / ".ssh"
        ssh.mkdir(mode=0o700)
        (ssh / "authorized_keys").write_text(cluster.client_key.with_suffix(".pub").read_text())
        for path in (ssh, ssh / "authorized_keys"):
            os.chown(path, small.uid, small.uid)
        entries = [{"name": h.name, "ssh_host": h.address, "ssh_port": h.port, "user": h.user,
                    "key": str(cluster.client_key), "mpc_host": h.address}
                   for h in (small, other)]
        inv = _inventory(tmp_path / "hosts.toml", entries)
        assert main(["hosts", "trust", str(inv), "--yes"]) == 0
        capsys.readouterr()
        # A binary built for another CPU dies of SIGILL when started once on the host.
        mp = _fake_mpspdz(tmp_path / "mp", binary="#!/bin/sh\nkill -ILL $$\n")
        assert main(["hosts", "setup", str(inv), "--yes", "--mp-spdz-dir", str(mp)]) == 1
        captured = capsys.readouterr()
        errors = captured.err.strip().splitlines()
        assert len(errors) == 1 and errors[0].startswith("ltm: error: ")
        assert f"{small.name} ({small.user}@" in errors[0] and "MiB free" in errors[0]
        assert (f"{other.name} ({other.user}@" in errors[0]
                and "cannot run semi2k-party.x (illegal instruction)" in errors[0])
        assert "0 of 2 host(s) ready" in errors[0]
        # one progress line per host
        assert sum("FAILED" in line for line in captured.out.splitlines()) == 2
        assert not (small.home / ".local").exists()  # nothing uploaded to the small disk
        share = other.home / ".local/share/ltm-harness"
        assert (share / "mp-spdz/semi2k-party.x").exists()  # it was uploaded and tried
        assert not (share / "setup.json").exists() and not (share / "venv").exists()
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], check=False)
        left = cluster.close()
    assert left == []


@pytest.mark.mpspdz
def test_a_system_library_missing_on_the_host_is_named_with_its_package(tmp_path, capsys):
    # A binary that needs libltmfake.so.7, which this machine has (in tmp_path, unreadable
    # to the host's user: a system library the host lacks) but the host does not.
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "fake.c").write_text("int ltm_fake(void) { return 7; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libltmfake.so.7", "-o",
                    str(libs / "libltmfake.so.7"), str(libs / "fake.c")], check=True)
    mp = _fake_mpspdz(tmp_path / "mp", binary=None)
    shutil.copy("/bin/true", mp / "semi2k-party.x")
    subprocess.run(["patchelf", "--add-needed", "libltmfake.so.7", "--set-rpath", str(libs),
                    str(mp / "semi2k-party.x")], check=True)
    cluster = FreshCluster(tmp_path / "cluster")
    try:
        hosts = [cluster.add("a"), cluster.add("b")]
        inv = _trusted_inventory(tmp_path / "hosts.toml", cluster, hosts, capsys)
        assert main(["hosts", "setup", str(inv), "--yes", "--mp-spdz-dir", str(mp)]) == 1
        line = _one_error_line(capsys)
        assert line.count("missing system libraries: libltmfake.so.7 (Debian package "
                          "libltmfake7, needed by semi2k-party.x)") == 2
        assert "apt-get install libltmfake7" in line
        for host in hosts:
            assert not (host.home / ".local/share/ltm-harness/setup.json").exists()
    finally:
        left = cluster.close()
    assert left == []


def _trusted_inventory(path: Path, cluster: FreshCluster, hosts: list, capsys) -> Path:
    """The inventory of ``hosts``, their keys pinned (what that printed is dropped)."""
    entries = [{"name": h.name, "ssh_host": h.address, "ssh_port": h.port, "user": h.user,
                "key": str(cluster.client_key), "mpc_host": h.address} for h in hosts]
    inv = _inventory(path, entries)
    assert main(["hosts", "trust", str(inv), "--yes"]) == 0
    capsys.readouterr()
    return inv


def test_a_host_whose_user_cannot_open_dev_null_is_told_so_not_that_python_is_missing(
        tmp_path, capsys):
    # Every "2>/dev/null" of the probe fails there first: python3 looked missing.
    mp = _fake_mpspdz(tmp_path / "mp", binary="#!/bin/sh\nexit 0\n")
    cluster = FreshCluster(tmp_path / "cluster")
    try:
        hosts = [cluster.add(name, wrap=CLOSED_DEV) for name in ("a", "b")]
        inv = _trusted_inventory(tmp_path / "hosts.toml", cluster, hosts, capsys)
        assert main(["hosts", "setup", str(inv), "--yes", "--mp-spdz-dir", str(mp)]) == 1
        line = _one_error_line(capsys)
        for host in hosts:
            assert (f"{host.name} ({host.user}@127.0.0.1:{host.port}): the login user cannot "
                    "open /dev/null there (is /dev not searchable, e.g. mode 0700, or "
                    "/dev/null not a 0666 character device?); as root there: chmod 0755 "
                    "/dev; chmod 0666 /dev/null") in line
            assert not (host.home / ".local").exists()  # nothing uploaded
        assert "python3" not in line
        assert os.stat("/dev").st_mode & 0o777 == 0o755  # this machine's /dev untouched
    finally:
        left = cluster.close()
    assert left == []


def test_missing_libraries_are_named_with_their_debian_packages():
    assert debian_package("libboost_filesystem.so.1.74.0") == "libboost-filesystem1.74.0"
    assert debian_package("libsodium.so.23") == "libsodium23"
    assert debian_package("libgmpxx.so.4") == "libgmpxx4ldbl"
    assert debian_package("libssl.so.3") == "libssl3"
    assert debian_package("libntl.so.44") == "libntl44"
    assert debian_package("libfoo2.so.7") == "libfoo2-7"
