"""A sweep's ``raw.jsonl``: its rows made, read, checked, migrated and healed.

One row per party per finished repetition (:func:`repetition_rows`), appended by
:mod:`.reproduce`. Only
a last line without its newline is a write a kill interrupted; any other line
that is not a raw row is damage, reported with its number. Rows of older
versions come back as the current version has them (:func:`.results.migrate_row`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import InputError
from harness.experiments.results import FORMAT_VERSION, RunResult, migrate_row
from harness.experiments.sweeps import Cell
from harness.fileio import write_atomic
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

__all__ = ["completed", "heal", "load_raw", "repetition_rows"]


# What every raw row must hold, and of which type, for resuming and the tables to work.
_ROW_FIELDS: dict[str, tuple[type, ...]] = {
    "table": (str,), "cell": (str,), "repetition": (int,), "servers": (int,),
    "party": (int,), "t_mpc_s": (int, float), "c_mpc_mb": (int, float), "verified": (bool,),
}


# The parties' own figures, copied into each party's row where the run measured them.
_PARTY_KEYS = ("party", "time_s", "data_sent_mb", "rounds", "global_data_sent_mb", "wall_s",
               "upload_s", "mpc_time_s", "aggregate_s", "expand_s")


# result.json's privacy figures a row carries: optional columns (see results._ROW_OPTIONAL).
_PRIVACY_KEYS = ("requested_epsilon", "noise_std", "central_std", "std_ratio",
                 "coins_per_cell", "grid_bits", "grid_step")


def repetition_rows(result: RunResult, cell: Cell, repetition: int, *, program: str,
                    network: str, hosts: str, scale: float,
                    measured: dict | None = None) -> list[dict]:
    """A verified repetition's rows, one per party.

    ``measured``: what a whole run adds (``run_wall_s``, ``peak_pss_bytes``); optional
    columns, which older rows lack (:func:`.results.migrate_row` fills them).
    """
    meta = {k: v for k, v in result.metadata.items() if not isinstance(v, dict | list)}
    privacy = result.privacy or {}
    common = {
        "table": cell.table, "variant": cell.variant, "cell": cell.key,
        "servers": cell.servers, "clients": cell.clients, "paper_clients": cell.paper_clients,
        "sparsity": cell.sparsity, "rows": cell.rows, "dim": cell.dim,
        "program": program, "network": network, "hosts": hosts, "scale": scale,
        "repetition": repetition,
        "t_mpc_s": result.t_mpc_s, "client_upload_mb": sum(result.client_upload_bytes) / 1e6,
        "client_upload_s": result.timings.get("client_upload_s"),
        "c_mpc_mb": result.c_mpc_mb, "model_c_mpc_mb": result.model_c_mpc_mb,
        "model_client_upload_mb": result.model_client_upload_mb,
        "security": result.parameters.security,
        "verified": result.verification.ok,
        "prepare_s": result.timings["prepare_s"],
        "inputs_reused": result.inputs_reused,
        "sharing": result.parameters.sharing,
        "t_end_to_end_s": result.t_end_to_end_s,
        "upload_measured": result.upload_measured,
        # Who added the noise and its price: its std per entry against the central
        # Gaussian's (the LTM without noise has none).
        "mechanism": result.parameters.mechanism,
        "validate": result.parameters.validate, "poison": len(result.parameters.poisoned),
        **({"rejected_rows": result.validation["rejected_rows"]} if result.validation else {}),
        **{k: privacy[k] for k in _PRIVACY_KEYS if privacy.get(k) is not None},
        "format_version": FORMAT_VERSION, **meta,
        # The stages beyond T_end_to_end's sum as the run timed them; stream_*: the
        # streaming clients' and servers' own clocks, where the run streams.
        **{k: v for k, v in result.timings.items()
           if (k == "mpc_wall_s" or k.startswith("stream_"))
           and isinstance(v, int | float) and not isinstance(v, bool)},
        **(measured or {}),
    }
    return [{**common, **{k: v for k, v in p.to_json().items() if k in _PARTY_KEYS}}
            for p in result.parties]


def _damaged(raw_path: Path, number: int, what: str) -> InputError:
    return InputError(f"{raw_path}: line {number} {what}; the raw results are damaged: "
                      "restore the file, delete that line, or start a new sweep with another "
                      "--out")


def _check_row(raw_path: Path, number: int, row: object) -> dict:
    if not isinstance(row, dict):
        raise _damaged(raw_path, number, f"is JSON but not a raw row (a {type(row).__name__})")
    for key, kinds in _ROW_FIELDS.items():
        value = row.get(key)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise _damaged(raw_path, number, f"has no valid {key!r} (got {value!r})")
    if row["servers"] < 2 or not 0 <= row["party"] < row["servers"] or row["repetition"] < 0:
        raise _damaged(raw_path, number, f"has party {row['party']} of {row['servers']} "
                       f"servers, repetition {row['repetition']}")
    # As the current version writes it; a row from a newer harness is refused here.
    return migrate_row(row, f"{raw_path}: line {number}")


def _read_lines(raw_path: Path) -> tuple[list[tuple[dict, str]], bool]:
    """Every row with its line, validated; and whether a torn last line was left out.

    Only a last line without its newline is the write a kill interrupted; any other
    line that is not a raw row is damage, reported with its number before anything
    is appended.
    """
    try:
        data = raw_path.read_bytes()
    except FileNotFoundError:
        return [], False
    except OSError as exc:
        raise InputError(f"cannot read {raw_path}: {exc.strerror}; check its permissions") \
            from None
    lines = data.split(b"\n")
    torn = lines.pop() != b""  # the piece after the last newline
    rows = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            row = json.loads(text)
        except (UnicodeDecodeError, ValueError):
            raise _damaged(raw_path, number, "is not JSON") from None
        rows.append((_check_row(raw_path, number, row), text))
    return rows, torn


def _whole(rows: list[tuple[dict, str]]) -> list[tuple[dict, str]]:
    """The rows of complete repetitions: exactly one row for each of the cell's servers."""
    parties: dict[tuple[str, int], list[int]] = {}
    for row, _ in rows:
        parties.setdefault((row["cell"], row["repetition"]), []).append(row["party"])
    return [(row, text) for row, text in rows
            if sorted(parties[(row["cell"], row["repetition"])]) == list(range(row["servers"]))]


def heal(raw_path: Path) -> set[tuple[str, int]]:
    """Drop a torn tail and every incomplete repetition before appending; return what is done.

    A kill during a repetition's write can leave some of its parties' rows: they
    are dropped whole, so the repetition is run again and counted once.
    """
    rows, torn = _read_lines(raw_path)
    whole = _whole(rows)
    if torn or len(whole) != len(rows):
        write_atomic(raw_path, "".join(text + "\n" for _, text in whole))
    return {(row["cell"], row["repetition"]) for row, _ in whole}


def load_raw(raw_path: Path) -> pd.DataFrame:
    """Complete repetitions from ``raw.jsonl``, skipping a torn trailing line."""
    return pd.DataFrame([row for row, _ in _whole(_read_lines(raw_path)[0])])


def completed(raw_path: Path) -> set[tuple[str, int]]:
    df = load_raw(raw_path)
    if df.empty:
        return set()
    return set(zip(df["cell"], df["repetition"].astype(int), strict=True))
