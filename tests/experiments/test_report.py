"""Sweep specs (harness.experiments.sweeps) and table reporting
(harness.experiments.report) on synthetic raw rows."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import InputError
from harness.experiments.report import coverage, summarize, write_all, write_report, write_table
from harness.experiments.sweeps import (
    TABLES,
    Cell,
    expand,
    load_spec,
    paper_values,
    read_spec,
    resolve_tables,
    scaled_clients,
    spec_dir,
)

PAPER_N = [100000, 250000, 500000, 750000, 1000000]
MACHINE = {"host": "box", "cpu": "Test CPU", "cpu_count": 2, "platform": "Linux-test"}
SETTINGS = {"program": "fast", "network": "none", "scale": 1.0, "repetitions": 10}


def raw_rows(cell: Cell, party_times: list[list[float]], *, scale: float = 1.0,
             verified: bool = True, c_mpc_mb: float | None = None) -> list[dict]:
    """Rows as the runner writes them: one per party per repetition."""
    model = cell.model_c_mpc_mb
    rows = []
    for rep, times in enumerate(party_times):
        for party, t in enumerate(times):
            rows.append({
                "table": cell.table, "variant": cell.variant, "cell": cell.key,
                "servers": cell.servers, "clients": cell.clients,
                "paper_clients": cell.paper_clients, "sparsity": cell.sparsity,
                "rows": cell.rows, "dim": cell.dim, "program": "fast", "network": "none",
                "scale": scale, "repetition": rep, "party": party, "time_s": t,
                "data_sent_mb": 0.008, "rounds": 1, "global_data_sent_mb": 0.016,
                "client_upload_mb": model - 0.016, "c_mpc_mb": model if c_mpc_mb is None
                else c_mpc_mb, "model_c_mpc_mb": model, "verified": verified,
                "upload_s": float("nan"), "harness_version": "9.9.9",
                "mp_spdz_version": "0.4.0", "protocol": "semi2k", "parties": cell.servers,
                "host": "box", "date": "2024-01-01T00:00:00+00:00", "platform": "Linux-test",
                "cpu": "Test CPU", "cpu_count": 2})
    return rows


def full_raw(tables=TABLES, scale: float = 1.0, reps: int = 2, skip=()) -> pd.DataFrame:
    rows = []
    for table in tables:
        for cell in expand(load_spec(table), scale):
            if cell.key in skip:
                continue
            base = cell.sparsity * cell.paper_clients * 1.5e-6
            rows += raw_rows(cell, [[base * (1 + 0.01 * (p + r)) for p in range(cell.servers)]
                                    for r in range(reps)], scale=scale)
    return pd.DataFrame(rows)


def cell_of(table: str, n: int, s: int = 1, variant: str = "") -> Cell:
    return next(c for c in load_spec(table).cells
                if c.paper_clients == n and c.sparsity == s and c.variant == variant)


# --- specs -------------------------------------------------------------------


def test_specs_are_the_papers_grids():
    t3, t4, t5 = (load_spec(t) for t in TABLES)
    assert [len(t.cells) for t in (t3, t4, t5)] == [5, 5, 12]
    for spec, servers in ((t3, 3), (t4, 2)):
        assert spec.x == "clients"
        assert [c.paper_clients for c in spec.cells] == PAPER_N
        assert {(c.servers, c.sparsity, c.variant) for c in spec.cells} == {(servers, 1, "")}
    assert t5.x == "sparsity"
    assert [(v.label, v.servers) for v in t5.variants] == [("S3", 3), ("S2", 2)]
    assert sorted((c.variant, c.sparsity) for c in t5.cells) == sorted(
        (v, s) for v in ("S3", "S2") for s in (1, 10, 20, 30, 40, 50))
    assert {c.paper_clients for c in t5.cells} == {500000}
    for spec in (t3, t4, t5):
        assert spec.repeat == 10
        assert {(c.rows, c.dim) for c in spec.cells} == {(100, 10)}
        assert len({c.key for c in spec.cells}) == len(spec.cells)
    assert cell_of("table5", 500000, 10, "S2").key == "table5/S2/n=500000/s=10"
    assert t3.cells[0].key == "table3/n=100000/s=1"


def test_a_scaled_cell_is_labelled_with_the_n_it_runs():
    """The progress bar's label: the n being run, the paper's beside it; the resume key
    keeps the paper's n (a sweep resumed at another --scale is refused elsewhere)."""
    cell = next(c for c in expand(load_spec("table5"), 0.05) if c.variant == "S2"
                and c.sparsity == 10)
    assert cell.label == "table5/S2/n=25000/s=10 (paper n=500000)"
    assert cell.key == "table5/S2/n=500000/s=10"
    assert expand(load_spec("table3"))[0].label == "table3/n=100000/s=1"


