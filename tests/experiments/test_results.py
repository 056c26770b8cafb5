"""The result format: result.json of every version loads through one reader, rows migrate."""

from __future__ import annotations

import copy
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import InputError
from harness.experiments import (
    DIAGNOSTICS,
    FORMAT_VERSION,
    RunResult,
    load_result,
    migrate_row,
)
from harness.experiments.results import migrate_rows, migrate_sweep_settings
from harness.experiments.run import verified_line

_METADATA = {"harness_version": "0.1.0", "mp_spdz_version": "0.4.2",
             "mp_spdz": {"version": "0.4.2", "root": "/opt/mp-spdz"}, "protocol": "semi2k",
             "parties": 3, "date": "2026-11-21T06:24:53+00:00", "host": "vm",
             "platform": "Linux", "python": "3.11.7", "cpu": "AMD EPYC", "cpu_count": 2}
_NOISE = {"kind": "gaussian", "epsilon": 1.0, "delta": 1e-06, "eta": 1.0, "t_prime": 0,
          "variance": 12.5, "zero_output": False}
_LAYOUT = {"kind": "blocked", "block_rows": 8, "chunk_blocks": 4, "file_rows": 104,
           "padding_rows": 4}
_VERIFICATION = {"ok": True, "mismatches": 0, "entries": 20,
                 "method": "revealed ring elements equal sum_i S_i enc(A + G_i) mod 2^64, "
                           "computed with numpy from the same encoding"}


def _party(i: int, **extra: float) -> dict:
    return {"party": i, "time_s": 0.0045, "data_sent_mb": 0.016, "rounds": 4,
            "global_data_sent_mb": 0.032, "wall_s": 0.0728, **extra}


def first_format() -> dict:
    """result.json as the first harness wrote it (version 1, before the protocol, sharing,
    hosts and network parameters and T_end_to_end existed): the local program, 3 parties."""
    return {
        "format_version": 1,
        "metadata": _METADATA,
        "parameters": {"parties": 3, "clients": 100, "dim": 2, "rows": 10, "sparsity": 1,
                       "dense": False, "program": "local", "input": "shares", "frac_bits": 16,
                       "seed": 7, "data": "synthetic", "noise": _NOISE, "layout": _LAYOUT},
        "parties": [_party(i, mpc_time_s=0.0021, aggregate_s=0.0024) for i in range(3)],
        "t_mpc_s": 0.0045,
        "global_data_sent_mb": 0.032,
        "client_upload_bytes": [1600, 1600, 1600],
        "c_mpc_mb": 0.0368,
        "model_c_mpc_mb": 0.00528,
        "verification": _VERIFICATION,
        "noise_observed": {"noise_mean": 0.01, "noise_var": 12.1},
        "timings": {"compile_s": 0.0, "prepare_s": 0.11, "mpc_wall_s": 0.2, "total_s": 0.4},
    }


def last_version_1() -> dict:
    """result.json as the harness wrote it just before version 2: every key there, the
    number still 1 (a seeded run under ps-rep-ring)."""
    data = first_format()
    data["metadata"] = {**_METADATA, "protocol": "ps-rep-ring"}
    data["parameters"] = {"protocol": "ps-rep-ring", "security": "malicious", "tamper": None,
                          "sharing": "seeded", **data["parameters"], "program": "fast",
                          "hosts": "local", "network": "t3.large"}
    data["parties"] = [_party(i, upload_s=0.5, upload_bytes_sent=2000, expand_s=0.01)
                       for i in range(3)]
    data.update(t_end_to_end_s=0.65, upload_measured=True, inputs_reused=False,
                model_client_upload_mb=0.0048)
    data["timings"] = {**data["timings"], "expand_s": 0.01, "client_upload_s": 0.5}
    return {key: data[key] for key in _ORDER}


# The keys in the order `ltm run` has written them since they all existed.
_ORDER = ("format_version", "metadata", "parameters", "parties", "t_mpc_s", "t_end_to_end_s",
          "upload_measured", "inputs_reused", "global_data_sent_mb", "client_upload_bytes",
          "c_mpc_mb", "model_c_mpc_mb", "model_client_upload_mb", "verification",
          "noise_observed", "timings")


