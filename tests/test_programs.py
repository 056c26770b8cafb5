"""Rendering and the compile cache (real MP-SPDZ compiler)."""

from __future__ import annotations

import pytest

from harness.engine.programs import compile_program, render

pytestmark = pytest.mark.mpspdz


def test_unchanged_program_is_never_recompiled(tmp_path, mp_spdz):
    params = {"m": 5, "d": 2, "block_rows": 4, "chunk_blocks": 3, "source": "shares"}
    first = compile_program(mp_spdz, "fast", params, cache_dir=tmp_path)
    again = compile_program(mp_spdz, "fast", params, cache_dir=tmp_path)
    other = compile_program(mp_spdz, "fast", {**params, "m": 6}, cache_dir=tmp_path)
    assert first.compile_seconds is not None and again.compile_seconds is None
    assert again.directory == first.directory != other.directory
    assert (first.programs_dir / "Schedules" / "fast.sch").exists()


def test_fast_program_size_does_not_grow_with_n():
    # n enters only through the public input, never the source
    small = render("fast", m=100, d=10, block_rows=256, chunk_blocks=25, source="shares")
    assert "1000000" not in small and len(small) < 3000
    with pytest.raises(ValueError):
        render("nonexistent")
