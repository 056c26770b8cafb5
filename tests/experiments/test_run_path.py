"""The run path's pieces: validation that returns a config, the server-program
registry, and one run that reaches its parties only through the Cluster protocol."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

from harness.engine import PROGRAMS, Cluster, LocalCluster, server_program
from harness.errors import InputError, LtmError
from harness.experiments import (
    RunConfig,
    build_workload,
    execute,
    program_for,
)

execute_module = importlib.import_module("harness.experiments.execute")


def test_validate_returns_a_resolved_config_and_leaves_the_given_one():
    given = RunConfig(out=Path("o"), program="reference", protocol="replicated-ring")
    settled = given.validate()
    assert (given.parties, given.input_mode) == (None, None)
    assert (settled.parties, settled.input_mode) == (3, "party")
    assert settled.party_count == 3 and settled.input_kind == "party"
    assert dataclasses.replace(settled, parties=None, input_mode=None) == given
    with pytest.raises(ValueError, match="validate"):
        given.party_count  # noqa: B018 -- the property raises


@pytest.mark.parametrize("calibration", ["corollary", "analytic"])
def test_a_run_the_accountant_does_not_certify_is_refused_before_anything(tmp_path,
                                                                          calibration):
    """The paper's corollary at d = 1 certifies epsilon 1.66 for a requested 1: refused in
    one line naming both and the fix, before MP-SPDZ is looked for or anything drawn or
    written. The analytic calibration of the same run is certified, and goes on."""
    from harness.experiments import run

    out = tmp_path / "out"
    cfg = RunConfig(out=out, clients=100_000, rows=100, dim=1, noise="gaussian",
                    calibration=calibration, mp_spdz=tmp_path / "no-mp-spdz")
    with pytest.raises(LtmError) as err:
        run(cfg)
    message = str(err.value)
    assert "\n" not in message
    if calibration == "corollary":
        assert "certifies epsilon 1.657, above the requested 1 (delta 1e-06" in message
        assert "use --calibration analytic" in message and isinstance(err.value, InputError)
    else:  # past the privacy check, refused only for the missing MP-SPDZ
        assert "certifies" not in message and "no-mp-spdz" in message
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a lock


@pytest.mark.parametrize(("frac_bits", "certified"), [(0, "no epsilon"),
                                                       (1, "epsilon 2.776")])
def test_noise_the_lattice_rounds_away_is_refused_naming_the_frac_bits_that_pass(
        capsys, tmp_path, frac_bits, certified):
    """n = 1e6, d = 1, m = 100, analytic: each client's sd is 0.087, which F = 0 and 1
    round away; refused in one line (exit 1) naming the certificate and F = 2."""
    from harness.cli import main

    out = tmp_path / "out"
    code = main(["run", "--clients", "1000000", "--dim", "1", "--rows", "100",
                 "--calibration", "analytic", "--frac-bits", str(frac_bits), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert f"at --frac-bits {frac_bits}, certifies {certified}, above the requested 1" in err[0]
    assert err[0].endswith("the smallest --frac-bits it is certified at is 2")
    assert not out.exists()


@pytest.mark.parametrize(("calibration", "fix"), [
    ("analytic", "use --clients <= 279912, or use --frac-bits 42 (now 44)"),
    ("corollary", "use --clients <= 299702")])
def test_a_ring_overflow_names_a_lower_frac_bits_only_if_it_is_certified(calibration, fix):
    """Lowering --frac-bits may round the noise away: the overflow refusal names the
    largest lower F that fits and is certified (analytic: 42), and none when no F is
    (the corollary at d = 1 certifies 1.66 at every F)."""
    from harness.experiments.workload import check_noise

    cfg = RunConfig(out=Path("o"), clients=1_000_000, rows=100, dim=1, frac_bits=44,
                    calibration=calibration).validate()
    with pytest.raises(InputError) as err:
        check_noise(cfg)
    assert str(err.value).startswith("n=1000000 clients could sum past the ring")
    assert str(err.value).endswith(fix)


def test_the_corollary_without_a_certificate_names_the_clients_needed():
    from harness.experiments.workload import check_noise

    # s = 20 > d: delta_E >= delta although the corollary's own bound is defined
    cfg = RunConfig(out=Path("o"), clients=15_000, rows=100, dim=1, sparsity=20,
                    calibration="corollary").validate()
    with pytest.raises(InputError, match=r"certifies no epsilon .* use --clients >= 17154 "):
        check_noise(cfg)


@pytest.mark.parametrize(("program", "default", "blocked", "aggregates"), [
    ("fast", "shares", True, False), ("reference", "party", False, False),
    ("local", "shares", True, True)])
def test_the_registry_describes_each_program(program, default, blocked, aggregates):
    spec = server_program(program)
    assert (spec.default_input, spec.blocked, spec.aggregates) == (default, blocked, aggregates)
    cfg = RunConfig(out=Path("o"), program=program, clients=200, rows=10, dim=2,
                    noise="none", seed=1).validate()
    work = build_workload(cfg)
    # On loopback every program streams. local's servers read no share
    # file; fast's write theirs, laid out per chunk of clients in blocks of this shape;
    # reference's data owner (its default input) writes its input text per chunk, one
    # row per slot.
    assert cfg.streams
    assert (work.blocks is not None) == (blocked and not aggregates)
    assert (work.slots is not None) == (not blocked)
    shares = dataclasses.replace(cfg, input_mode="shares", sharing="seeded")
    assert shares.streams  # seeded shares stream too
    if not blocked:  # reference's servers write one row per slot as the shares arrive
        assert build_workload(shares).slots is not None
    # Where else each program streams, and how: tests/experiments/test_modes.py.
    assert set(PROGRAMS) == {"fast", "reference", "local"}


def test_programs_refuse_what_they_cannot_read_in_one_line():
    with pytest.raises(InputError, match="^--program local aggregates the servers' own "
                                         "shares; it needs --input shares$"):
        RunConfig(out=Path("o"), program="local", input_mode="party").validate()
    with pytest.raises(InputError, match="^unknown --program 'textbook'; choose fast, "
                                         "reference, local$"):
        RunConfig(out=Path("o"), program="textbook").validate()
    # spdz2k: clients cannot write its shares; only programs that read them are refused
    with pytest.raises(InputError, match="cannot run --program fast on client share files"):
        RunConfig(out=Path("o"), protocol="spdz2k").validate()
    assert RunConfig(out=Path("o"), protocol="spdz2k", program="local").validate() \
        .inputs_aggregates


class Recording:
    """A Cluster that is not a LocalCluster: it records each call and passes it on."""

    def __init__(self, inner: LocalCluster) -> None:
        self.inner = inner
        self.parties = inner.parties
        self.workdir = inner.workdir
        self.calls: list[str] = []

    def party_dir(self, i):
        return self.inner.party_dir(i)

    def share_file(self, i):
        return self.inner.share_file(i)

    def launch(self, job, program, *, timeout, port=None):
        self.calls.append("launch")
        return self.inner.launch(job, program, timeout=timeout, port=port)

    def prepare(self, job):
        self.calls.append("prepare")
        return self.inner.prepare(job)

    def session(self):
        self.calls.append("session")
        return self.inner.session()

    def run_server_step(self, step, *, after_aggregate, digest_key):
        self.calls.append("run_server_step")
        return self.inner.run_server_step(step, after_aggregate=after_aggregate,
                                          digest_key=digest_key)

    def run(self, program, *, timeout, port=None):
        self.calls.append("run")
        return self.inner.run(program, timeout=timeout, port=port)

    def upload_bytes(self, prepared):
        self.calls.append("upload_bytes")
        return self.inner.upload_bytes(prepared)

    @property
    def reuses_inputs(self):
        return self.inner.reuses_inputs


@pytest.mark.mpspdz
@pytest.mark.parametrize("program", ["fast", "local"])
def test_a_run_reaches_its_parties_only_through_the_protocol(tmp_path, mp_spdz, program_cache,
                                                             monkeypatch, program):
    cfg = RunConfig(out=tmp_path / "o", program=program, clients=300, rows=5, dim=2,
                    sparsity=2, noise="none", seed=3, cache_dir=program_cache, timeout=120,
                    sharing="seeded").validate()
    made: list[Recording] = []

    def make_cluster(cfg, mp, workdir):
        made.append(Recording(LocalCluster(mp, cfg.party_count, workdir,
                                           protocol=cfg.protocol)))
        return made[-1]

    monkeypatch.setattr(execute_module, "make_cluster", make_cluster)
    work = build_workload(cfg)
    compiled = program_for(mp_spdz, cfg, work)
    first = execute(cfg, mp_spdz, work, compiled, tmp_path / "w", keep_inputs=True)
    [cluster] = made
    assert isinstance(cluster, Cluster) and not isinstance(cluster, LocalCluster)
    assert cluster.calls == ["launch", "prepare", "session", "run", "upload_bytes"]
    result = first.result
    assert result.verification.ok and not result.inputs_reused
    # streamed: each server expanded its seeds as they arrived (local summing them,
    # fast writing its share file)
    assert all(p.expand_s is None for p in result.parties)
    assert result.timings["stream_expand_s"] > 0
    assert first.revealed.shape == (5, 2) and first.revealed.dtype == np.uint64
    assert "_revealed" not in result.to_json() and "_inputs" not in result.to_json()
    if program == "fast":  # its parties were fed the stream: nothing stays to run on again
        assert first.inputs is None and not cluster.reuses_inputs
        return
    # again on the same inputs: the clients' side is not repeated
    assert first.inputs is not None
    cluster.calls.clear()
    again = execute(cfg, mp_spdz, work, compiled, tmp_path / "w", inputs=first.inputs)
    assert cluster.calls == ["session", "run", "upload_bytes"]
    assert again.result.verification.ok and again.result.inputs_reused
    assert again.inputs is None  # not asked to keep them