def test_the_first_format_loads_as_the_run_it_was():
    result = load_result(first_format())
    assert result.format_version == FORMAT_VERSION == 7
    p = result.parameters
    # what it ran is what the options' defaults are now
    assert (p.protocol, p.security, p.sharing, p.hosts, p.network, p.tamper) == \
        ("semi2k", "semi-honest", "full", "local", "loopback", None)
    assert (p.program, p.parties, p.clients, p.dim, p.rows) == ("local", 3, 100, 2, 10)
    # what it did not measure stays unmeasured, never a made-up figure
    assert result.t_end_to_end_s is None and result.upload_measured is None
    assert result.model_client_upload_mb is None and result.inputs_reused is False
    assert result.privacy is None  # nothing was certified then
    assert [q.aggregate_s for q in result.parties] == [0.0024] * 3
    assert result.parties[0].upload_s is None
    assert result.verification.ok and result.verification.entries == 20
    saved = result.to_json()
    assert saved["format_version"] == 7 and saved["parameters"]["protocol"] == "semi2k"
    assert saved["parameters"]["mechanism"] == "ltm"  # the only mechanism there was
    assert saved["verification"]["noise_check"] is None
    assert "upload_s" not in saved["parties"][0]  # absent figures stay absent


def test_the_last_version_1_keeps_every_value(tmp_path):
    data = last_version_1()
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    result = load_result(path)
    saved = result.to_json()
    # the same keys and values, version 3's privacy, unknown then, version 4's flag (its
    # statistics were of the noise before rounding), version 5's mechanism, the LTM's,
    # version 6's sampler, not recorded then, and version 7's check of the clients' rows,
    # none then
    assert saved == {**data, "format_version": 7, "privacy": None,
                     "noise_observed": {**data["noise_observed"], "released": False,
                                        "sampler": None},
                     "parameters": {**data["parameters"], "mechanism": "ltm",
                                    "validate": "none", "poisoned": []},
                     "verification": {**data["verification"], "noise_check": None},
                     "validation": None}
    # in the order the file had them
    assert [k for k in saved if k not in ("privacy", "validation")] == list(data)
    assert result.parameters.security == "malicious" and result.upload_measured is True


def version_2() -> dict:
    """result.json as version 2 wrote it: every key of version 1's last, no privacy."""
    return {**last_version_1(), "format_version": 2}


def test_a_version_2_result_loads_with_privacy_unknown(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(version_2()))
    result = load_result(path)
    assert result.format_version == 7 and result.privacy is None
    saved = result.to_json()
    assert saved["privacy"] is None
    assert list(saved).index("privacy") == list(saved).index("noise_observed") + 1
    skip = ("privacy", "format_version", "noise_observed", "parameters", "verification",
            "validation")
    assert {k: v for k, v in saved.items() if k not in skip} == \
        {k: v for k, v in version_2().items() if k not in skip}


def test_a_version_3_result_keeps_its_certificate(tmp_path):
    privacy = {"requested_epsilon": 1.0, "requested_delta": 1e-6, "certified_epsilon": 0.442,
               "certified_delta": 1e-6, "accountant": "dp-accounting analytic Gaussian",
               "calibration": "corollary", "generator": "randomgen.AESCounter"}
    data = {**version_2(), "format_version": 3, "privacy": privacy}
    result = load_result(data)
    # version 3 certified the noise before it was rounded to the lattice, and ran the LTM
    assert result.privacy == {"mechanism": "ltm", **privacy, "on_lattice": False}
    assert result.noise_observed["released"] is False
    result.save(tmp_path / "result.json")
    assert json.loads((tmp_path / "result.json").read_text())["privacy"] == \
        {"mechanism": "ltm", **privacy, "on_lattice": False}
    with pytest.raises(InputError, match="is not a complete version-3 result"):
        load_result({k: v for k, v in data.items() if k != "privacy"})


def test_a_version_3_result_was_the_ltm_verified_bit_for_bit():
    result = load_result({**version_2(), "format_version": 3, "privacy": None})
    assert result.format_version == 7 and result.parameters.mechanism == "ltm"
    assert result.verification.noise_check is None and result.privacy is None
    assert result.to_json()["parameters"]["mechanism"] == "ltm"


def test_a_version_5_result_did_not_record_how_its_noise_was_drawn():
    data = {**version_2(), "format_version": 5, "privacy": None}
    data["parameters"] = {**data["parameters"], "mechanism": "ltm"}
    data["verification"] = {**data["verification"], "noise_check": None}
    data["noise_observed"] = {**data["noise_observed"], "released": True}
    result = load_result(data)
    assert result.format_version == 7
    assert result.noise_observed == {**data["noise_observed"], "sampler": None}