def test_expand_scales_rounds_and_keeps_a_minimum():
    spec = load_spec("table3")
    assert expand(spec) == list(spec.cells)
    assert [c.clients for c in expand(spec, 0.1)] == [10000, 25000, 50000, 75000, 100000]
    assert [c.paper_clients for c in expand(spec, 0.1)] == PAPER_N
    assert scaled_clients(1001, 0.5, 100) == 501  # halves round up
    assert scaled_clients(1003, 0.5, 100) == 502
    tiny = expand(spec, 1e-9)
    assert {c.clients for c in tiny} == {100}  # never below m
    assert len({c.key for c in tiny}) == 5  # keys stay distinct: they name the paper's n


@pytest.mark.parametrize("scale", [0, -1, math.nan, math.inf, True, "1"])
def test_expand_rejects_bad_scale(scale):
    with pytest.raises(InputError, match="--scale must be a positive number"):
        expand(load_spec("table4"), scale)


def test_the_validation_sweep_runs_liars_under_its_first_protocol_only():
    spec = load_spec("validation")
    honest = [c for c in spec.cells if c.poison == 0]
    assert len(honest) == 3 * len(spec.protocols) * 3  # n x protocol x check
    liars = [c for c in spec.cells if c.poison]
    assert {c.protocol for c in liars} == {spec.protocols[0]}
    assert {(c.poison, c.validate) for c in liars} == {(k, v) for k in (1, 10)
                                                      for v in ("none", "linf", "l2")}
    assert len({c.key for c in spec.cells}) == len(spec.cells)
    assert any(c.key.endswith("fast/validate=l2/K=10/n=100000/s=1") for c in liars)


def test_resolve_tables():
    assert resolve_tables("all") == list(TABLES)
    assert resolve_tables("table5") == ["table5"]
    assert resolve_tables("security") == ["security"]  # by name only, not in "all"
    assert resolve_tables("mechanisms") == ["mechanisms"]
    assert resolve_tables("validation") == ["validation"]
    with pytest.raises(InputError, match="table3, table4, table5, security, scale, "
                                         "mechanisms, validation or all"):
        resolve_tables("table6")
    with pytest.raises(InputError, match="table3, table4, table5"):
        load_spec("table6")


GOOD = (spec_dir() / "table5.toml").read_text()


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("repeat = 10\n", ""), "'repeat'"),
    (lambda t: t.replace('x = "sparsity"', 'x = "servers"'), "'x'"),
    (lambda t: t.replace("repeat = 10", "repeat = true"), "'repeat'"),
    (lambda t: t.replace("dim = 10", "dim = 10\ndimm = 3"), "'dimm'"),
    (lambda t: t.replace('label = "S2"', 'label = "S3"'), "'variant.label'"),
    (lambda t: t.replace("servers = 2", "servers = 1"), "'variant[1].servers'"),
    (lambda t: t.replace("sparsity = [1, 10", "sparsity = [1, 101"), "'grid.sparsity'"),
    (lambda t: t.replace("clients = [500000]", "clients = []"), "'grid.clients'"),
    (lambda t: t.replace("clients = [500000]", ""), "'grid.clients'"),
    (lambda t: t.replace('name = "table5"', 'name = "table9"'), "'name'"),
    (lambda t: t.replace("[grid]", "[grid"), "not valid TOML"),
    (lambda t: t.replace("dim = 10", 'dim = 10\nvalidations = ["linf", "l3"]'),
     "'validations'"),
    (lambda t: t.replace("dim = 10", "dim = 10\npoisons = [0, -1]"), "'poisons'"),
])
def test_bad_spec_names_the_file_and_key(tmp_path, edit, key):
    path = tmp_path / "table5.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(InputError) as err:
        read_spec(path)
    assert str(path) in str(err.value)
    assert key in str(err.value)


