"""Tables 6 and 7: the four UCI files in their original formats, tiny."""

from __future__ import annotations

import zipfile

import numpy as np
import pandas as pd
import pytest

from harness.analyst import uci
from harness.cli import main
from harness.errors import InputError

POWER_HEADER = ("Date;Time;Global_active_power;Global_reactive_power;Voltage;"
                "Global_intensity;Sub_metering_1;Sub_metering_2;Sub_metering_3")


def _write_power(path, rng, rows: int, missing: int) -> None:
    lines = [POWER_HEADER]
    for i in range(rows):
        v = rng.uniform(0, 1, 7) * [5, 0.5, 240, 20, 40, 40, 20]
        lines.append(f"16/12/2006;17:{i % 60:02d}:00;{v[0]:.3f};{v[1]:.3f};{v[2]:.3f};"
                     f"{v[3]:.3f};{v[4]:.3f};{v[5]:.3f};{v[6]:.3f}")
    for _ in range(missing):  # as in the original: '?' and an empty last field
        lines.append("28/4/2007;00:21:00;?;?;?;?;?;?;")
    path.write_text("\r\n".join(lines) + "\r\n")


def _write_uci_files(directory, rng, rows: int = 240) -> None:
    directory.mkdir(exist_ok=True)
    _write_power(directory / "household_power_consumption.txt", rng, rows, 7)
    lon, lat = rng.uniform(8.1, 11.2, rows), rng.uniform(56.5, 57.7, rows)
    alt = 3 * lon - 2 * lat + rng.normal(0, 1, rows) + 120
    (directory / "3D_spatial_network.txt").write_text("".join(
        f"{144552912 + i},{lon[i]:.7f},{lat[i]:.7f},{alt[i]:.13f}\n" for i in range(rows)))
    sensors = rng.uniform(-50, 20000, (rows, 16))
    ethylene = ["Time (seconds), CO conc (ppm), Ethylene conc (ppm), "
                "Sensor readings (16 channels)"]
    for i in range(rows):
        values = [i / 100, rng.uniform(0, 600), rng.uniform(0, 20), *sensors[i]]
        ethylene.append("\t".join(f"{v:.2f}" for v in values))
    (directory / "ethylene_CO.txt").write_text("\n".join(ethylene) + "\n")
    songs = np.column_stack([rng.integers(1922, 2012, rows), rng.normal(0, 50, (rows, 90))])
    text = "".join(f"{int(r[0])}," + ",".join(f"{v:.5f}" for v in r[1:]) + "\n" for r in songs)
    # Songs as UCI serves it: zipped
    with zipfile.ZipFile(directory / "YearPredictionMSD.txt.zip", "w") as zf:
        zf.writestr("YearPredictionMSD.txt", text)


@pytest.fixture(scope="module")
def uci_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("uci")
    _write_uci_files(directory, np.random.default_rng(1))
    return directory


def test_loaders_apply_the_papers_preprocessing(uci_dir) -> None:
    expected = {"Power": (240, 6), "Elevation": (240, 2), "Ethylene": (240, 18),
                "Songs": (240, 90)}
    for name, shape in expected.items():
        features, target = uci.load_dataset(name, uci_dir)
        assert features.shape == shape and target.shape == (shape[0],)
        both = np.column_stack([features, target])
        # every column scaled to max |value| = 1, so eta = 1 holds
        assert np.abs(both).max(axis=0) == pytest.approx(np.ones(shape[1] + 1))
    # Songs' target is the year, the first column of the file
    with zipfile.ZipFile(uci_dir / "YearPredictionMSD.txt.zip") as zf, \
            zf.open("YearPredictionMSD.txt") as fh:
        songs = pd.read_csv(fh, header=None)
    _, target = uci.load_dataset("songs", uci_dir)
    assert target == pytest.approx(songs[0] / songs[0].abs().max())


def test_table7_command(uci_dir, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["utility", "table7", "--data-dir", str(uci_dir), "--out", str(out),
                 "--runs", "2", "--m", "20", "--no-progress"]) == 0
    frame = pd.read_csv(out / "table7-corollary.csv")
    assert list(frame["dataset"].unique()) == ["Power", "Elevation", "Ethylene", "Songs"]
    assert set(frame["mechanism"]) == {"local", "ltm-gaussian", "central"}
    assert (frame["error_mean"] >= 1 - 1e-9).all() and (frame["runs"] == 2).all()
    assert (frame["epsilon"] == 0.03).all() and (frame["lambda"] == 10).all()
    power = frame[frame["dataset"] == "Power"].set_index("mechanism")
    assert power.loc["local", "paper_mean"] == 2.364 and power.loc["local", "n"] == 240
    assert power.loc["local", "n_paper"] == 2_049_280
    text = capsys.readouterr().out
    assert "calibration `corollary`" in text and "**differs**" in text
    assert (out / "table7-corollary.md").read_text() in text + "\n"
    # the row bound R = eta sqrt(d + 1) is stated, and the scaled data keep within it
    bounds = frame.drop_duplicates("dataset").set_index("dataset")
    assert bounds.loc["Power", "row_bound"] == pytest.approx(7 ** 0.5)
    for name in bounds.index:
        features, target = uci.load_dataset(name, uci_dir)
        rows = np.linalg.norm(np.column_stack([features, target]), axis=1)
        assert bounds.loc[name, "max_row_norm"] == pytest.approx(rows.max())
        assert rows.max() <= bounds.loc[name, "row_bound"]
    assert "Row bound: every calibration assumes rows of l2 norm <= R" in text
    assert "which no row exceeds" in text


def test_table6_command_with_experiments_calibration(uci_dir, tmp_path) -> None:
    assert main(["utility", "table6", "--data-dir", str(uci_dir), "--out", str(tmp_path),
                 "--runs", "2", "--m", "30", "--calibration", "experiments",
                 "--no-progress"]) == 0
    frame = pd.read_csv(tmp_path / "table6-experiments.csv")
    assert set(frame["mechanism"]) == {"local", "ltm-laplace", "ltm-gaussian", "central"}
    assert (frame["error_mean"] > -1e-9).all() and (frame["epsilon"] == 0.05).all()
    ks = frame.drop_duplicates("dataset").set_index("dataset")["k"].to_dict()
    assert ks == {"Power": 3, "Elevation": 1, "Ethylene": 5, "Songs": 15}
    assert (frame["calibration"] == "experiments").all()


def test_missing_file_is_one_line_naming_it_and_its_source(tmp_path, capsys) -> None:
    directory = tmp_path / "uci"
    _write_uci_files(directory, np.random.default_rng(2), rows=30)
    (directory / "ethylene_CO.txt").unlink()
    assert main(["utility", "table7", "--data-dir", str(directory),
                 "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ltm: error: ethylene_CO.txt")
    assert "https://archive.ics.uci.edu/dataset/322" in err
    assert not (tmp_path / "o").exists()  # nothing written, not even the directory


def test_a_file_in_another_format_is_refused(tmp_path) -> None:
    directory = tmp_path / "uci"
    _write_uci_files(directory, np.random.default_rng(3), rows=30)
    (directory / "3D_spatial_network.txt").write_text("1;2;3\n4;5;6\n")
    with pytest.raises(InputError, match="not in the format UCI distributes"):
        uci.load_dataset("Elevation", directory)
    with pytest.raises(InputError, match="unknown dataset"):
        uci.load_dataset("Iris", directory)
