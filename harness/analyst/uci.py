"""Tables 6 and 7 of the paper: low rank (psi) and ridge (phi) on four UCI datasets.

Each dataset is read from the file its UCI page distributes, in that file's own
format, from a directory the user fills (this harness never downloads):

| dataset | UCI id | file | format |
| --- | --- | --- | --- |
| Power | 235 | household_power_consumption.txt | ';'-separated, header, '?' = missing |
| Elevation | 246 | 3D_spatial_network.txt | ','-separated, no header |
| Ethylene | 322 | ethylene_CO.txt | whitespace-separated, one header line |
| Songs | 203 | YearPredictionMSD.txt | ','-separated, no header, year first |

Each may also sit in the zip archive UCI serves it in (any ``*.zip`` in the
directory holding a member of that name). With internet, ``ucimlrepo`` (PyPI)
or the UCI pages give the same files.

The paper's preprocessing (Section "Interpolation between Local and Central
DP"): Power drops Date and Time and the rows with a missing value and predicts
Sub_metering_3 from the other 6; Elevation predicts ALTITUDE from LONGITUDE and
LATITUDE; Ethylene uses the Ethylene-CO recording and predicts the last column
(TGS2620) from the other 18; Songs predicts the year from the audio features.
Low rank (Table 6) uses the features alone, with the paper's k. Then every
column is divided by its largest absolute value, so that the entry bound eta = 1
the calibrations assume holds (the paper does not say how it scaled the data).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.analyst import baselines, figures, mechanisms, simulate
from harness.errors import InputError
from harness.fileio import write_atomic

__all__ = ["DATASETS", "PAPER_TABLE6", "PAPER_TABLE7", "TABLES", "Dataset", "check_data_dir",
           "load_dataset", "reproduce_table", "run_table"]

TABLES: dict[str, dict[str, Any]] = {
    "table6": {"problem": "lowrank", "epsilon": 0.05, "lam": None, "metric": "psi",
               "mechanisms": ("local", "ltm-laplace", "ltm-gaussian", "central")},
    "table7": {"problem": "ridge", "epsilon": 0.03, "lam": 10.0, "metric": "phi",
               "mechanisms": ("local", "ltm-gaussian", "central")}}
DEFAULT_TABLE_M = 500  # more than Songs' 91 columns, so the sketch keeps full rank


@dataclass(frozen=True)
class Dataset:
    name: str
    uci_id: int
    file: str
    url: str
    n: int  # the paper's Table "Parameters of real-world datasets"
    d: int
    k: int


DATASETS = (
    Dataset("Power", 235, "household_power_consumption.txt",
            "https://archive.ics.uci.edu/dataset/235", 2_049_280, 6, 3),
    Dataset("Elevation", 246, "3D_spatial_network.txt",
            "https://archive.ics.uci.edu/dataset/246", 434_874, 2, 1),
    Dataset("Ethylene", 322, "ethylene_CO.txt",
            "https://archive.ics.uci.edu/dataset/322", 4_178_504, 18, 5),
    Dataset("Songs", 203, "YearPredictionMSD.txt",
            "https://archive.ics.uci.edu/dataset/203", 515_345, 89, 15),
)

# (mean, std) as printed in the paper's Tables 6 (psi, eps = 0.05) and 7 (phi, eps = 0.03).
PAPER_TABLE6 = {
    "Power": {"local": (1.206e-2, 0.651e-2), "ltm-laplace": (4.036e-3, 2.448e-3),
              "ltm-gaussian": (2.108e-6, 2.400e-6), "central": (1.763e-6, 0.621e-6)},
    "Elevation": {"local": (1.193e-1, 0.896e-1), "ltm-laplace": (1.520e-2, 4.484e-2),
                  "ltm-gaussian": (4.718e-8, 4.201e-8), "central": (4.465e-8, 4.836e-8)},
    "Ethylene": {"local": (5.877e-4, 1.256e-4), "ltm-laplace": (5.821e-4, 1.074e-4),
                 "ltm-gaussian": (2.420e-6, 0.486e-6), "central": (7.901e-6, 1.909e-6)},
    "Songs": {"local": (5.617e-7, 0.283e-7), "ltm-laplace": (5.629e-7, 0.311e-7),
              "ltm-gaussian": (5.556e-7, 0.347e-7), "central": (5.613e-7, 0.324e-7)},
}
PAPER_TABLE7 = {
    "Power": {"local": (2.364, 0.007), "ltm-gaussian": (1.055, 0.0), "central": (1.001, 0.001)},
    "Elevation": {"local": (1.939, 0.008), "ltm-gaussian": (1.0, 0.0), "central": (1.0, 0.0)},
    "Ethylene": {"local": (3.125, 0.002), "ltm-gaussian": (1.0, 0.0), "central": (1.0, 0.0)},
    "Songs": {"local": (20.64, 0.016), "ltm-gaussian": (1.0, 0.0), "central": (1.0, 0.0)},
}
_PAPER = {"table6": PAPER_TABLE6, "table7": PAPER_TABLE7}


def _missing(dataset: Dataset, directory: Path) -> InputError:
    return InputError(f"{dataset.file} ({dataset.name}) is not in {directory}: download it "
                      f"from {dataset.url} (UCI id {dataset.uci_id}) and put the file, or the "
                      "zip it comes in, into --data-dir")


def _find(dataset: Dataset, directory: Path) -> Path | tuple[Path, str]:
    """The file itself, or (archive, member) for a zip in the directory that holds it."""
    direct = directory / dataset.file
    if direct.is_file():
        return direct
    for archive in sorted(directory.glob("*.zip")):
        try:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if Path(member).name == dataset.file:
                        return archive, member
        except (OSError, zipfile.BadZipFile):
            continue
    raise _missing(dataset, directory)


@contextlib.contextmanager
def _open_text(where: Path | tuple[Path, str]):
    if isinstance(where, Path):
        with open(where, encoding="utf-8", errors="replace") as fh:
            yield fh
        return
    archive, member = where
    with zipfile.ZipFile(archive) as zf, zf.open(member) as raw:
        yield io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def _read(dataset: Dataset, where) -> tuple[np.ndarray, np.ndarray]:
    """(features, target) with the paper's columns and rows."""
    import pandas as pd

    with _open_text(where) as fh:
        try:
            if dataset.name == "Power":
                frame = pd.read_csv(fh, sep=";", na_values=["?"], low_memory=False)
                expected = ["Global_active_power", "Global_reactive_power", "Voltage",
                            "Global_intensity", "Sub_metering_1", "Sub_metering_2",
                            "Sub_metering_3"]
                absent = [c for c in expected if c not in frame.columns]
                if absent:
                    raise ValueError(f"missing column(s) {', '.join(absent)}")
                values = frame[expected].apply(pd.to_numeric, errors="coerce").dropna()
                values = values.to_numpy(np.float64)
                return values[:, :-1], values[:, -1]
            if dataset.name == "Elevation":
                values = pd.read_csv(fh, sep=",", header=None).dropna().to_numpy(np.float64)
                _check_columns(values, 4)
                return values[:, 1:3], values[:, 3]
            if dataset.name == "Ethylene":
                values = pd.read_csv(fh, sep=r"\s+", header=None, skiprows=1,
                                     engine="c").dropna().to_numpy(np.float64)
                _check_columns(values, 19)
                return values[:, :-1], values[:, -1]
            values = pd.read_csv(fh, sep=",", header=None).dropna().to_numpy(np.float64)
            _check_columns(values, 91)
            return values[:, 1:], values[:, 0]
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise InputError(f"{dataset.file} is not in the format UCI distributes "
                             f"({str(exc).splitlines()[0]}); download it again from "
                             f"{dataset.url}") from None


