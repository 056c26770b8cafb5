"""``ltm reproduce validation`` at a tiny scale, with real MP-SPDZ parties: every check
under every protocol that can run it, and what lying clients do to the analyst's psi."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.cli import main
from harness.experiments.sweeps import load_spec

pytestmark = [pytest.mark.mpspdz]


def test_the_validation_sweep_prices_each_check_and_shows_what_it_buys(tmp_path, mp_spdz,
                                                                       capsys):
    out = tmp_path / "sweep"
    # n = 100 at every point (the sketch's m): below the LTM's randomizer threshold, so
    # the rows carry no noise
    assert main(["reproduce", "validation", "--scale", "1e-6", "--repeat", "1", "--noise",
                 "none", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "validation.csv", keep_default_na=False)
    spec = load_spec("validation")
    assert list(table["cell"]) == [c.key for c in spec.cells]  # every cell: run or said why
    ran = table[table["left_out"] == ""]
    assert set(table[table["left_out"] != ""]["protocol"]) == {"spdz2k"}  # no share files
    assert set(ran["protocol"]) == {"replicated-ring", "semi2k", "ps-rep-ring",
                                    "malicious-rep-ring"}
    assert (ran["t_mpc_mean_s"].astype(float) > 0).all()
    honest = ran[ran["poison"] == 0].set_index(["protocol", "paper_clients", "validate"])
    for protocol, n, check in honest.index:
        row = honest.loc[(protocol, n, check)]
        if check != "none":  # the check costs communication and rounds, rejects nobody
            assert float(row["c_vs_none"]) > 1 and float(row["rejected_rows"]) == 0
    # the liars: far worse without a check, back to the honest psi with one
    liars = ran[ran["poison"] == 10].set_index(["paper_clients", "validate"])
    clean = honest.xs("replicated-ring").reset_index().set_index(["paper_clients", "validate"])
    for n in spec.cells[0].paper_clients, 1_000_000:
        base = float(clean.loc[(n, "none"), "psi_mean"])
        assert float(liars.loc[(n, "none"), "psi_mean"]) > 1000 * base
        for check in ("linf", "l2"):
            assert float(liars.loc[(n, check), "rejected_rows"]) == 10
            assert float(liars.loc[(n, check), "psi_mean"]) < 3 * base
    assert "The analyst's psi with 10 lying clients" in printed
    assert (out / "validation.png").read_bytes().startswith(b"\x89PNG")
    assert "## validation" in (out / "report.md").read_text()


@pytest.mark.parametrize(("argv", "says"), [
    (["--validate", "linf"], "runs every check its specification names"),
    (["--protocol", "semi2k"], "runs the protocols and programs its specification names"),
])
def test_the_sweeps_own_settings_are_not_overridden(tmp_path, capsys, argv, says):
    assert main(["reproduce", "validation", "--out", str(tmp_path / "o"), *argv]) == 1
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_the_headline_shows_each_protocol_where_its_checks_ran():
    # semi2k's checks are left out at the largest n: its lines are at the n they ran,
    # not the unchecked run alone
    from harness.experiments.report import validation_headline

    def row(protocol, n, check, left_out=""):
        return {"protocol": protocol, "paper_clients": n, "clients": n, "validate": check,
                "poison": 0, "left_out": left_out, "t_mpc_us_per_client": 1.0,
                "t_vs_none": 1.0, "c_mpc_kb_per_client": 1.0, "c_vs_none": 1.0,
                "psi_mean": 0.1, "rejected_rows": 0}

    summary = pd.DataFrame(
        [row("replicated-ring", n, c) for n in (10, 100) for c in ("none", "linf")]
        + [row("semi2k", 10, c) for c in ("none", "linf")] + [row("semi2k", 100, "none"),
                                                               row("semi2k", 100, "linf", "slow")]
        + [row("ps-rep-ring", n, "none") for n in (10, 100)])
    lines = [ln.split(" | ")[:3] for ln in validation_headline(summary).splitlines()
             if ln.startswith("| ") and not ln.startswith("| protocol")
             and not ln.startswith("| :")]
    assert lines == [["| replicated-ring", "100", "none"], ["| replicated-ring", "100", "linf"],
                     ["| semi2k", "10", "none"], ["| semi2k", "10", "linf"],
                     ["| ps-rep-ring", "100", "none"]]
