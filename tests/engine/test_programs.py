"""Rendering and the compile cache (the real MP-SPDZ compiler, and stand-ins)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.engine.mpspdz import MpSpdz
from harness.engine.programs import compile_program, render
from harness.errors import MpSpdzError

PARAMS = {"m": 5, "d": 2, "block_rows": 4, "chunk_blocks": 3, "source": "shares",
          "validate": "none", "bound": 0, "edabits": False}


def _fake_compiler(root: Path, body: str) -> MpSpdz:
    """An MP-SPDZ directory whose compile.py is ``body`` (run in the program's directory)."""
    (root / "Compiler").mkdir(parents=True)
    (root / "compile.py").write_text(f"import pathlib, sys, time\nname = sys.argv[-1][:-4]\n{body}")
    return MpSpdz(root)


@pytest.mark.mpspdz
def test_unchanged_program_is_never_recompiled(tmp_path, mp_spdz):
    params = PARAMS
    first = compile_program(mp_spdz, "fast", params, cache_dir=tmp_path)
    again = compile_program(mp_spdz, "fast", params, cache_dir=tmp_path)
    other = compile_program(mp_spdz, "fast", {**params, "m": 6}, cache_dir=tmp_path)
    assert first.compile_seconds is not None and again.compile_seconds is None
    assert again.directory == first.directory != other.directory
    assert (first.programs_dir / "Schedules" / "fast.sch").exists()


_AGAIN = """
import json, sys
from pathlib import Path
from harness.engine import ensure_mpspdz
from harness.engine.programs import compile_program
done = compile_program(ensure_mpspdz(None, auto_install=False), "fast", json.loads(sys.argv[1]),
                       cache_dir=Path(sys.argv[2]))
print(json.dumps([str(done.directory), done.compile_seconds, "jinja2" in sys.modules]))
"""


@pytest.mark.mpspdz
def test_a_compiled_program_is_found_again_without_rendering(tmp_path, mp_spdz):
    first = compile_program(mp_spdz, "fast", PARAMS, cache_dir=tmp_path)
    again = subprocess.run([sys.executable, "-c", _AGAIN, json.dumps(PARAMS), str(tmp_path)],
                           capture_output=True, text=True, timeout=120, check=True)
    directory, seconds, rendered = json.loads(again.stdout)
    assert (directory, seconds, rendered) == (str(first.directory), None, False)
    # an index entry whose program is gone: rendered and compiled again, into the same place
    shutil.rmtree(first.directory)
    third = compile_program(mp_spdz, "fast", PARAMS, cache_dir=tmp_path)
    assert third.compile_seconds is not None and third.directory == first.directory


def test_fast_program_size_does_not_grow_with_n():
    # n enters only through the public input, never the source
    small = render("fast", m=100, d=10, block_rows=256, chunk_blocks=25, source="shares",
                   validate="none", bound=0, edabits=False)
    assert "1000000" not in small and len(small) < 3000
    with pytest.raises(ValueError):
        render("nonexistent")


def test_concurrent_compilations_of_one_program_wait_for_the_first(tmp_path):
    calls = tmp_path / "calls"
    mp = _fake_compiler(tmp_path / "mp", f"""
with open({str(calls)!r}, "a") as fh:
    fh.write("compiled\\n")
time.sleep(0.5)  # long enough for the other thread to arrive while this one compiles
for sub, file in (("Schedules", name + ".sch"), ("Bytecode", name + "-0.bc")):
    (pathlib.Path("Programs") / sub).mkdir(parents=True, exist_ok=True)
    (pathlib.Path("Programs") / sub / file).write_text("")
""")
    cache = tmp_path / "cache"
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        compile_program(mp, "fast", PARAMS, cache_dir=cache))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert calls.read_text() == "compiled\n"  # once: the second waited and took the cache
    assert sorted(r.compile_seconds is None for r in results) == [False, True]
    assert results[0].directory == results[1].directory
    # no lock left: the program and the index that finds it without rendering
    assert sorted(p.name for p in cache.iterdir()) == [results[0].directory.name, "index"]


def test_a_compiler_that_writes_nothing_points_to_ltm_doctor(tmp_path):
    mp = _fake_compiler(tmp_path / "mp", "sys.exit(0)\n")
    with pytest.raises(MpSpdzError, match="wrote no schedule or bytecode") as info:
        compile_program(mp, "fast", PARAMS, cache_dir=tmp_path / "cache")
    assert "check it with `ltm doctor` or reinstall it" in str(info.value)
    assert list((tmp_path / "cache").iterdir()) == []
