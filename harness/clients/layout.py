"""The blocked share file's public parameters: its chunk and its rows per block.

The layout is public: it depends only on the public sketch, never on data.
The blocked file (made a chunk of clients at a time by :mod:`harness.clients.blocks`)
is built for vector operations. Slots are grouped by accumulator
(a = bucket, plus m for negative signs, so the program never multiplies by a
sign), each accumulator's run is padded with zero rows to whole blocks of R
rows, and K blocks form a chunk stored row-major as (R, K, d). Summing a
chunk's R row-slabs of K*d shares gives all K block sums at once, so a program
needs R-1 vector additions per chunk and one small scatter per block, however
large n is. Padding rows are zero in every server's file; the zero shares of
zero cost nothing in security, since their positions are public.
"""

from __future__ import annotations

import math

__all__ = ["CHUNK_SHARES", "MAX_BLOCK_ROWS", "choose_block_rows"]

# Shares per engine read: large enough that a read's fixed cost (open, header
# check) vanishes, small enough to stay in cache-sized register vectors.
CHUNK_SHARES = 1 << 16
MAX_BLOCK_ROWS = 256


def choose_block_rows(n: int, m: int, s: int) -> int:
    """Rows per block: a power of two near 1/16 of an accumulator's run.

    Padding costs R/2 rows per accumulator on average, about 3% of the file
    at this ratio; larger blocks mean fewer scatters in the program.
    """
    run = s * n / (2 * m)
    return int(min(MAX_BLOCK_ROWS, 2 ** max(0, math.floor(math.log2(max(run / 16, 1))))))
