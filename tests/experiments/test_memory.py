"""The process tree's peak memory (harness.experiments.memory), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.experiments.memory import PeakMemory, process_tree, tree_pss_bytes

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"),
                                reason="needs Linux's /proc/PID/smaps_rollup")

# A child that touches 200 MB (so it is resident, not only reserved), says so, and
# holds it until its stdin closes.
_CHILD = ("import sys; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
          "print('ready', flush=True); sys.stdin.read()")


def test_peak_sees_a_childs_memory() -> None:
    with PeakMemory(interval=0.05) as peak:
        child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
            assert child.pid in process_tree(os.getpid())
            time.sleep(0.3)  # several sampling intervals while the child holds its memory
        finally:
            child.communicate("")
    assert peak.samples >= 3
    assert peak.bytes > 150 * 2**20
    # The child is gone: what the tree holds now is far below the peak it reached.
    assert tree_pss_bytes(os.getpid()) < peak.bytes - 150 * 2**20


def test_a_short_block_still_has_a_figure() -> None:
    with PeakMemory(interval=60) as peak:
        pass
    assert peak.samples == 2 and peak.bytes > 0
    with pytest.raises(ValueError, match="interval"):
        PeakMemory(interval=0)