def test_paper_values_match_the_model_for_the_servers_the_paper_used():
    paper = paper_values()
    assert len(paper) == 16
    assert paper.groupby("table").size().to_dict() == {"table3": 5, "table4": 5, "table5": 6}
    row = paper[(paper["table"] == "table5") & (paper["sparsity"] == 50)].iloc[0]
    assert (row["t_mpc_mean_s"], row["t_mpc_std_s"], row["servers"]) == (33.708, 1.384, 3)
    for r in paper.itertuples():
        model = r.servers_by_comm * 8 * (r.sparsity * r.clients * r.dim + r.rows * r.dim) / 1e6
        assert model == r.c_mpc_mb


# --- summaries ---------------------------------------------------------------


def test_summarize_mean_and_std_of_the_slowest_party():
    cell = cell_of("table4", 100000)
    # slowest party per repetition: 2, 4, 3 -> mean 3, sample std 1
    raw = pd.DataFrame(raw_rows(cell, [[1.0, 2.0], [4.0, 3.0], [3.0, 3.0]]))
    out = summarize(raw, "table4")
    assert len(out) == 1
    r = out.iloc[0]
    assert r["repetitions"] == 3
    assert r["t_mpc_mean_s"] == pytest.approx(3.0)
    assert r["t_mpc_std_s"] == pytest.approx(1.0)
    assert r["c_mpc_mean_mb"] == pytest.approx(16.016)
    assert (r["paper_t_mpc_mean_s"], r["paper_t_mpc_std_s"]) == (0.177, 0.028)
    assert r["t_ratio"] == pytest.approx(3.0 / 0.177)
    assert r["c_ratio"] == pytest.approx(1.0)
    assert r["c_model_ratio"] == pytest.approx(1.0)


def test_one_repetition_gives_na_std(tmp_path):
    raw = pd.DataFrame(raw_rows(cell_of("table3", 500000), [[0.5, 0.7, 0.6]]))
    out = summarize(raw, "table3")
    assert out.iloc[0]["t_mpc_mean_s"] == pytest.approx(0.7)
    assert math.isnan(out.iloc[0]["t_mpc_std_s"])
    write_table(raw, "table3", tmp_path)
    assert "0.700 ± n/a" in (tmp_path / "table3.md").read_text()


def test_model_c_mpc_equals_the_papers_column():
    summary = {t: summarize(full_raw([t], reps=1), t) for t in TABLES}
    for t in ("table3", "table4"):
        s = summary[t]
        assert (s["model_c_mpc_mb"] == s["paper_c_mpc_mb"]).all()
    t5 = summary["table5"]
    s2, s3 = t5[t5["variant"] == "S2"], t5[t5["variant"] == "S3"]
    assert (s2["model_c_mpc_mb"].to_numpy() == s2["paper_c_mpc_mb"].to_numpy()).all()
    assert (s3["model_c_mpc_mb"] > s3["paper_c_mpc_mb"]).all()
    # both variants are compared with the same paper rows
    assert s3["paper_t_mpc_mean_s"].tolist() == s2["paper_t_mpc_mean_s"].tolist()

    def model(t: str, n: int, s: int = 1, variant: str = "") -> float:
        frame = summary[t]
        return frame[frame["cell"] == cell_of(t, n, s, variant).key]["model_c_mpc_mb"].item()

    assert model("table3", 100000) == 24.024
    assert model("table4", 100000) == 16.016
    assert model("table5", 500000, 10, "S2") == 800.016


def test_ratio_columns():
    cell = cell_of("table3", 1000000)
    raw = pd.DataFrame(raw_rows(cell, [[3.282, 1.0, 1.0]], c_mpc_mb=120.012))
    r = summarize(raw, "table3").iloc[0]
    assert r["t_ratio"] == pytest.approx(2.0)
    assert r["c_ratio"] == pytest.approx(0.5)
    assert r["c_model_ratio"] == pytest.approx(0.5)


