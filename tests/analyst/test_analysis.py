"""Analysis functions, error measures, baselines and data loading."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.analyst import analysis, baselines, datasets
from harness.clients import matrices
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.privacy.noise import NoiseSpec

# --- the formulas on hand-computed cases ---------------------------------------------


def test_psi_hand_computed() -> None:
    A = np.diag([3.0, 2.0, 1.0])
    e1, e2 = np.eye(3)[:, [0]], np.eye(3)[:, [1]]
    assert analysis.lowrank_cost(A, e2) == pytest.approx(9.0 + 1.0)
    assert analysis.lowrank_cost(A, e1) == pytest.approx(4.0 + 1.0)
    assert analysis.psi(A, e2, e1) == pytest.approx((10.0 - 5.0) / 3)
    assert abs(analysis.lowrank_projection(A, 1)[:, 0]) == pytest.approx([1.0, 0.0, 0.0])


def test_lowrank_projection_is_orthonormal_and_full_rank_is_exact() -> None:
    A = np.random.default_rng(1).standard_normal((30, 5))
    X = analysis.lowrank_projection(A, 3)
    assert X.shape == (5, 3)
    gram = X.T @ X
    assert gram == pytest.approx(np.eye(3))
    full = analysis.lowrank_projection(A, 5)
    assert analysis.lowrank_cost(A, full) == pytest.approx(0, abs=1e-20)


def test_ridge_hand_computed() -> None:
    A = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    b = np.array([1.0, 2.0, 3.0])
    x = analysis.ridge_solve(A, b, 1.0)
    assert x == pytest.approx([0.5, 1.0])  # (A^T A + I)^-1 A^T b = (1/2, 2/2)
    # ||Ax - b||^2 = 0.25 + 1 + 9, lambda ||x||^2 = 0.25 + 1
    assert analysis.ridge_cost(A, b, x, 1.0) == pytest.approx(11.5)
    assert analysis.phi(A, b, np.zeros(2), x, 1.0) == pytest.approx(14.0 / 11.5)
    assert analysis.ridge_error(A, b, np.zeros(2), 1.0) == pytest.approx(14.0 / 11.5)


def test_error_is_zero_psi_and_unit_phi_on_the_data_itself() -> None:
    rng = np.random.default_rng(2)
    A = rng.standard_normal((200, 6))
    low = analysis.analyze_lowrank(A, A, 2)
    assert low["psi"] == 0.0
    M = np.column_stack([A, A @ rng.standard_normal(6) + rng.standard_normal(200)])
    ridge = analysis.analyze_ridge(M, M, 3.0)
    assert ridge["phi"] == 1.0
    json.dumps(low), json.dumps(ridge)  # JSON-ready


def test_split_target_and_errors() -> None:
    M = np.arange(12.0).reshape(4, 3)
    A, b = analysis.split_target(M, 0)
    assert b.tolist() == [0.0, 3.0, 6.0, 9.0] and A.shape == (4, 2)
    with pytest.raises(InputError, match="--target-column 3"):
        analysis.split_target(M, 3)
    with pytest.raises(InputError, match="at least one feature"):
        analysis.split_target(M[:, :1])
    with pytest.raises(InputError, match="--k"):
        analysis.lowrank_projection(M, 4)
    with pytest.raises(InputError, match="NaN"):
        analysis.lowrank_projection(np.full((3, 3), np.nan), 1)


def test_phi_undefined_when_optimum_is_free() -> None:
    A = np.eye(3)
    with pytest.raises(InputError, match="--lambda > 0"):
        analysis.ridge_error(A, np.ones(3), np.zeros(3), 0.0)


def test_ridge_singular_system_falls_back_to_least_norm() -> None:
    x = analysis.ridge_from_gram(np.zeros((2, 2)), np.zeros(2), 0.0)
    assert x == pytest.approx([0.0, 0.0])


# --- calibrations --------------------------------------------------------------------


PRIV = baselines.Privacy(epsilon=2.0, delta=1e-5, eta=0.5)


def test_gaussian_calibrations_hand_computed() -> None:
    log = math.log(1.25 / 1e-5)
    # local: Delta_2 = 2 eta sqrt(d) = 2 for d = 4
    assert baselines.local_sigma2(4, PRIV) == pytest.approx(2 * 4 * log / 4)
    # SSP: R^2 = eta^2 (d+1) = 1.25 for 5 columns, Delta = 2 R^2 = 2.5
    assert baselines.ssp_sigma2(5, PRIV) == pytest.approx(2 * 2.5**2 * log / 4)
    beta = baselines.mod_sulq_beta(1000, 4, 2.0, 1e-5)
    expected = (5 / 2000 * math.sqrt(2 * math.log(20 / (2 * math.sqrt(2 * math.pi) * 1e-5)))
                + 1 / (math.sqrt(2.0) * 1000))
    assert beta == pytest.approx(expected)


def test_interpolation_endpoints() -> None:
    spec = baselines.ltm_noise("gaussian", 5000, 8, 3, 2, PRIV)
    local = baselines.local_sigma2(3, PRIV)
    for calibration in baselines.CALIBRATIONS:
        # p = 0 is the local model and p = 1 the LTM, in both calibrations
        assert baselines.interpolated_sigma2(spec, 0.0, PRIV, calibration) == pytest.approx(local)
    assert baselines.interpolated_sigma2(spec, 1.0, PRIV) == pytest.approx(spec.sigma2)
    assert baselines.interpolated_sigma2(spec, 1.0, PRIV, "experiments") == pytest.approx(
        local / 5000)
    # experiments: sigma_local^2 n^-p exactly; corollary: geometric between the two ends
    assert baselines.interpolated_sigma2(spec, 0.6, PRIV, "experiments") == pytest.approx(
        local * 5000**-0.6)
    assert baselines.interpolated_sigma2(spec, 0.5, PRIV) == pytest.approx(
        math.sqrt(local * spec.sigma2))
    with pytest.raises(InputError, match="calibration"):
        baselines.interpolated_sigma2(spec, 0.5, PRIV, "paper")
    assert baselines.P_VALUES == (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.0)
    with pytest.raises(InputError, match="p must lie"):
        baselines.interpolated_sigma2(spec, 1.5)
    with pytest.raises(InputError, match="Gaussian"):
        baselines.interpolated_sigma2(baselines.ltm_noise("laplace", 800, 8, 3, 8, PRIV), 0.5)
    with pytest.raises(InputError, match="--epsilon"):
        baselines.Privacy(epsilon=0.0)


# --- the plaintext LTM -------------------------------------------------------------------


def test_sketch_product_matches_sketch_apply() -> None:
    rng = np.random.default_rng(3)
    sk = Sketch.generate(50, 6, 3, seed=4)
    M = rng.standard_normal((50, 2))
    expected = sk.apply(np.broadcast_to(M, (3, 50, 2)).copy())
    assert baselines.sketch_product(sk, M) == pytest.approx(expected)
    assert baselines.sketch_product(sk, M) == pytest.approx(sk.matrix() @ M)


def test_simulation_without_noise_is_the_scaled_sketch() -> None:
    M = np.random.default_rng(5).standard_normal((40, 3))
    sk = Sketch.generate(40, 5, 2, seed=6)
    spec = NoiseSpec("none", n=40, m=5, d=3, s=2)
    revealed = baselines.simulate_ltm(M, sk, spec, np.random.default_rng(0))
    assert revealed == pytest.approx(sk.matrix() @ M / math.sqrt(2))
    with pytest.raises(InputError, match="other dimensions"):
        baselines.simulate_ltm(M[:, :2], sk, spec, np.random.default_rng(0))


def test_zero_output_when_too_few_clients() -> None:
    spec = baselines.ltm_noise("gaussian", 200, 10, 3, 1, PRIV)
    assert spec.zero_output
    T = baselines.simulate_ltm(np.ones((200, 3)), Sketch.generate(200, 10, 1, 0), spec,
                               np.random.default_rng(0))
    assert not T.any()


def _noise_samples(spec: NoiseSpec, sk: Sketch, per_client: bool, reps: int) -> np.ndarray:
    rng = np.random.default_rng(11 + per_client)
    zero = np.zeros((sk.n, spec.d))
    return np.stack([baselines.simulate_ltm(zero, sk, spec, rng, per_client=per_client)
                     for _ in range(reps)])


@pytest.mark.parametrize("per_client", [False, True])
def test_gaussian_noise_variance_per_bucket(per_client: bool) -> None:
    priv = baselines.Privacy(epsilon=1.0, delta=0.1)
    sk = Sketch.generate(1500, 4, 2, seed=7)
    spec = baselines.ltm_noise("gaussian", 1500, 4, 2, 2, priv)
    counts = np.bincount(sk.rows.ravel(), minlength=4)
    noise = _noise_samples(spec, sk, per_client, 300)
    # (1/sqrt s) * sum over the c_r client draws in bucket r: variance c_r sigma^2 / s
    scaled = noise / np.sqrt(counts * spec.sigma2 / 2)[None, :, None]
    assert scaled.var() == pytest.approx(1.0, rel=0.12)


@pytest.mark.parametrize("per_client", [False, True])
def test_laplace_noise_variance(per_client: bool) -> None:
    sk = Sketch.generate(400, 4, 4, seed=8, dense=True)
    spec = baselines.ltm_noise("laplace", 400, 4, 2, 4, baselines.Privacy(epsilon=1.0))
    noise = _noise_samples(spec, sk, per_client, 300)
    # each bucket of each S_i sums n/m Gamma differences to Laplace(b): variance 2 b^2,
    # and (1/sqrt m) sum over m components keeps it.
    assert noise.var() / (2 * spec.laplace_scale**2) == pytest.approx(1.0, rel=0.2)


def test_sketch_alone_keeps_a_low_rank_subspace() -> None:
    rng = np.random.default_rng(9)
    A = datasets.lowrank_data(3000, 5, 2, rng)
    sk = Sketch.generate(3000, 8, 2, seed=10)
    spec = NoiseSpec("none", n=3000, m=8, d=5, s=2)
    X = baselines.ltm_lowrank(A, 2, sk, spec, rng)
    assert analysis.lowrank_error(A, X) == pytest.approx(0.0, abs=1e-9)


def test_central_baselines_are_exact_without_privacy_cost() -> None:
    rng = np.random.default_rng(12)
    loose = baselines.Privacy(epsilon=1e9, delta=0.5)
    A = datasets.lowrank_data(2000, 5, 2, rng)
    assert analysis.lowrank_error(A, baselines.mod_sulq_projection(A, 2, loose, rng)) < 1e-12
    F, b, _ = datasets.regression_data(2000, 3, 1.0, rng)
    assert analysis.ridge_error(F, b, baselines.ssp_ridge(F, b, 1.0, loose, rng),
                                1.0) == pytest.approx(1.0)


# --- the expected order: central <= LTM << local ------------------------------------------


def _mean_errors(problem: str, reps: int = 3) -> dict[str, float]:
    n, m = 20_000, 20
    errors: dict[str, list[float]] = {"local": [], "central": [], "ltm": []}
    for rep in range(reps):
        rng = np.random.default_rng(100 + rep)
        sk = Sketch.generate(n, m, 1, seed=200 + rep)
        if problem == "lowrank":
            priv = baselines.Privacy(epsilon=3.0)
            A = datasets.lowrank_data(n, 4, 2, rng)
            spec = baselines.ltm_noise("gaussian", n, m, 4, 1, priv)
            found = {"local": baselines.local_lowrank(A, 2, priv, rng),
                     "central": baselines.mod_sulq_projection(A, 2, priv, rng),
                     "ltm": baselines.ltm_lowrank(A, 2, sk, spec, rng)}
            for key, X in found.items():
                errors[key].append(analysis.lowrank_error(A, X))
        else:
            priv = baselines.Privacy(epsilon=5.0)
            F, b, _ = datasets.regression_data(n, 3, float(n), rng)
            spec = baselines.ltm_noise("gaussian", n, m, 4, 1, priv)
            found = {"local": baselines.local_ridge(F, b, 10.0, priv, rng),
                     "central": baselines.ssp_ridge(F, b, 10.0, priv, rng),
                     "ltm": baselines.ltm_ridge(F, b, 10.0, sk, spec, rng)}
            for key, x in found.items():
                errors[key].append(analysis.ridge_error(F, b, x, 10.0))
    return {key: float(np.mean(v)) for key, v in errors.items()}


def test_order_lowrank() -> None:
    e = _mean_errors("lowrank")
    assert 0 <= e["central"] <= e["ltm"]
    assert e["ltm"] * 5 < e["local"]


def test_order_ridge() -> None:
    e = _mean_errors("ridge")
    assert 1 <= e["central"] <= e["ltm"]
    # phi - 1 is the excess cost
    assert (e["ltm"] - 1) * 20 < e["local"] - 1


# --- data ---------------------------------------------------------------------------------


def test_lowrank_generator_spectrum() -> None:
    A = datasets.lowrank_data(500, 6, 2, np.random.default_rng(13))
    sv = np.linalg.svd(A, compute_uv=False)
    assert sv[:2] == pytest.approx([math.sqrt(250)] * 2)
    assert sv[2:] == pytest.approx([1 / 500] * 4, rel=1e-6)
    with pytest.raises(InputError, match="--k"):
        datasets.lowrank_data(500, 6, 6, np.random.default_rng(0))


def test_regression_generator_and_mu2() -> None:
    A, b, x = datasets.regression_data(100, 3, 4.0, np.random.default_rng(14))
    assert A.shape == (100, 3) and b == pytest.approx(A @ x)
    assert datasets.parse_mu2("n", 50) == 50 and datasets.parse_mu2("n^2", 50) == 2500
    assert datasets.parse_mu2("2.5", 50) == 2.5
    for bad in ("x", "-1", "n^y"):
        with pytest.raises(InputError, match="--mu2"):
            datasets.parse_mu2(bad, 50)


def test_load_csv_with_header_and_named_target(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n1,2,3\n4,5,6\n")
    M, names = matrices.load_matrix(path)
    assert names == ["a", "b", "y"] and M.shape == (2, 3)
    A, b = datasets.split_columns(M, names, "y")
    assert b.tolist() == [3.0, 6.0] and A.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    A, b = datasets.split_columns(M, names, "0")
    assert b.tolist() == [1.0, 4.0]
    with pytest.raises(InputError, match="no column named 'z'"):
        datasets.split_columns(M, names, "z")


def test_load_csv_without_header_and_npy(tmp_path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("1,2\n3,4\n5,6\n")
    M, names = matrices.load_matrix(csv)
    assert M.shape == (3, 2) and names == ["0", "1"]
    npy = tmp_path / "t.npy"
    np.save(npy, M)
    M2, _ = matrices.load_matrix(npy)
    assert (M2 == M).all()
    A, b = datasets.split_columns(M2, ["0", "1"], -1)
    assert b.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(InputError, match="out of range"):
        datasets.split_columns(M2, ["0", "1"], 5)


def test_load_errors_name_the_fix(tmp_path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        matrices.load_matrix(tmp_path / "missing.csv")
    text = tmp_path / "text.csv"
    text.write_text("a,name\n1,x\n2,y\n")
    with pytest.raises(InputError, match="line 2: column 2 \\('name'\\) holds 'x', not a number"):
        matrices.load_matrix(text)
    holes = tmp_path / "holes.csv"
    holes.write_text("a,b\n1,\n2,3\n")
    with pytest.raises(InputError, match="line 2: column 2 \\('b'\\) is empty; fill it in"):
        matrices.load_matrix(holes)
    assert matrices.load_matrix(holes, drop_missing=True)[0].tolist() == [[2.0, 3.0]]
    other = tmp_path / "t.parquet"
    other.write_text("")
    with pytest.raises(InputError, match=".csv, .txt or .npy"):
        matrices.load_matrix(other)


def _run_dir(tmp_path, with_data: bool = True, params: dict | None = None):
    rng = np.random.default_rng(15)
    F, b, _ = datasets.regression_data(400, 3, 1.0, rng)
    M = np.column_stack([F, b])
    sk = Sketch.generate(400, 20, 2, seed=16)
    T = baselines.simulate_ltm(M, sk, NoiseSpec("none", n=400, m=20, d=4, s=2), rng)
    np.save(tmp_path / "output.npy", T)
    if with_data:
        np.save(tmp_path / "data.npy", M)
    # result.json as `ltm run` writes it
    base = {"clients": 400, "dim": 4, "rows": 20, "sparsity": 2, "noise": {"kind": "none"}}
    (tmp_path / "result.json").write_text(json.dumps({"parameters": base | (params or {})}))
    return M


def test_load_run(tmp_path) -> None:
    M = _run_dir(tmp_path)
    run = datasets.load_run(tmp_path)
    assert run.sketch.shape == (20, 4) and (run.data == M).all()
    assert run.params["parameters"]["rows"] == 20


def test_load_run_without_data_names_the_fix(tmp_path) -> None:
    M = _run_dir(tmp_path, with_data=False)
    with pytest.raises(InputError, match="no data.npy.*--data FILE"):
        datasets.load_run(tmp_path)
    np.save(tmp_path.parent / "input.npy", M)
    assert datasets.load_run(tmp_path, tmp_path.parent / "input.npy").data.shape == (400, 4)
    # result.json naming the data file is enough
    (tmp_path / "result.json").write_text(json.dumps({"data": str(tmp_path.parent /
                                                                  "input.npy")}))
    assert datasets.load_run(tmp_path).data.shape == (400, 4)


def test_load_run_reads_a_text_file_as_the_run_did(tmp_path) -> None:
    M = _run_dir(tmp_path, with_data=False)
    text = tmp_path.parent / "input.csv"
    # A first line of numbers that the run was told (--header) to skip as a header.
    text.write_text("1,2,3,4\n" + "".join(",".join(repr(float(v)) for v in row) + "\n"
                                         for row in M))
    params = {"data": str(text), "layout": {"data_header": True}}
    (tmp_path / "result.json").write_text(json.dumps({"parameters": {
        "clients": 400, "dim": 4, "rows": 20, **params}}))
    assert np.array_equal(datasets.load_run(tmp_path).data, M)
    # Given with --data, the file's first line is detected (numbers: a row) or given.
    with pytest.raises(InputError, match="result.json says clients=400 but the files give"):
        datasets.load_run(tmp_path, text)
    assert np.array_equal(datasets.load_run(tmp_path, text, header=True).data, M)


def test_load_run_rejects_mixed_files(tmp_path) -> None:
    for key in ("clients", "dim", "rows"):
        _run_dir(tmp_path, params={key: 999})
        with pytest.raises(InputError, match=f"result.json says {key}=999 but the files give"):
            datasets.load_run(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no output.npy"):
        datasets.load_run(empty)
    with pytest.raises(InputError, match="does not exist"):
        datasets.load_run(tmp_path / "missing")
