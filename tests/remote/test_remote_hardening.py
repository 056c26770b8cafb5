"""The remote working directory is each user's own, and host problems read as one line.

Against real sshd servers: two real Unix users on this one machine run with
the default workdir side by side; a workdir someone else owns, or that others
may enter, is refused before use with the reason; a host lost between
connecting and uploading is named first, on one line; an SSH ``key`` that is a
directory is called a directory.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from _fresh import FreshCluster
from _sshd import mpc_base_port, write_inventory_file
from test_ssh import make_inventory, small_config, staged

from harness.errors import InputError
from harness.experiments import run
from harness.remote import HostGroupError, trust_hosts
from harness.remote._connect import connect
from harness.remote._party import RemoteParty
from harness.remote.hosts import DEFAULT_WORKDIR, Host, load_inventory

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="real users and sshd need root")]


@pytest.fixture
def shared_engine(mp_spdz):
    """The party binary and its library where every user may run them (root's home is
    private)."""
    root = Path(tempfile.mkdtemp(prefix="ltm-engine-"))
    try:
        os.chmod(root, 0o755)
        for name in ("semi2k-party.x", "libSPDZ.so"):
            shutil.copy2(mp_spdz.root / name, root / name)
            os.chmod(root / name, 0o755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.mpspdz
def test_two_users_of_one_machine_both_run_with_the_default_workdir(tmp_path, shared_engine,
                                                                     program_cache):
    cluster = FreshCluster(tmp_path / "cluster")
    try:
        users = [cluster.add("a"), cluster.add("b")]
        hosts = [Host(name=h.name, ssh_host=h.address, ssh_port=h.port, user=h.user,
                      key=str(cluster.client_key), mpc_host=h.address,
                      mp_spdz=str(shared_engine)) for h in users]
        assert all(h.workdir == DEFAULT_WORKDIR for h in hosts)
        inventory = write_inventory_file(tmp_path / "hosts.toml", hosts, mpc_base_port(2))
        trust_hosts(inventory, echo=lambda line: None)
        for attempt in range(2):  # the second run finds both directories there already
            # The data owner's input: hosts with only MP-SPDZ run it.
            cfg = small_config(tmp_path, program_cache, parties=2, hosts=inventory,
                               out=tmp_path / f"out{attempt}", input_mode="party")
            result = run(cfg)
            assert result["verification"]["ok"], result["verification"]
        for user in users:
            runs = user.home / ".cache/ltm-harness/runs"
            info = runs.stat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (user.uid, 0o700)
            assert list(runs.iterdir()) == []  # every run's directory removed
    finally:
        left = cluster.close()
    assert left == []


@pytest.mark.mpspdz
@pytest.mark.parametrize("problem", ["owner", "mode"])
def test_a_workdir_not_private_to_the_user_is_refused_before_use(tmp_path, farm, mp_spdz,
                                                                 program_cache, problem):
    shared = tmp_path / "shared"
    shared.mkdir()
    if problem == "owner":
        os.chmod(shared, 0o700)
        os.chown(shared, 1, 1)  # daemon's: as if another user had used it first
    else:
        os.chmod(shared, 0o755)
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2,
                                      p1={"workdir": str(shared)})
    trust_hosts(inventory, echo=lambda line: None)
    # The data owner's text, written here: the hosts are first reached by run.
    cfg = small_config(tmp_path, program_cache, parties=2, input_mode="party")
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work")
    with pytest.raises(HostGroupError) as info:
        cluster.run(program, timeout=60)
    message = str(info.value)
    assert "\n" not in message
    where = f"p1 (root@127.0.0.1:{fakes[1].port}): workdir {shared}"
    if problem == "owner":
        assert message.startswith(f"{where} is owned by uid 1, not you (uid 0): choose "
                                  "another 'workdir' for this party in the inventory"), message
    else:
        assert message.startswith(f"{where} has mode 0755, open to other users; run "
                                  f"`chmod 700 {shared}` there"), message
    assert "(no party was started)" in message
    assert list(shared.iterdir()) == []  # nothing was created in it


@pytest.mark.mpspdz
def test_a_host_lost_before_its_upload_is_named_first_on_one_line(tmp_path, farm, mp_spdz,
                                                                  program_cache, monkeypatch):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2)
    trust_hosts(inventory, echo=lambda line: None)
    # The data owner's text, written here: the hosts are first reached by run.
    cfg = small_config(tmp_path, program_cache, parties=2, input_mode="party")
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work")
    check_space = RemoteParty.check_space

    def sshd_goes_down(party: RemoteParty, need: int) -> None:
        if party.index == 1:
            fakes[1].stop()  # its sshd and the session: the connection drops under us
        check_space(party, need)

    monkeypatch.setattr(RemoteParty, "check_space", sshd_goes_down)
    with pytest.raises(HostGroupError) as info:
        cluster.run(program, timeout=60)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"p1 (root@127.0.0.1:{fakes[1].port}): "), message
    assert "(no party was started)" in message
    # Its directory could not be removed (the host is down): said on the same line.
    assert "; also: p1 (" in message and "check no semi2k-party.x is left running" in message


def test_a_key_that_is_a_directory_is_called_one(tmp_path):
    host = Host(name="p0", ssh_host="127.0.0.1", user="root", key="/tmp",
                mpc_host="127.0.0.1", mp_spdz="/opt/mp-spdz")
    known = tmp_path / "known_hosts"
    known.write_text("")
    with pytest.raises(InputError) as info:
        connect(host, known)
    assert str(info.value) == (
        "p0 (root@127.0.0.1:22): the SSH key /tmp is a directory, not a private key file; "
        "fix 'key' for this party in the inventory (the private key's file, e.g. "
        "~/.ssh/id_ed25519, or remove it to use the SSH agent)")
    host = Host(name="p0", ssh_host="127.0.0.1", user="root", key=str(tmp_path / "none"),
                mpc_host="127.0.0.1", mp_spdz="/opt/mp-spdz")
    with pytest.raises(InputError, match="none does not exist; fix 'key'"):
        connect(host, known)


def test_a_key_directory_in_an_inventory_is_reported_by_hosts_check(tmp_path, capsys):
    from harness.cli import main

    inventory = tmp_path / "hosts.toml"
    inventory.write_text('known_hosts = "known_hosts"\n' + "".join(
        f'\n[[party]]\nname = "p{i}"\nssh_host = "127.0.0.{i + 1}"\nuser = "u"\nkey = "/tmp"\n'
        f'mpc_host = "127.0.0.{i + 1}"\nmp_spdz = "/opt/mp-spdz"\n' for i in range(2)))
    (tmp_path / "known_hosts").write_text("")
    assert load_inventory(inventory).hosts[0].key == "/tmp"
    assert main(["hosts", "check", str(inventory)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"p{i} (u@127.0.0.{i + 1}:22): FAILED: the SSH key /tmp is a directory, not "
                   "a private key file; fix 'key' for this party in the inventory (the private "
                   "key's file, e.g. ~/.ssh/id_ed25519, or remove it to use the SSH agent)"
                   for i in range(2)]


def test_paramikos_own_log_never_reaches_the_terminal():
    # paramiko logs a failed handshake's traceback from its transport thread (e.g. when
    # a stop signal closes the socket); unhandled, Python prints it on stderr over the
    # harness's one-line message. A fresh interpreter, as a user's: without the harness
    # the record is printed, with it nothing is.
    import subprocess
    import sys

    emit = ("import logging; logging.getLogger('paramiko.transport').error("
            "'Exception (client): Error reading SSH protocol banner')")
    bare = subprocess.run([sys.executable, "-c", emit], capture_output=True, text=True,
                          check=True)
    assert "Error reading SSH protocol banner" in bare.stderr
    quiet = subprocess.run([sys.executable, "-c", "import harness.remote; " + emit],
                           capture_output=True, text=True, check=True)
    assert quiet.stderr == ""
