"""Every registered mechanism under every protocol, as real ``ltm run`` runs.

One test class, parametrized from the mechanisms' registry and the protocols (as
CrypTen runs one test class under every provider): whatever a mechanism adds, each
run is verified and certified as its mechanism says. And a fourth mechanism, a toy
(each server adds a public constant to every cell: no privacy), registered through
:func:`harness.privacy.register` and run end to end: a new mechanism is one class
and its registration, as ARCHITECTURE.md's "Where new things go" says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.clients import format_integers, noise_digest
from harness.experiments import RunConfig, run
from harness.fileio import open_private
from harness.privacy import (
    Check,
    Mechanism,
    Request,
    ServerStep,
    mechanism_names,
    register,
    unregister,
)

pytestmark = pytest.mark.mpspdz

PROTOCOLS = {"semi2k": 2, "replicated-ring": 3, "ps-rep-ring": 3, "malicious-rep-ring": 3,
             "spdz2k": 2}
# Tiny: 3 x 2 cells, a few hundred clients; central's coins (a hundred-odd a cell) stay
# within seconds under spdz2k, its slowest protocol.
SMALL = ["--program", "local", "--clients", "300", "--rows", "3", "--dim", "2", "--seed",
         "5", "--epsilon", "4", "--delta", "1e-3", "--timeout", "300"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", mechanism_names())
class TestEveryMechanism:
    def test_the_run_verifies_and_certifies_its_epsilon(
            self, tmp_path, mp_spdz, program_cache, monkeypatch, capsys, mechanism, protocol):
        monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
        out = tmp_path / "out"
        code = main(["run", *SMALL, "--mechanism", mechanism, "--protocol", protocol,
                     "--parties", str(PROTOCOLS[protocol]), "--out", str(out)])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        result = json.loads((out / "result.json").read_text())
        assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
        assert result["parameters"]["mechanism"] == mechanism
        privacy = result["privacy"]
        assert privacy["mechanism"] == mechanism and privacy["requested_epsilon"] == 4.0
        assert 0 < privacy["certified_epsilon"] <= 4.0 * (1 + 1e-6)
        assert "verified: yes" in printed.out


@dataclass(frozen=True)
class Constant(Mechanism):
    """A toy: each server adds the public constant ``c`` lattice steps to every cell,
    written by its step before the MPC; the release is checked exactly."""

    c: int
    servers: int

    name = "constant"
    programs = ("local",)

    @classmethod
    def calibrate(cls, request: Request) -> Constant:
        return cls(3, request.servers)

    @classmethod
    def step_params(cls, text: str) -> Constant:
        return cls(**json.loads(text))

    def server_step(self, shape: tuple[int, int]) -> ServerStep:
        return ServerStep(self.name, self.to_json(), shape, "each server adds its constant")

    def run_step(self, shape, path, *, append, digest_key):
        values = np.full(shape, self.c, dtype=np.int64)
        with open_private(path, "ab" if append else "wb", follow=False) as fh:
            fh.write(format_integers(values.ravel()))
        return values.size, noise_digest(values, digest_key)

    def template_params(self, reveal_noise: bool) -> dict[str, object]:
        return {"noise_fragment": "servers_noise.mpc.j2",
                "noise_words": " plus each server's constant"}

    def verify(self, expected: np.ndarray, printed: Mapping[int, np.ndarray],
               digest: tuple[bytes, int] | None = None) -> Check:
        shifted = expected + np.uint64(self.c * self.servers)
        wrong = max(int(np.count_nonzero(view[0] != shifted)) for view in printed.values())
        if digest is not None:
            key, total = digest
            released = printed[0][0].view(np.int64) - expected.view(np.int64)
            wrong += int(noise_digest(released, key) != total)
        return Check(wrong)

    def record(self) -> dict:
        return {"mechanism": self.name, "requested_epsilon": None, "requested_delta": None,
                "certified_epsilon": None, "certified_delta": None, "accountant": "none",
                "calibration": None, "generator": None, "noise_std": 0.0,
                "central_std": None, "std_ratio": None, "constant": self.c}


@pytest.fixture
def constant() -> Iterator[type[Constant]]:
    register(Constant)
    try:
        yield Constant
    finally:
        unregister(Constant.name)


@pytest.mark.parametrize(("protocol", "parties"), [("semi2k", 2), ("replicated-ring", 3)])
def test_a_fourth_mechanism_is_one_class_and_its_registration(
        tmp_path, mp_spdz, program_cache, constant, protocol, parties):
    assert "constant" in mechanism_names()
    cfg = RunConfig(out=tmp_path / "out", cache_dir=program_cache, clients=200, rows=3,
                    dim=2, seed=5, program="local", protocol=protocol, parties=parties,
                    noise="none", mechanism="constant", timeout=300)
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["privacy"] == {**constant(3, parties).record()}
    # the mechanism refuses, for itself, the programs that do not add its noise
    refused = RunConfig(out=tmp_path / "other", program="fast", mechanism="constant")
    with pytest.raises(Exception, match="--mechanism constant adds the servers' noise in "
                                        "the local program, not --program fast"):
        refused.validate()


def test_an_unregistered_mechanism_is_refused_naming_the_registered_ones(tmp_path):
    with pytest.raises(Exception, match="unknown --mechanism 'constant'; choose ltm, dng, "
                                        "central"):
        RunConfig(out=Path(os.devnull), mechanism="constant").validate()
