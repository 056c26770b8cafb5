"""``fast`` on hosts is fed as it is here: the default ``ltm run --hosts`` (program fast,
full sharing) keeps no share file on this machine and sends none by SFTP.

Each host's agent takes its server's TLS stream and feeds its MP-SPDZ party, started
first and waiting at its public input (a FIFO), a chunk at a time. A watcher thread
polls the coordinator's side (the run's --out and work directories, its temporary
directory, /dev/shm) for a share file while ``ltm run`` runs; every file the run
sends by SFTP is recorded, and every agent's reply says how its party was fed; the
run verifies bit for bit. (Peak memory against n: ``benchmarks/modes_memory.py
--placements hosts``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from _sshd import trusted_inventory

from harness.cli import main
from harness.remote._group import PartyGroup
from harness.remote._party import RemoteParty

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]

# A party's share file (Persistence/Transactions-P<i>.data), or one being written.
SHARE_FILE = re.compile(r"Transactions-P\d+\.data")


class Watcher(threading.Thread):
    """Every share file that appears under ``roots`` (``skip``'s subtrees aside) while
    it runs, polled every few milliseconds."""

    def __init__(self, roots: list[Path], skip: Path) -> None:
        super().__init__(daemon=True)
        self.roots, self.skip = roots, skip
        self.seen: set[str] = set()
        self.polls = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for root in self.roots:
                for here, dirs, files in os.walk(root):
                    if Path(here) == self.skip:
                        dirs.clear()
                        continue
                    self.seen.update(os.path.join(here, f) for f in files
                                     if SHARE_FILE.search(f))
            self.polls += 1
            self.done.wait(0.005)


def test_fast_on_hosts_feeds_each_party_there_and_no_share_file_is_here_or_sent(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch, capsys, request):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    # Short: multiprocessing's AF_UNIX sockets live under TMPDIR (at most 107 bytes).
    tmp = Path(tempfile.mkdtemp(prefix="ltm-fed-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR anew
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    sent: list[str] = []  # every file the run sends by SFTP
    upload = RemoteParty.upload

    def sending(self, directories, uploads, abandon):
        sent.extend(u.remote for u in uploads if u.moved_from is None)
        return upload(self, directories, uploads, abandon)

    replies: list[dict] = []  # each server agent's serve reply
    finish = PartyGroup.finish_stream

    def finished(self):
        replies.extend(figures := finish(self))
        return figures

    monkeypatch.setattr(RemoteParty, "upload", sending)
    monkeypatch.setattr(PartyGroup, "finish_stream", finished)
    out = tmp_path / "out"
    watcher = Watcher([tmp_path, tmp, Path("/dev/shm")], skip=tmp_path / "farm")
    watcher.start()
    try:
        # The default program and sharing: fast, full.
        code = main(["run", "--hosts", str(path), "--clients", "20000", "--dim", "3",
                     "--rows", "10", "--seed", "5", "--out", str(out)])
    finally:
        watcher.done.set()
        watcher.join()
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "result.json").read_text())
    assert result["verification"]["ok"], result["verification"]
    assert result["parameters"]["program"] == "fast"
    assert result["parameters"]["sharing"] == "full"
    assert result["parameters"]["layout"]["kind"] == "blocked-per-chunk"
    assert watcher.polls > 10
    assert watcher.seen == set(), "share files on the coordinator"
    # By SFTP: the program, keys, certificates, the stream's description; no share file.
    assert any("Bytecode" in name for name in sent), sent
    assert not [name for name in sent if SHARE_FILE.search(name)
                or name.startswith("Persistence/")], sent
    # Each host's agent fed its party through the FIFO as the stream came.
    assert [reply.get("fed") for reply in replies] == [True, True]
    assert result["timings"]["stream_upload_bytes"] > 0  # the shares went by TLS
