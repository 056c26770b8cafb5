"""Files holding shares, keys or inputs are unreadable to other users, from creation on.

The check is made as a real second user (created here; CI runs as root) who
walks the whole tree while the parties run, in a directory every user may
enter, as a user's home or a shared /tmp would be.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from harness.fileio import (
    copy_private,
    copy_tree_private,
    open_private,
    private_dir,
    write_private,
)

ROOT = Path(__file__).resolve().parents[1]
OTHER = "ltm-other"
# Where shares, keys and inputs live (the results next to them are public).
SECRET_PARTS = ("Persistence", "Player-Data", "certs", "Input-P", "Transactions-P", ".key",
                "data.npy")


def is_secret(path: str) -> bool:
    return any(part in path for part in SECRET_PARTS)


@pytest.fixture(scope="module")
def other_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("creating a second user needs root")
    if subprocess.run(["id", OTHER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", OTHER], check=True, capture_output=True)
    return OTHER


@pytest.fixture
def shared_dir():
    """A directory any user can enter (pytest's own tmp_path is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="ltm-secrets-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def readable_by(user: str, root: Path) -> list[str]:
    """Every file under ``root`` that ``user`` can open for reading, as that user sees it."""
    found = subprocess.run(["runuser", "-u", user, "--", "find", str(root), "-type", "f",
                            "-readable"], capture_output=True, text=True, timeout=60)
    return found.stdout.split()


def files_under(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


def parties_running(root: Path) -> bool:
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(str(root)):
                with open(f"/proc/{entry}/comm") as fh:
                    if fh.read().strip() == "semi2k-party.x":
                        return True
        except OSError:
            continue
    return False


@pytest.mark.mpspdz
@pytest.mark.root
@pytest.mark.parametrize("command", [
    ["reproduce", "table4", "--scale", "0.1", "--repeat", "1", "--no-progress",
     "--program", "reference"],
    ["reproduce", "table4", "--scale", "0.1", "--repeat", "1", "--no-progress"],
    ["run", "--clients", "150000", "--rows", "10", "--dim", "10", "--keep-work"],
], ids=["reproduce-reference", "reproduce-fast", "run-keep-work"])
def test_no_other_user_can_read_a_secret_mid_run(other_user, shared_dir, program_cache,
                                                  command):
    out = shared_dir / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *command, "--out", str(out)], cwd=ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(program_cache)}, umask=0o022,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        # fast's parties start before their shares exist (they are fed the stream)
        while not (parties_running(shared_dir) and any(
                "Persistence" in f or "Input-P0" in f for f in files_under(shared_dir))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        # Mid-run: every party's key, certificates, inputs or shares are on disk now.
        secrets = [f for f in files_under(shared_dir) if is_secret(f)]
        readable = readable_by(other_user, shared_dir)
        if command[0] == "reproduce":
            proc.terminate()  # the rest of the sweep would only repeat this
    finally:
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == (143 if command[0] == "reproduce" else 0), err
    assert any("Persistence" in f or "Input-P0" in f for f in secrets)
    assert any(".key" in f for f in secrets)
    assert [f for f in readable if is_secret(f)] == []
    # What remains afterwards: the results are there to share, the secrets are not.
    after = readable_by(other_user, shared_dir)
    if command[0] == "reproduce":
        assert str(out / "sweep.json") in after  # the walk does see what it may read
    kept = [f for f in files_under(shared_dir) if is_secret(f)]
    if "--keep-work" in command:
        assert any("Transactions-P1" in f for f in kept)
    assert [f for f in after if is_secret(f)] == []


def test_private_helpers_ignore_a_permissive_umask(tmp_path):
    previous = os.umask(0)
    try:
        directory = private_dir(tmp_path / "a" / "b")
        (tmp_path / "loose").write_bytes(b"old")
        os.chmod(tmp_path / "loose", 0o666)
        with open_private(tmp_path / "loose") as fh:  # an existing file is narrowed too
            fh.write(b"share")
        written = write_private(directory / "key", "secret")
        copied = copy_private(written, directory / "copy")
    finally:
        os.umask(previous)
    modes = {p: stat.S_IMODE(os.stat(p).st_mode)
             for p in (tmp_path / "a", directory, tmp_path / "loose", written, copied)}
    assert modes == {tmp_path / "a": 0o700, directory: 0o700, tmp_path / "loose": 0o600,
                     written: 0o600, copied: 0o600}
    assert copied.read_text() == "secret" and (tmp_path / "loose").read_bytes() == b"share"


@pytest.mark.mpspdz
@pytest.mark.root
def test_mismatch_evidence_is_never_readable_while_it_is_written(other_user, shared_dir,
                                                                  program_cache):
    """A run whose sketch fails verification (``--tamper``) keeps its evidence: the
    clients' data and, with ``--keep-work``, every party's shares and keys. Another
    user walks the tree in a loop while it is copied: 160 MB of data.npy (the rows of
    a --data file are copied; synthetic ones are not) take long enough that a copy
    made with default modes and tightened afterwards is seen."""
    out = shared_dir / "out"
    rows = private_dir(shared_dir / "input") / "rows.npy"
    with open_private(rows) as fh:
        np.save(fh, np.random.default_rng(3).uniform(-1, 1, (2_000_000, 10)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--data", str(rows),
         "--rows", "10", "--program", "local", "--noise", "none", "--tamper", "1",
         "--keep-work", "--out", str(out)], cwd=ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(program_cache)}, umask=0o022,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    walks = 0
    try:
        while proc.poll() is None:
            seen.update(readable_by(other_user, shared_dir))
            walks += 1
    finally:
        _, err = proc.communicate(timeout=300)
    evidence = Path(str(out) + ".mismatch")
    assert proc.returncode == 1 and f"evidence kept in {evidence}" in err, err
    kept = files_under(evidence)
    assert any(f.endswith("data.npy") for f in kept)
    assert any("Transactions-P1" in f or "Received-P1" in f for f in kept)
    assert any(f.endswith(".key") for f in kept)
    assert walks > 10, "the reader never ran while the evidence was written"
    assert sorted(f for f in seen if is_secret(f)) == []
    assert readable_by(other_user, evidence) == []


def test_copy_tree_private_creates_everything_private(tmp_path):
    source = tmp_path / "src"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "share").write_bytes(b"s" * 1000)
    (source / "public.json").write_text("{}")
    os.chmod(source / "public.json", 0o644)
    (source / "link").symlink_to("a/b/share")
    previous = os.umask(0)
    try:
        copy_tree_private(source, tmp_path / "dst")
    finally:
        os.umask(previous)
    dest = tmp_path / "dst"
    modes = {str(p.relative_to(dest)): stat.S_IMODE(p.lstat().st_mode)
             for p in [dest, *dest.rglob("*")] if not p.is_symlink()}
    assert modes == {".": 0o700, "a": 0o700, "a/b": 0o700, "a/b/share": 0o600,
                     "public.json": 0o600}
    assert os.readlink(dest / "link") == "a/b/share"
    assert (dest / "a" / "b" / "share").read_bytes() == b"s" * 1000
    with pytest.raises(FileExistsError):
        copy_tree_private(source, dest)