# --- files -------------------------------------------------------------------


def test_write_table_files(tmp_path):
    raw = full_raw(["table5"])
    paths = write_table(raw, "table5", tmp_path)
    assert [p.name for p in paths] == ["table5.csv", "table5.md", "table5.tex", "table5.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    back = pd.read_csv(tmp_path / "table5.csv", keep_default_na=False)
    assert len(back) == 12
    expected = summarize(raw, "table5")
    assert back["t_mpc_mean_s"].tolist() == pytest.approx(expected["t_mpc_mean_s"].tolist())
    assert back["model_c_mpc_mb"].tolist() == expected["model_c_mpc_mb"].tolist()
    assert (tmp_path / "table5.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tex = (tmp_path / "table5.tex").read_text()
    assert r"\pm" in tex and r"\begin{tabular}" in tex and "T_MPC" not in tex
    md = (tmp_path / "table5.md").read_text()
    assert "| s | S | T_MPC (sec) | C_MPC (MB) |" in md
    assert "| 10 | 2 | " in md and " ± " in md


def test_raw_from_json_lines(tmp_path):
    path = tmp_path / "raw.jsonl"
    full_raw(["table3"]).to_json(path, orient="records", lines=True)
    out = summarize(pd.read_json(path, lines=True), "table3")
    assert out["cell"].tolist() == [c.key for c in load_spec("table3").cells]


def test_scaled_run_shows_both_n_and_says_not_like_for_like(tmp_path):
    raw = full_raw(["table3"], scale=0.01)
    write_table(raw, "table3", tmp_path)
    md = (tmp_path / "table3.md").read_text()
    assert "| n | paper n |" in md
    assert "| 1000 | 100000 |" in md
    assert "not like-for-like" in md
    assert "not like-for-like" in (tmp_path / "table3.tex").read_text()


def test_missing_cells_are_reported(tmp_path):
    gone = cell_of("table3", 750000).key
    raw = full_raw(["table3"], skip={gone})
    assert len(summarize(raw, "table3")) == 4
    cov = coverage(raw, "table3")
    assert cov.missing == (gone,)
    assert set(cov.short) == {c.key for c in load_spec("table3").cells} - {gone}
    write_all(raw, ["table3", "table4"], tmp_path, machine=MACHINE, settings=SETTINGS)
    assert gone in (tmp_path / "table3.md").read_text()
    report = (tmp_path / "report.md").read_text()
    assert f"Missing cells (no complete repetition): {gone}" in report
    assert "No measurements for this table yet." in report  # table4 has no rows at all
    assert (tmp_path / "table4.png").read_bytes()[:4] == b"\x89PNG"


def test_repetition_without_every_party_is_left_out():
    cell = cell_of("table4", 250000)
    rows = raw_rows(cell, [[1.0, 2.0], [5.0, 5.0], [3.0, 4.0]])
    del rows[2]  # repetition 1 lost party 0's row
    raw = pd.DataFrame(rows)
    r = summarize(raw, "table4").iloc[0]
    assert (r["repetitions"], r["t_mpc_mean_s"]) == (2, pytest.approx(3.0))
    assert coverage(raw, "table4").partial == ((cell.key, 1),)
    assert coverage(raw, "table4", repeat=2).short == {}  # --repeat 2: this cell is done


@pytest.mark.parametrize("verified", [False, None])
def test_unverified_rows_are_refused(tmp_path, verified):
    cell = cell_of("table3", 100000)
    rows = raw_rows(cell, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    rows[4]["verified"] = verified
    raw = pd.DataFrame(rows)
    with pytest.raises(InputError, match=f"{cell.key} repetition 1 party 1 is not verified"):
        summarize(raw, "table3")
    with pytest.raises(InputError, match="not verified"):
        write_table(raw, "table3", tmp_path)


def test_duplicates_and_mixed_scales_are_refused():
    cell = cell_of("table3", 100000)
    rows = raw_rows(cell, [[1.0, 1.0, 1.0]])
    with pytest.raises(InputError, match="more than once"):
        summarize(pd.DataFrame(rows + rows[:1]), "table3")
    other = raw_rows(cell_of("table3", 250000), [[1.0, 1.0, 1.0]], scale=0.5)
    with pytest.raises(InputError, match="mix scales"):
        summarize(pd.DataFrame(rows + other), "table3")


def test_report_ties_the_tables_together(tmp_path):
    raw = full_raw()
    paths = write_all(raw, list(TABLES), tmp_path, machine=MACHINE, settings=SETTINGS)
    assert paths[-1] == tmp_path / "report.md"
    report = paths[-1].read_text()
    for text in ("- program: fast", "- cpu: Test CPU", "- cpu_count: 2", "MP-SPDZ version: 0.4.0",
                 "harness version: 9.9.9", "](table3.png)", "](table5.png)",
                 "| n | T_MPC (sec) | C_MPC (MB) |", "S = 3 (as the caption says)"):
        assert text in report
    # the note's numbers come from the ratios: table 4's geometric mean T ratio
    t4 = summarize(raw, "table4")
    gm = math.exp(sum(math.log(x) for x in t4["t_ratio"]) / len(t4))
    assert f"geometric mean {gm:.2f}" in report
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_write_report_alone_links_the_files(tmp_path):
    path = write_report(full_raw(["table4"]), ["table4"], Path(tmp_path), machine=MACHINE,
                        settings={})
    assert path.name == "report.md"
    assert "[table4.csv](table4.csv)" in path.read_text()


# --- T_end_to_end ---------------------------------------------------------------


def test_end_to_end_beside_t_mpc_with_what_it_contains(tmp_path):
    cell = cell_of("table4", 100000)
    rows = raw_rows(cell, [[1.0, 2.0], [3.0, 1.0]])
    for row, e2e in zip(rows, (5.0, 5.0, 9.0, 9.0), strict=True):
        row.update(sharing="seeded", t_end_to_end_s=e2e, upload_measured=False,
                   expand_s=0.5 + row["party"])
    raw = pd.DataFrame(rows)
    summary = summarize(raw, "table4")
    r = summary.iloc[0]
    assert r["t_mpc_mean_s"] == 2.5  # the slowest party, as before
    assert (r["t_end_to_end_mean_s"], r["t_end_to_end_std_s"]) == (7.0, pytest.approx(2.8284271))
    assert r["expand_mean_s"] == 1.5 and r["sharing"] == "seeded"
    assert not r["upload_measured"]
    write_all(raw, ["table4"], tmp_path, machine=MACHINE, settings=SETTINGS)
    md = (tmp_path / "table4.md").read_text()
    # beside the paper's T_MPC column, never instead of it
    assert "| n | T_MPC (sec) | T_end_to_end (sec) | C_MPC (MB) |" in md
    assert "| 7.000 ± 2.828 |" in md
    tex = (tmp_path / "table4.tex").read_text()
    assert r"$T_{\mathrm{end\textrm{-}to\textrm{-}end}}$ (sec)" in tex
    report = (tmp_path / "report.md").read_text()
    assert "## T_end_to_end" in report
    assert "not measured: the share files are written in place on this machine, so it " \
           "counts as 0 s" in report
    assert "computationally hiding" in report
    csv = pd.read_csv(tmp_path / "table4.csv")
    assert csv.loc[0, "t_end_to_end_mean_s"] == 7.0


def test_rows_before_end_to_end_render_as_before(tmp_path):
    # Rows written before sharing and T_end_to_end existed (the committed sweeps'):
    # no such column in the tables, full sharing, no T_end_to_end section.
    raw = full_raw(("table4",), reps=2)
    assert "t_end_to_end_s" not in raw.columns
    write_all(raw, ["table4"], tmp_path, machine=MACHINE, settings=SETTINGS)
    md = (tmp_path / "table4.md").read_text()
    assert "| n | T_MPC (sec) | C_MPC (MB) |" in md and "T_end_to_end" not in md
    assert "T_end_to_end" not in (tmp_path / "report.md").read_text()
    summary = summarize(raw, "table4")
    assert summary["t_end_to_end_mean_s"].isna().all() and set(summary["sharing"]) == {"full"}
