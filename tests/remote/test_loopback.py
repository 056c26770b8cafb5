"""`ltm hosts loopback start | stop`: a --hosts run on one machine, and nothing left after.

The commands run as a user runs them (``python -m harness``, real sshd daemons that
outlive the command that started them), against the real MP-SPDZ.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import harness.remote.loopback as loopback
from harness import cli
from harness.cli.hosts import MAX_LOOPBACK_HOSTS
from harness.errors import InputError, LtmError
from harness.remote import load_inventory, start_loopback, stop_loopback

ROOT = Path(__file__).resolve().parents[2]


def ltm(*args: str, cwd: Path, cache: Path | None = None,
        state: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTM_NO_INSTALL": "1"}
    if state is not None:
        env["XDG_STATE_HOME"] = str(state)
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def running_under(directory: Path) -> list[str]:
    """Command lines of live processes that name ``directory`` (its sshd servers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    line = fh.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{entry}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if str(directory) in line and state != "Z":
                found.append(line)
    return found


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.mpspdz
@pytest.mark.slow
def test_start_trust_run_stop_runs_on_the_hosts_and_leaves_nothing(
        tmp_path: Path, mp_spdz, program_cache) -> None:
    hosts = tmp_path / "hosts"
    try:
        started = ltm("hosts", "loopback", "start", "2", "--dir", "hosts",
                      "--mp-spdz", str(mp_spdz.root), cwd=tmp_path)
        assert started.returncode == 0, started.stderr
        assert started.stdout.splitlines()[-1].startswith("wrote hosts/hosts.toml: 2 loopback")
        inventory = load_inventory(hosts / "hosts.toml")
        ports = [h.ssh_port for h in inventory.hosts]
        assert [h.name for h in inventory.hosts] == ["p0", "p1"]
        assert all(answers(p) for p in ports)
        # The daemons outlived the command. sshd re-executes itself with -R for each
        # connection, and the probes above may still be closing theirs.
        assert len([c for c in running_under(hosts) if " -R " not in c + " "]) == 2
        # Keys, configuration and homes: no file others may read, no directory they
        # may enter.
        for path in [hosts, *hosts.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"

        trusted = ltm("hosts", "trust", "hosts/hosts.toml", "--yes", cwd=tmp_path)
        assert trusted.returncode == 0, trusted.stderr
        assert trusted.stdout.count("(new, pinned)") == 2
        run = ltm("run", "--hosts", "hosts/hosts.toml", "--program", "local", "--clients",
                  "2000", "--out", "out", cwd=tmp_path, cache=program_cache)
        assert run.returncode == 0, run.stderr
        result = json.loads((tmp_path / "out" / "result.json").read_text())
        assert result["verification"]["ok"]
        # The hosts have the harness: each server's agent took its stream over TLS on its
        # host and summed it there (a run here would have no upload to time).
        assert result["timings"]["stream_upload_s"] > 0
        assert all(p["upload_bytes_sent"] > 0 for p in result["parties"])
        assert "verified: yes, bit-exact" in run.stdout

        stopped = ltm("hosts", "loopback", "stop", "--dir", "hosts", cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == "stopped 2 loopback host(s); removed hosts"
        assert not hosts.exists()  # the keys, homes and working directories with it
        assert running_under(hosts) == []
        assert not any(answers(p) for p in ports)
    finally:
        if (hosts / "loopback.json").exists():
            stop_loopback(hosts, echo=lambda line: None)


@pytest.mark.mpspdz
def test_without_dir_the_hosts_and_their_key_live_outside_the_working_directory(
        tmp_path: Path, mp_spdz) -> None:
    """The working directory may be a checkout: the login key must not land in it, and
    the output says where it is."""
    work, state = tmp_path / "checkout", tmp_path / "state"
    work.mkdir()
    hosts = state / "ltm-harness" / "loopback-hosts"
    try:
        started = ltm("hosts", "loopback", "start", "2", "--mp-spdz", str(mp_spdz.root),
                      cwd=work, state=state)
        assert started.returncode == 0, started.stderr
        assert list(work.iterdir()) == []
        assert (hosts / "hosts.toml").is_file() and (hosts / "client_key").is_file()
        assert (f"your key to log in to them: {hosts / 'client_key'} (private, 0600; `stop` "
                "removes it with the hosts)") in started.stdout.splitlines()
        stopped = ltm("hosts", "loopback", "stop", cwd=work, state=state)
        assert stopped.returncode == 0, stopped.stderr
        assert not hosts.exists() and running_under(hosts) == []
    finally:
        for left in (hosts, work / "loopback-hosts"):  # where a failed check left them
            if (left / "loopback.json").exists():
                stop_loopback(left, echo=lambda line: None)


def test_the_tour_s_hosts_directory_is_ignored_by_git() -> None:
    """The README's tour starts its hosts with --dir hosts in the checkout."""
    for path in ("hosts/client_key", "hosts/hosts.toml", "loopback-hosts/client_key"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} is not ignored by .gitignore"


def test_a_bad_count_is_one_line_and_starts_nothing(tmp_path: Path, monkeypatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for count in ("1", str(MAX_LOOPBACK_HOSTS + 1), "two"):
        assert cli.main(["hosts", "loopback", "start", count, "--dir", "d"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and " N " in err, err
        assert not (tmp_path / "d").exists()
    assert MAX_LOOPBACK_HOSTS == loopback.MAX_HOSTS
    with pytest.raises(InputError, match="between 2 and"):
        start_loopback(1, tmp_path / "d", tmp_path, base_port=20000)


def test_without_sshd_the_error_names_the_package(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopback, "SSHD", tmp_path / "no-sshd")
    with pytest.raises(LtmError, match=r"no-sshd is missing: install the openssh-server "):
        start_loopback(2, tmp_path / "d", tmp_path, base_port=20000)
    assert not (tmp_path / "d").exists()


def test_a_directory_in_use_is_refused_and_stop_needs_one_start_made(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="not an empty directory"):
        start_loopback(2, tmp_path / "d", tmp_path, base_port=20000)
    assert (tmp_path / "d" / "mine.txt").read_text() == "keep"
    done = ltm("hosts", "loopback", "stop", "--dir", "d", cwd=tmp_path)
    assert done.returncode == 1 and "holds no loopback hosts" in done.stderr
    assert (tmp_path / "d" / "mine.txt").exists()


def test_a_server_that_cannot_start_leaves_nothing_running_or_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second server's port is taken: the first is stopped, the directory removed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([loopback.free_port(), taken.getsockname()[1]])
        monkeypatch.setattr(loopback, "free_port", lambda: next(ports))
        with pytest.raises(LtmError, match=r"sshd for p1 exited: .*Address already in use.*"
                                           r"nothing was left running"):
            start_loopback(2, tmp_path / "d", tmp_path, base_port=20000,
                           echo=lambda line: None)
    assert not (tmp_path / "d").exists()
    assert running_under(tmp_path / "d") == []
