"""The rehearsal: the whole multi-host path on fresh machines, as a user runs it.

Three server hosts and two client hosts (``[[client]]``: each streams about half
of the clients' shares to every server, or prepares and sends files for the
``reference`` program), each its own new unprivileged
user with an empty home (no harness, no MP-SPDZ) behind its own sshd in its own
network namespace, every link shaped like an EC2 t3.large. The commands are the
README's: trust, setup, check, reproduce (fast, local, reference), a seeded run
from both client hosts, a run with the shares sent from here, and a second
setup that must change nothing. Afterwards no process of those users and no
namespace is left.

The hosts have no internet: their pip reads the harness's dependencies from a
wheelhouse built here (see tests/_fresh.py), which stands in for PyPI.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from _fresh import FreshCluster, namespaces, wheelhouse

from harness.cli import main
from harness.experiments.reproduce import RAW_FILE, load_raw

pytestmark = [pytest.mark.root, pytest.mark.mpspdz, pytest.mark.slow]

PROGRAMS = ("fast", "local", "reference")


CLIENTS = ("c0", "c1")


def _inventory(path: Path, cluster: FreshCluster, client: bool = True) -> Path:
    lines = ['known_hosts = "known_hosts"', "base_port = 15000"]
    for host in cluster.hosts:
        if host.name in CLIENTS and not client:
            continue
        lines += ["", "[[client]]" if host.name in CLIENTS else "[[party]]",
                  f'name = "{host.name}"', f'ssh_host = "{host.address}"',
                  f"ssh_port = {host.port}", f'user = "{host.user}"',
                  f'key = "{cluster.client_key}"', f'mpc_host = "{host.address}"',
                  'mp_spdz = "~/.local/share/ltm-harness/mp-spdz"', 'workdir = "~/ltm-runs"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _ltm(capsys, *argv: str) -> str:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, f"ltm {' '.join(argv)} failed: {captured.err}"
    return captured.out


@pytest.mark.timeout(900)
def test_rehearsal_on_fresh_hosts(tmp_path, capsys, mp_spdz, program_cache):
    cluster = None
    times: dict[str, float] = {}
    try:
        started = time.perf_counter()
        wheels = wheelhouse()
        times["wheelhouse"] = time.perf_counter() - started
        cluster = FreshCluster(tmp_path / "cluster", profile="t3.large")
        env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
        for name in ("s0", "s1", "s2", *CLIENTS):
            cluster.add(name, env)
        for host in cluster.hosts:  # fresh: nothing of ours in the home
            assert sorted(p.name for p in host.home.iterdir() if p.name != ".ssh"
                          and not p.name.startswith((".bash", ".profile"))) == []
        inv = str(_inventory(tmp_path / "hosts.toml", cluster))

        _ltm(capsys, "hosts", "trust", inv, "--yes")
        started = time.perf_counter()
        out = _ltm(capsys, "hosts", "setup", inv, "--mp-spdz", "local", "--yes")
        times["setup"] = time.perf_counter() - started
        lines = [line for line in out.splitlines() if ": ready in " in line]
        assert len(lines) == 5, out  # one progress line per host
        for line in lines:
            assert "harness 0.1.0 installed" in line
            times[f"setup {line.split()[0]}"] = float(re.search(r"ready in ([\d.]+) s", line)[1])
        assert sum("MP-SPDZ: " in line for line in lines) == 3  # the clients run no party
        assert "5 host(s) ready; 5 changed." in out
        for host in cluster.hosts:
            record = json.loads((host.home / ".local/share/ltm-harness/setup.json").read_text())
            assert record["harness"]["version"] == "0.1.0"
            assert len(record["harness"]["wheel_sha256"]) == 64

        out = _ltm(capsys, "hosts", "check", inv)
        assert out.count("same as this machine's") == 5, out
        assert out.count("MP-SPDZ 0.4.2 at ~/.local/share/ltm-harness/mp-spdz") == 3

        for program in PROGRAMS:
            started = time.perf_counter()
            _ltm(capsys, "reproduce", "table4", "--scale", "0.01", "--repeat", "2", "--hosts",
                 inv, "--program", program, "--out", str(tmp_path / program), "--no-progress")
            times[f"table4 {program}"] = time.perf_counter() - started
            raw = load_raw(tmp_path / program / RAW_FILE)
            # one row per party of each repetition of the 5 cells, all verified
            assert raw.groupby(["cell", "repetition"]).ngroups == 5 * 2, raw
            assert len(raw) == 5 * 2 * 2 and raw["verified"].all(), raw
            assert (raw["upload_s"] > 0).all()
            if program == "local":
                assert (raw["aggregate_s"] > 0).all()

        # seeded sharing streamed from both client hosts: every server takes each one's
        # stream and expands the seeds as they arrive
        started = time.perf_counter()
        _ltm(capsys, "run", "--hosts", inv, "--program", "fast", "--sharing", "seeded",
             "--clients", "5001", "--out", str(tmp_path / "seeded"))
        times["seeded fast"] = time.perf_counter() - started
        result = json.loads((tmp_path / "seeded" / "result.json").read_text())
        assert result["verification"]["ok"] and result["parameters"]["sharing"] == "seeded"
        (a, b), (c, d) = result["parameters"]["layout"]["client_ranges"]
        assert a == 0 and 0 < b == c < d == 5001  # contiguous, each host some clients
        assert result["timings"]["stream_expand_s"] > 0
        assert all(p["upload_s"] > 0 for p in result["parties"])

        # without [client], the shares go from here; the servers still aggregate on their hosts
        servers_only = str(_inventory(tmp_path / "servers.toml", cluster, client=False))
        _ltm(capsys, "run", "--hosts", servers_only, "--program", "local", "--clients", "5000",
             "--out", str(tmp_path / "local-from-here"))
        result = json.loads((tmp_path / "local-from-here" / "result.json").read_text())
        assert result["verification"]["ok"] and len(result["parties"]) == 3
        assert all(p["aggregate_s"] > 0 and p["upload_s"] > 0 for p in result["parties"])

        # a host whose harness differs from this one is flagged
        record_path = cluster.hosts[1].home / ".local/share/ltm-harness/setup.json"
        original = record_path.read_text()
        record = json.loads(original)
        record["harness"]["digest"] = "0" * 64
        record_path.write_text(json.dumps(record))
        assert main(["hosts", "check", inv]) == 1
        out = capsys.readouterr().out
        assert "DIFFERS from this machine's harness" in out and out.count("FAILED") == 1
        record_path.write_text(original)

        # a second setup changes nothing and says so
        started = time.perf_counter()
        out = _ltm(capsys, "hosts", "setup", inv, "--mp-spdz", "local", "--yes")
        times["second setup"] = time.perf_counter() - started
        assert out.count("unchanged (already set up)") == 5
        assert "nothing changed" in out
    finally:
        left = cluster.close() if cluster is not None else []
        with capsys.disabled():
            print("\nrehearsal times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))
    assert left == []
    assert not [ns for ns in namespaces() if ns.startswith(f"ltmr-{cluster.tag}")]
