"""The summaries the pages show add up, and name each figure as `ltm run` does.

A shown ``T_end_to_end`` line of a streamed run ends with the term after the stream:
``+ T_MPC x`` (the run's T_MPC, which its ``T_MPC`` line must show as the same x),
``+ MPC x (opening the sums)`` (``local``, whose T_MPC includes the servers' sums), or
``+ MPC x after it (T_MPC y: the parties summed the stream as it came)`` (``fast`` fed
the stream, whose ``T_MPC`` line must show the same y). A bare ``+ MPC x`` is the old
name, which read as if it were T_MPC. Its terms add up to the total, to the printed
digits.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _examples import ROOT, doc_pages

_E2E = re.compile(r"T_end_to_end (?P<total>[\d.]+) s = stream (?P<stream>[\d.]+) \(.*\)"
                  r"(?: \+ upload (?P<upload>[\d.]+))? \+ (?P<term>T_MPC|MPC) (?P<after>[\d.]+)"
                  r"(?:(?P<opening> \(opening the sums\))|(?: after it \(T_MPC (?P<beside>[\d.]+): "
                  r"the parties summed the stream as it came\)))?")
_T_MPC = re.compile(r"T_MPC (?P<t>[\d.]+) s \(slowest party(?P<agg>, its aggregation while the "
                    r"shares arrived included)?\)")


def shown_summaries(text: str) -> list[tuple[int, str, str | None]]:
    """(line, its T_end_to_end line, the T_MPC line shown above it for the same run)."""
    found, t_mpc = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("$ ") or stripped.startswith("```"):
            t_mpc = None  # a new command, or a new block: a new run
        elif stripped.startswith("T_MPC ") and "slowest party" in stripped:
            t_mpc = stripped
        elif stripped.startswith("T_end_to_end ") and " = stream " in stripped:
            found.append((number, stripped, t_mpc))
    return found


def problems(line: str, t_mpc: str | None) -> list[str]:
    got = _E2E.fullmatch(line)
    if got is None:
        return ["not a summary line ltm run prints (the term after the stream is "
                "'+ T_MPC x', '+ MPC x (opening the sums)' or '+ MPC x after it (T_MPC y: "
                "...)')"]
    bad = []
    if got["term"] == "MPC" and not (got["opening"] or got["beside"]):
        bad.append("'+ MPC x' without '(opening the sums)': ltm run prints '+ T_MPC x' here")
    if got["term"] == "T_MPC" and (got["opening"] or got["beside"]):
        bad.append("'+ T_MPC x' with a note on the MPC is no line ltm run prints")
    parts = [got["stream"], got["upload"], got["after"]]
    total = sum(float(p) for p in parts if p is not None)
    if abs(total - float(got["total"])) > 0.0015:
        bad.append(f"the terms add up to {total:.3f}, not {got['total']}")
    shown = _T_MPC.search(t_mpc) if t_mpc else None
    if shown is not None:
        if got["term"] == "T_MPC" and shown["t"] != got["after"]:
            bad.append(f"'+ T_MPC {got['after']}' beside 'T_MPC {shown['t']} s'")
        if got["beside"] and shown["t"] != got["beside"]:
            bad.append(f"'(T_MPC {got['beside']}: ...)' beside 'T_MPC {shown['t']} s'")
        if bool(got["opening"]) != bool(shown["agg"]):
            bad.append("the T_MPC line and the term after the stream disagree on whether "
                       "the servers summed inside the stream")
    return bad


def _pages() -> list[Path]:
    return [*doc_pages(), ROOT / "benchmarks" / "README.md"]


@pytest.mark.parametrize(("t_mpc", "line", "why"), [
    ("T_MPC 0.017 s (slowest party); C_MPC 16.016 MB (model 16.016 MB)",
     "T_end_to_end 0.687 s = stream 0.650 (clients 0.168 and servers 0.059 side by side, "
     "overlap 0.35x) + MPC 0.037", "without '(opening the sums)'"),
    ("T_MPC 0.017 s (slowest party); C_MPC 16.016 MB (model 16.016 MB)",
     "T_end_to_end 0.687 s = stream 0.650 (clients 0.168 and servers 0.059 side by side, "
     "overlap 0.35x) + T_MPC 0.037", "beside 'T_MPC 0.017 s'"),
    ("T_MPC 0.026 s (slowest party); C_MPC 4.209 MB (model 3.216 MB)",
     "T_end_to_end 0.474 s = stream 0.280 (clients 0.023 and servers 0.009 side by side, "
     "overlap 0.11x) + upload 0.184 + T_MPC 0.020", "add up to 0.484"),
    ("T_MPC 0.711 s (slowest party); C_MPC 6000.032 MB (model 6000.024 MB)",
     "T_end_to_end 4.790 s = stream 4.786 (clients 4.292 and servers 0.708 side by side, "
     "overlap 1.04x) + MPC 0.004 (opening the sums)", "disagree"),
    ("T_MPC 0.023 s (slowest party); C_MPC 16.016 MB (model 16.016 MB)",
     "T_end_to_end 0.315 s = stream 0.315 (clients 0.166 and servers 0.079 side by side, "
     "overlap 0.78x) + MPC 0.000 after it (T_MPC 0.030: the parties summed the stream as it "
     "came)", "beside 'T_MPC 0.023 s'"),
])
def test_a_contradicting_summary_is_caught(t_mpc: str, line: str, why: str) -> None:
    assert any(why in p for p in problems(line, t_mpc)), problems(line, t_mpc)


def test_consistent_summaries_pass() -> None:
    assert problems("T_end_to_end 0.667 s = stream 0.650 (clients 0.168 and servers 0.059 "
                    "side by side; their times add up to 0.35x the stream's) + T_MPC 0.017",
                    "T_MPC 0.017 s (slowest party); C_MPC 16.016 MB (model 16.016 MB)") == []
    assert problems("T_end_to_end 4.790 s = stream 4.786 (clients 4.292 and servers 0.708 side "
                    "by side; their times add up to 1.04x the stream's) + MPC 0.004 (opening "
                    "the sums)",
                    "T_MPC 0.711 s (slowest party, its aggregation while the shares arrived "
                    "included); C_MPC 6000.032 MB (model 6000.024 MB)") == []
    assert problems("T_end_to_end 0.315 s = stream 0.315 (clients 0.166 and servers 0.079 side "
                    "by side; their times add up to 0.78x the stream's) + MPC 0.000 after it "
                    "(T_MPC 0.023: the parties summed the stream as it came)",
                    "T_MPC 0.023 s (slowest party); C_MPC 16.016 MB (model 16.016 MB)") == []


def test_the_pages_show_summaries() -> None:
    """Guards against a reader that finds nothing, which would pass whatever the pages say."""
    readme = shown_summaries((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme and all(t_mpc for _, _, t_mpc in readme)


def test_every_summary_a_page_shows_adds_up_and_names_its_terms() -> None:
    bad = []
    for page in _pages():
        for number, line, t_mpc in shown_summaries(page.read_text(encoding="utf-8")):
            bad += [f"{page.relative_to(ROOT)}:{number}: {p}" for p in problems(line, t_mpc)]
    assert not bad, "\n".join(bad)