def _check_columns(values: np.ndarray, expected: int) -> None:
    if values.ndim != 2 or values.shape[1] != expected:
        raise ValueError(f"expected {expected} columns, found "
                         f"{values.shape[1] if values.ndim == 2 else 0}")


def _scale(matrix: np.ndarray) -> np.ndarray:
    """Every column divided by its largest |value| (all-zero columns left alone)."""
    top = np.abs(matrix).max(axis=0)
    return matrix / np.where(top > 0, top, 1.0)


def load_dataset(name: str, data_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(features, target) of one dataset, preprocessed and scaled to entries in [-1, 1]."""
    dataset = _dataset(name)
    features, target = _read(dataset, _find(dataset, Path(data_dir)))
    if features.shape[0] < 2:
        raise InputError(f"{dataset.file} has {features.shape[0]} complete rows; "
                         f"download it again from {dataset.url}")
    scaled = _scale(np.column_stack([features, target]))
    return scaled[:, :-1], scaled[:, -1]


def _dataset(name: str) -> Dataset:
    for dataset in DATASETS:
        if dataset.name.lower() == name.lower():
            return dataset
    raise InputError(f"unknown dataset {name!r}; choose {', '.join(d.name for d in DATASETS)}")


def check_data_dir(data_dir: str | os.PathLike) -> Path:
    """The directory, once every dataset's file is found in it (before any work)."""
    directory = Path(data_dir)
    if not directory.is_dir():
        raise InputError(f"--data-dir {directory} is not a directory; create it and put the "
                         "UCI files there (see the docs page How-to > Utility)")
    for dataset in DATASETS:
        _find(dataset, directory)
    return directory


def _check_table(table: str) -> dict:
    if table not in TABLES:
        raise InputError(f"unknown table {table!r}; choose table6 or table7")
    return TABLES[table]


def run_table(table: str, data_dir: str | os.PathLike, *, runs: int = 20,
              calibration: str = "corollary", m: int = DEFAULT_TABLE_M, seed: int = 0,
              progress: bool = True):
    """One row per dataset and mechanism: measured mean and std beside the paper's."""
    import pandas as pd
    from tqdm import tqdm

    setup = _check_table(table)
    baselines.check_calibration(calibration)
    if int(runs) != runs or runs < 2:
        raise InputError(f"--runs must be an integer >= 2, got {runs}")
    directory = check_data_dir(data_dir)
    eps, lam, problem = setup["epsilon"], setup["lam"], setup["problem"]
    rows = []
    with mechanisms.one_blas_thread(), tqdm(total=len(DATASETS) * runs, disable=not progress,
                                          desc=table, unit="run") as bar:
        for index, dataset in enumerate(DATASETS):
            features, target = load_dataset(dataset.name, directory)
            Z = features if problem == "lowrank" else np.column_stack([features, target])
            gram = Z.T @ Z
            factor = simulate.gram_factor(gram)
            k = min(dataset.k, Z.shape[1] - 1) if problem == "lowrank" else None
            privacy = baselines.Privacy(eps, figures.DEFAULT_DELTA)
            row_norm = float(np.sqrt(np.einsum("ij,ij->i", Z, Z)).max())
            rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
            errors: dict[str, list[float]] = {name: [] for name in setup["mechanisms"]}
            for _ in range(runs):
                bar.set_postfix(dataset=dataset.name, refresh=False)
                stats = simulate.stats_from_matrix(Z, min(m, Z.shape[0]), rng, gram, factor,
                                                   dense="ltm-laplace" in errors)
                for name in errors:
                    errors[name].append(mechanisms.mechanism_error(
                        stats, problem, name, epsilon=eps, m=stats.m, k=k, lam=lam,
                        privacy=privacy, calibration=calibration, rng=rng))
                bar.update()
            for name, values in errors.items():
                paper = _PAPER[table][dataset.name][name]
                rows.append({"table": table, "dataset": dataset.name, "uci_id": dataset.uci_id,
                             "n": features.shape[0], "d": features.shape[1],
                             "n_paper": dataset.n, "d_paper": dataset.d, "k": k,
                             "lambda": lam, "epsilon": eps, "calibration": calibration,
                             "m": stats.m, "s": 1, "delta": privacy.delta,
                             "mechanism": name, "runs": runs,
                             "row_bound": privacy.bound(Z.shape[1]), "max_row_norm": row_norm,
                             "error_mean": float(np.mean(values)),
                             "error_std": float(np.std(values, ddof=1)),
                             "paper_mean": paper[0], "paper_std": paper[1]})
    return pd.DataFrame(rows)


def _cell(mean: float, std: float) -> str:
    return f"{mean:.4g} +- {std:.2g}"


def table_markdown(frame, table: str, seconds: float) -> str:
    setup = TABLES[table]
    first = frame.iloc[0]
    lines = [f"# Table {table[-1]}: {setup['metric']} on the UCI datasets, calibration "
             f"`{first['calibration']}`", "",
             f"Calibration: {baselines.calibration_label(first['calibration'])}.", "",
             f"epsilon = {setup['epsilon']:g}" + (f", lambda = {setup['lam']:g}"
                                                 if setup["lam"] else "")
             + f", delta = {first['delta']:g}, m = {first['m']}, s = 1 (Gaussian LTM; the "
             f"Laplace LTM uses the dense sketch), {first['runs']} runs, {seconds:.0f} s. "
             "Each cell: measured (paper).", ""]
    lines += [_bound_note(frame), ""]
    names = list(setup["mechanisms"])
    lines.append("| dataset | n (paper) | d (paper) | " + " | ".join(names) + " |")
    lines.append("| --- | ---: | ---: | " + " | ".join("---" for _ in names) + " |")
    for name, part in frame.groupby("dataset", sort=False):
        row = part.iloc[0]
        flag = lambda a, b: f"{a} ({b})" + ("" if a == b else " **differs**")  # noqa: E731
        cells = []
        for mech in names:
            r = part[part["mechanism"] == mech].iloc[0]
            cells.append(f"{_cell(r['error_mean'], r['error_std'])} "
                         f"({_cell(r['paper_mean'], r['paper_std'])})")
        lines.append(f"| {name} | {flag(row['n'], row['n_paper'])} | "
                     f"{flag(row['d'], row['d_paper'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _bound_note(frame) -> str:
    """The row bound R each dataset's calibrations assume, against its largest row."""
    parts, over = [], []
    for name, part in frame.groupby("dataset", sort=False):
        row = part.iloc[0]
        parts.append(f"{name} {row['max_row_norm']:.3g} (R = {row['row_bound']:.3g})")
        if row["max_row_norm"] > row["row_bound"]:
            over.append(name)
    verdict = (f"exceeded by {', '.join(over)}: there the noise is calibrated for a "
               "sensitivity the data do not have" if over else
               "which no row exceeds, since every entry is scaled into [-1, 1]")
    return ("Row bound: every calibration assumes rows of l2 norm <= R = eta sqrt(columns) "
            f"(eta = 1), {verdict}. Largest row norm: {'; '.join(parts)}.")


def table_paths(out_dir: str | os.PathLike, table: str, calibration: str) -> dict[str, Path]:
    out = Path(out_dir)
    return {"csv": out / f"{table}-{calibration}.csv", "report": out / f"{table}-{calibration}.md"}


def reproduce_table(table: str, data_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                    runs: int | None = None, calibration: str = "corollary",
                    m: int | None = None, seed: int = 0, force: bool = False,
                    progress: bool = True) -> tuple[dict, dict[str, Path]]:
    """Check inputs and outputs, run the table, write its CSV and markdown."""
    _check_table(table)
    baselines.check_calibration(calibration)
    if runs is not None and (int(runs) != runs or runs < 2):  # before --out is made
        raise InputError(f"--runs must be an integer >= 2, got {runs}")
    check_data_dir(data_dir)
    paths = table_paths(out_dir, table, calibration)
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise InputError(f"{', '.join(existing)} already exist(s); choose another --out or "
                         "pass --force to overwrite")
    figures.check_writable(Path(out_dir))
    start = time.perf_counter()
    frame = run_table(table, data_dir, runs=20 if runs is None else runs,
                      calibration=calibration, m=m or DEFAULT_TABLE_M, seed=seed,
                      progress=progress)
    seconds = time.perf_counter() - start
    text = table_markdown(frame, table, seconds)
    figures.make_output_dir(Path(out_dir))
    write_atomic(paths["csv"], frame.to_csv(index=False))
    write_atomic(paths["report"], text)
    differs = (frame["n"] != frame["n_paper"]) | (frame["d"] != frame["d_paper"])
    return {"frame": frame, "text": text, "seconds": seconds,
            "differs": bool(differs.any())}, paths