def test_a_version_6_central_result_had_no_scale_on_its_grid():
    data = {**version_2(), "format_version": 6}
    data["parameters"] = {**data["parameters"], "mechanism": "central"}
    data["verification"] = {**data["verification"], "noise_check": None}
    data["noise_observed"] = {**data["noise_observed"], "released": True, "sampler": None}
    data["privacy"] = {"mechanism": "central", "grid_bits": 2, "coins_per_cell": 59392}
    result = load_result(data)
    assert result.format_version == 7
    assert result.privacy == {"mechanism": "central", "grid_bits": 2, "coins_per_cell": 59392,
                              "grid_scale": 1, "grid_step": 0.25,
                              "rounding_error_bound": None}


def test_a_version_6_result_checked_no_clients_row():
    data = {**version_2(), "format_version": 6, "privacy": None}
    data["parameters"] = {**data["parameters"], "mechanism": "ltm"}
    data["verification"] = {**data["verification"], "noise_check": None}
    data["noise_observed"] = {**data["noise_observed"], "released": True, "sampler": None}
    result = load_result(data)
    assert result.validation is None
    assert (result.parameters.validate, result.parameters.poisoned) == ("none", [])
    assert result.to_json()["validation"] is None


def test_a_current_result_round_trips(tmp_path):
    result = load_result(last_version_1())
    result.save(tmp_path / "result.json")
    text = (tmp_path / "result.json").read_text()
    again = load_result(tmp_path / "result.json")
    public, private = result.split()
    assert again == load_result(public) and isinstance(again, RunResult)
    assert json.loads(text) == public
    assert private == {"noise_observed": {"noise_mean": 0.01, "noise_var": 12.1}}
    # read by key, as the file holds it
    assert result["verification"]["ok"] is True and result["t_mpc_s"] == result.t_mpc_s


def test_figures_of_the_plaintext_go_to_a_private_file_not_result_json(tmp_path):
    """The noise check's mean with output.npy gives the plaintext sketch's exact sum."""
    data = {**version_2(), "format_version": 6, "privacy": None}
    data["parameters"] = {**data["parameters"], "mechanism": "dng"}
    check = {"cells": 20, "mean": 0.25, "mean_z": 0.3, "variance": 4.1,
             "expected_variance": 4.0, "variance_z": 0.2, "gof_p_value": 0.5, "ok": True,
             "units": "lattice steps 2^-F", "exact": False}
    data["verification"] = {**data["verification"], "noise_check": check}
    data["noise_observed"] = {**data["noise_observed"], "released": True, "sampler": "none"}
    result = load_result(data)
    result.save(tmp_path / "result.json")
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["verification"]["noise_check"] == {
        "cells": 20, "expected_variance": 4.0, "ok": True, "units": "lattice steps 2^-F",
        "exact": False}
    assert saved["noise_observed"] == {"released": True, "sampler": "none"}
    diagnostics = tmp_path / DIAGNOSTICS
    assert stat.S_IMODE(os.stat(diagnostics).st_mode) == 0o600
    assert json.loads(diagnostics.read_text()) == {
        "format_version": 7,
        "verification.noise_check": {k: check[k] for k in ("mean", "mean_z", "variance",
                                                           "variance_z", "gof_p_value")},
        "noise_observed": {"noise_mean": 0.01, "noise_var": 12.1}}
    # read back, the public record still says how the run was verified
    line = verified_line(load_result(tmp_path / "result.json"))
    # (a version-6 dng record holds no digests: its check was statistical only)
    assert line == ("  verified: yes, the release minus the plaintext sketch is the noise "
                    "(statistical only: a small change, such as one word, hides in the noise)")


