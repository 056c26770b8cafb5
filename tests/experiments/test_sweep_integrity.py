"""One command per output directory; a resumed sweep heals what a kill tore, refuses
what is damaged, and reports success only when every cell is complete."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import LtmError
from harness.experiments.reproduce import RAW_FILE, ReproduceConfig, load_raw, reproduce

pytestmark = [pytest.mark.mpspdz]

ROOT = Path(__file__).resolve().parents[2]
rp = importlib.import_module("harness.experiments.reproduce")
_EXECUTE = rp.execute


def _cfg(out: Path, cache: Path, **kw) -> ReproduceConfig:
    return ReproduceConfig(tables="table4", out=out, scale=0.005, repeat=1, cache_dir=cache,
                           progress=False, **kw)


class _Count:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return _EXECUTE(*args, **kwargs)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, program_cache) -> Path:
    """A finished sweep (5 cells, 1 repetition, 2 parties: 10 rows) to copy and damage."""
    out = tmp_path_factory.mktemp("finished") / "sweep"
    reproduce(_cfg(out, program_cache))
    return out


@pytest.fixture
def sweep(tmp_path, finished) -> Path:
    out = tmp_path / "sweep"
    out.mkdir()
    for name in ("sweep.json", RAW_FILE):
        (out / name).write_bytes((finished / name).read_bytes())
    return out


def _lines(out: Path) -> list[str]:
    return (out / RAW_FILE).read_text().splitlines(keepends=True)


def test_a_torn_repetition_is_dropped_whole_and_run_once(sweep, program_cache, monkeypatch):
    lines = _lines(sweep)
    # The kill came while the last repetition was written: one party's row, half the other.
    (sweep / RAW_FILE).write_text("".join(lines[:-1]) + lines[-1][:25])
    counter = _Count()
    monkeypatch.setattr(rp, "execute", counter)
    reproduce(_cfg(sweep, program_cache))
    assert counter.calls == 1
    raw = load_raw(sweep / RAW_FILE)
    assert len(_lines(sweep)) == len(raw) == 10  # nothing left over from the torn write
    assert raw.groupby(["cell", "repetition"]).size().eq(2).all()
    counter.calls = 0
    reproduce(_cfg(sweep, program_cache))  # and it stays healed
    assert counter.calls == 0


@pytest.mark.parametrize(("line", "needle"), [
    ("not json at all\n", "line 9 is not JSON"),
    ("[1, 2]\n", "line 9 is JSON but not a raw row"),
    ('{"cell": 5}\n', "line 9 has no valid 'table'"),
    (b"\xff\xfe\n", "line 9 is not JSON"),
])
def test_a_damaged_line_is_named_before_anything_is_appended(sweep, monkeypatch, capsys, line,
                                                             needle):
    lines = _lines(sweep)
    del lines[-2:]  # a repetition is missing, so a resume would append after the damage
    # Damaged, yet ending in a newline: not the torn write of a kill.
    data = "".join(lines).encode() + (line if isinstance(line, bytes) else line.encode())
    (sweep / RAW_FILE).write_bytes(data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(sweep.parent / "cache"))
    code = main(["reproduce", "table4", "--scale", "0.005", "--repeat", "1", "--no-progress",
                 "--out", str(sweep)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and needle in err, err
    assert (sweep / RAW_FILE).read_bytes() == data


@pytest.mark.parametrize("content", ["[]", '{"settings": [1]}', '"x"', "{}"])
def test_sweep_json_of_the_wrong_shape_is_one_line(sweep, capsys, content):
    (sweep / "sweep.json").write_text(content)
    code = main(["reproduce", "table4", "--scale", "0.005", "--repeat", "1",
                 "--out", str(sweep)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("ltm: error: ") and err.count("\n") == 1, err
    assert "sweep.json is damaged" in err


def test_success_is_reported_only_when_every_cell_is_complete(tmp_path, program_cache,
                                                              monkeypatch):
    append = rp._append
    lost = []

    def lose_one(raw_path, rows):
        if not lost:  # a write that never reached the file
            lost.append(rows[0]["cell"])
            return
        append(raw_path, rows)

    monkeypatch.setattr(rp, "_append", lose_one)
    out = tmp_path / "sweep"
    with pytest.raises(LtmError, match=r"1 of 5 repetitions are missing .* run the same "
                                       r"command again"):
        reproduce(_cfg(out, program_cache))
    assert not (out / "table4.md").exists()


def _holder(args: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen:
    """A real ltm command on ``out``, once it holds the lock and its parties run."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", *args, "--out", str(out)],
                            cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lock = out.parent / f".{out.name}.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return proc


@pytest.mark.parametrize("command", [
    ["run", "--clients", "150000", "--rows", "10", "--noise", "none", "--program",
     "reference"],
    ["reproduce", "table4", "--scale", "0.1", "--repeat", "2", "--no-progress"],
], ids=["run", "reproduce"])
def test_a_second_command_on_the_same_out_is_refused_naming_the_first(tmp_path, program_cache,
                                                                      capsys, command):
    out = tmp_path / "out"
    first = _holder(command, out, {"XDG_CACHE_HOME": str(program_cache)})
    try:
        code = main([*command, "--out", str(out)])
        err = capsys.readouterr().err
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert code == 1 and err.count("\n") == 1, err
    assert f"--out {out} is in use by another command (pid {first.pid}: ltm {command[0]} " \
        in err
    assert first.returncode == 143  # the first was not disturbed: it ran until stopped
    assert not (out.parent / f".{out.name}.lock").exists()


_LATER = ("sharing", "expand_s", "t_end_to_end_s", "upload_measured")


def test_a_sweep_from_before_sharing_and_protocol_resumes(sweep, program_cache, monkeypatch):
    # sweep.json and raw rows as written before --protocol and --sharing existed
    import json

    record = json.loads((sweep / "sweep.json").read_text())
    for key in ("sharing", "protocol"):
        del record["settings"][key]
    (sweep / "sweep.json").write_text(json.dumps(record))
    rows = [json.loads(line) for line in _lines(sweep)]
    (sweep / RAW_FILE).write_text("".join(
        json.dumps({k: v for k, v in row.items() if k not in _LATER}) + "\n" for row in rows))
    counter = _Count()
    monkeypatch.setattr(rp, "execute", counter)
    reproduce(_cfg(sweep, program_cache))  # read as semi2k and full: the same sweep
    assert counter.calls == 0
    assert "T_end_to_end" not in (sweep / "table4.md").read_text()
    with pytest.raises(LtmError, match="sharing 'full' there, 'seeded' now"):
        reproduce(_cfg(sweep, program_cache, sharing="seeded"))


@pytest.mark.parametrize("name, tables, repeat", [("fast", "all", None),
                                                  ("security", "security", 2)])
def test_committed_sweeps_resume_and_render_unchanged(tmp_path, program_cache, monkeypatch,
                                                      name, tables, repeat):
    committed = ROOT / "benchmarks" / "reproduction" / name
    out = tmp_path / name
    out.mkdir()
    for file in ("sweep.json", RAW_FILE):
        (out / file).write_bytes((committed / file).read_bytes())
    counter = _Count()
    monkeypatch.setattr(rp, "execute", counter)
    reproduce(ReproduceConfig(tables=tables, out=out, repeat=repeat, cache_dir=program_cache,
                              progress=False))
    assert counter.calls == 0  # every repetition is there: nothing runs
    for md in committed.glob("*.md"):
        if md.name != "report.md":  # it names the machine
            assert (out / md.name).read_text() == md.read_text(), md.name
