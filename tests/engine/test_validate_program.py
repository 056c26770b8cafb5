"""The programs' check of a client's row against rows crafted to slip past it.

``l2`` squares entries in Z_2^64, where 2^32 squares to 0: its entry pre-check must
keep every such row out. Each row below is loaded as a constant, re-shared with a
random mask (so the parties' summands, and the carries the pre-check meets, are
random) and checked by the validation code the programs include, under real
MP-SPDZ parties of each way of comparing: local conversion with two, three and four
summands, and edaBits.
"""

from __future__ import annotations

import math

import pytest

from harness.clients import precheck_bits
from harness.engine import (
    OUTPUT_MARKER,
    PROTOCOLS,
    REJECTED_MARKER,
    LocalCluster,
    compile_source,
    parse_output,
    parse_rejected,
    render,
)

D = 3
B = math.ceil(math.sqrt(D) * 2**16)  # a plain row's l2 bound at eta = 1, F = 16
PRE = precheck_bits(D)
TOP = 2**63 - 1
ACCEPTED = [[B, 0, 0], [-B, 0, 0], [2**16, 2**16, -2**16], [0, 0, 0]]
REJECTED = [
    [B + 1, 0, 0],  # the norm just past B
    [2**(PRE - 1) - 1, 0, 0],  # within the pre-check, past the norm
    [3 * 2**(PRE - 1), 0, 0],  # just past the pre-check's range (1.5 2^PRE)...
    [-3 * 2**(PRE - 1) - 1, 0, 0],  # ... on either side
    # rows whose squared norm wraps below B^2 in Z_2^64
    [2**32, 0, 0],  # squares to 0
    [2**32 + 1, 0, 0],  # 2^33 + 1
    [-2**32, 2**32, 1],  # 1
    [2**31, 2**31, 2**31],  # 3 2^62: negative as a signed word
    [TOP, -TOP, TOP],  # the poisoned clients' words: 3
]
ROWS = ACCEPTED + REJECTED


def _program(edabits: bool) -> str:
    rows = ", ".join(f"[{', '.join(map(str, row))}]" for row in ROWS)
    return f"""D = {D}
{render("validate", validate="l2", bound=B, edabits=edabits)}
ROWS = [{rows}]
N = len(ROWS)
mask = sint.get_random(size=N)
# Each column re-shared by a random mask: the summands are random, as a client's are.
columns = [(sint.concat([sint(row[c]) for row in ROWS]) + mask) - mask for c in range(D)]
kept = checked(columns)
print_ln('{OUTPUT_MARKER} %s', sint.concat(kept).reveal())
print_ln('{REJECTED_MARKER} %s', rejected[0].reveal())
"""


@pytest.mark.mpspdz
@pytest.mark.parametrize(("protocol", "parties", "edabits"), [
    ("semi2k", 2, False), ("replicated-ring", 3, False), ("semi2k", 4, False),
    ("malicious-rep-ring", 3, True)])
def test_l2_rejects_every_row_whose_squared_norm_wraps(tmp_path, mp_spdz, program_cache,
                                                       protocol, parties, edabits):
    program = compile_source(mp_spdz, "check_rows", _program(edabits), cache_dir=program_cache,
                             options=PROTOCOLS[protocol].split_args(parties))
    runs = LocalCluster(mp_spdz, parties, tmp_path, protocol=protocol).run(program,
                                                                          timeout=300)
    for r in runs:
        kept = parse_output(f"P{r.party}", r.completed.stdout, D * len(ROWS))
        # the columns, each of every row: accepted rows as sent, the others zero
        got = kept.astype(object).reshape(D, len(ROWS)).T
        want = [[v % 2**64 for v in row] for row in ACCEPTED] + [[0] * D] * len(REJECTED)
        assert got.tolist() == want
        assert parse_rejected(f"P{r.party}", r.completed.stdout) == len(REJECTED)