def test_a_result_from_a_newer_harness_is_refused_in_one_line(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({**last_version_1(), "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(InputError) as err:
        load_result(path)
    message = str(err.value)
    assert "\n" not in message
    assert f"format version {FORMAT_VERSION + 1} is newer than this harness reads" in message
    assert "upgrade ltm-harness" in message


@pytest.mark.parametrize(("content", "needle"), [
    ("[1, 2]", "is not a result"),
    ("{not json", "cannot read"),
    (json.dumps({**first_format(), "format_version": "one"}), "is not a version"),
    (json.dumps({**first_format(), "parameters": {"parties": 3}}), "is not a complete"),
    (json.dumps({**last_version_1(), "format_version": 2, "t_mpc_s": None,
                 "unexpected": 1}), "is not a complete"),
])
def test_a_damaged_result_is_one_line(tmp_path, content, needle):
    path = tmp_path / "result.json"
    path.write_text(content)
    with pytest.raises(InputError, match=needle) as err:
        load_result(path)
    assert "\n" not in str(err.value)


def test_migration_leaves_the_callers_record_alone():
    data = first_format()
    before = copy.deepcopy(data)
    load_result(data)
    assert data == before


# The first raw row of sweeps committed in benchmarks/reproduction/ before those were
# rerun: what a user's older results hold.
OLD_ROWS = Path(__file__).parent / "old_rows"


def _committed_row(sweep: str) -> dict:
    with open(OLD_ROWS / f"{sweep}-raw-v1.jsonl") as fh:
        return json.loads(fh.readline())


def test_a_committed_version_1_row_migrates():
    row = _committed_row("local")  # written before sharing and T_end_to_end existed
    assert row["format_version"] == 1 and "sharing" not in row
    new = migrate_row(row)
    assert new["format_version"] == FORMAT_VERSION and new["sharing"] == "full"
    assert math.isnan(new["t_end_to_end_s"]) and math.isnan(new["expand_s"])
    assert {k: v for k, v in new.items() if k in row and k != "format_version"} == \
        {k: v for k, v in row.items() if k != "format_version"}
    later = _committed_row("fast")  # a version-1 row that already has them keeps them
    assert migrate_row(later)["t_end_to_end_s"] == later["t_end_to_end_s"]


def test_a_row_from_a_newer_harness_is_refused():
    row = {**_committed_row("fast"), "format_version": FORMAT_VERSION + 1}
    with pytest.raises(InputError, match=r"raw.jsonl: line 3: format version \d+ is newer"):
        migrate_row(row, "raw.jsonl: line 3")


def test_rows_in_a_table_are_filled_as_migrate_row_fills_them():
    old, new = _committed_row("local"), migrate_row(_committed_row("fast"))
    frame = migrate_rows(pd.DataFrame([old, new]))
    assert list(frame["sharing"]) == ["full", "full"]
    assert math.isnan(frame["t_end_to_end_s"][0])
    assert frame["t_end_to_end_s"][1] == new["t_end_to_end_s"]


def test_old_sweep_settings_read_as_they_ran():
    record = json.loads((OLD_ROWS / "local-sweep.json").read_text())
    settings = migrate_sweep_settings(record)
    assert settings["protocol"] == "semi2k" and settings["sharing"] == "full"
    assert settings["calibration"] == "corollary"  # the only one there was
    with pytest.raises(InputError, match="newer than this harness reads"):
        migrate_sweep_settings({**record, "format_version": FORMAT_VERSION + 1})


def test_rows_without_the_whole_run_columns_read_as_not_measured():
    old = _committed_row("fast")  # written before whole runs measured their wall and memory
    assert "peak_pss_bytes" not in old and "run_wall_s" not in old
    new = migrate_row(old)
    assert math.isnan(new["peak_pss_bytes"]) and math.isnan(new["run_wall_s"])
    measured = migrate_row({**old, "peak_pss_bytes": 123, "run_wall_s": 4.5})
    assert (measured["peak_pss_bytes"], measured["run_wall_s"]) == (123, 4.5)
    frame = migrate_rows(pd.DataFrame([old, {**old, "peak_pss_bytes": 123}]))
    assert math.isnan(frame["peak_pss_bytes"][0]) and frame["peak_pss_bytes"][1] == 123
    assert frame["run_wall_s"].isna().all()


def test_the_machine_is_described_as_platform_describes_it_without_a_subprocess():
    # platform.platform() runs `uname -p`; a run's metadata must not pay for that.
    probe = (
        "import json, sys\n"
        "spawned = []\n"
        "sys.addaudithook(lambda event, args: spawned.append(event)"
        " if event in ('subprocess.Popen', 'os.posix_spawn', 'os.exec', 'os.fork') else None)\n"
        "from harness.experiments.results import machine_info\n"
        "info = machine_info()\n"
        "import platform\n"
        "print(json.dumps({'info': info, 'spawned': list(spawned),"
        " 'platform': platform.platform(), 'processor': platform.uname().processor,"
        " 'machine': platform.machine()}))\n")
    out = json.loads(subprocess.run([sys.executable, "-c", probe], check=True,
                                    capture_output=True, text=True).stdout)
    assert out["spawned"] == []
    if out["processor"] in (out["machine"], "", "unknown"):  # else platform names it too
        assert out["info"]["platform"] == out["platform"]
    assert out["info"]["cpu"] and out["info"]["cpu_count"] >= 1
