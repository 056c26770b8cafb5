"""The command line's defaults are its configs' and its shared options agree.

``ltm run``'s defaults must be ``RunConfig``'s field defaults (and ``ltm
reproduce``'s ``ReproduceConfig``'s), so that the command line and a library
call never run different experiments; the options ``run`` and ``reproduce``
both take must be one definition, differing at most in the default they show.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from harness.cli import build_parser, common
from harness.experiments import ReproduceConfig, RunConfig


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise AssertionError("ltm has no subcommands")


def actions(name: str) -> dict[str, argparse.Action]:
    """The options of ``ltm NAME`` by their first flag."""
    return {a.option_strings[0]: a for a in subparser(name)._actions if a.option_strings}


def field_defaults(config: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(config)
            if f.default is not dataclasses.MISSING}


@pytest.mark.parametrize(("command", "config", "unset"), [
    ("run", RunConfig, ()),
    ("reproduce", ReproduceConfig, ("program", "protocol")),
])
def test_parser_defaults_are_the_config_defaults(command, config, unset):
    defaults = field_defaults(config)
    mapped = [a for a in actions(command).values() if a.dest in defaults]
    # Every option of the config's that the command has (all of run's but --out).
    assert len(mapped) >= (27 if command == "run" else 14)
    for action in mapped:
        if action.dest in common.CLI_DEFAULTS:
            expected = common.CLI_DEFAULTS[action.dest]
        elif action.dest in unset:
            expected = None
        else:
            expected = defaults[action.dest]
        assert action.default == expected, action.option_strings[0]


def test_every_run_option_is_a_config_field():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    options = {a.dest for a in actions("run").values()} - {"help"}
    assert options <= names, options - names


def test_bare_run_builds_the_default_config():
    args = build_parser().parse_args(["run", "--out", "x"])
    cfg = common.config_from(RunConfig, args, out=Path("x"))
    expected = RunConfig(out=Path("x"), install_mpspdz=common.CLI_DEFAULTS["install_mpspdz"])
    assert cfg == expected


def test_reproduce_falls_back_to_the_config_for_unset_options():
    args = build_parser().parse_args(["reproduce", "table3", "--out", "d", "--seed", "7"])
    cfg = common.config_from(ReproduceConfig, args, unset=("program", "protocol"),
                             out=Path("d"))
    assert cfg.program == field_defaults(ReproduceConfig)["program"]
    assert cfg.protocol == field_defaults(ReproduceConfig)["protocol"]
    assert cfg.seed == 7 and cfg.tables == "table3" and cfg.install_mpspdz is True


@pytest.mark.parametrize("opt", common.SHARED, ids=lambda o: o.flags[0])
def test_run_and_reproduce_share_each_common_option(opt):
    run, repro = actions("run")[opt.flags[0]], actions("reproduce")[opt.flags[0]]
    for attr in ("option_strings", "dest", "type", "choices", "metavar", "nargs", "const"):
        assert getattr(run, attr) == getattr(repro, attr), attr
    assert type(run) is type(repro)
    # The one help text, with each command's default in place of {default}.
    pattern = re.escape(opt.help).replace(re.escape("{default}"), "(.+)")
    for action in (run, repro):
        assert re.fullmatch(pattern, action.help or ""), (action.help, opt.help)
    if "{default}" not in opt.help:
        assert run.help == repro.help


def test_help_shows_each_commands_own_default():
    run, repro = actions("run"), actions("reproduce")
    assert "(default random)" in run["--seed"].help
    assert f"(default {field_defaults(ReproduceConfig)['seed']})" in repro["--seed"].help
    assert f"(default {RunConfig.timeout:g})" in run["--timeout"].help
    assert f"(default {ReproduceConfig.timeout:g})" in repro["--timeout"].help
    assert f"(default {ReproduceConfig.program})" in repro["--program"].help
    assert f"(default {RunConfig.clients};" in run["--clients"].help


def test_run_defaults_to_the_tightest_certified_calibration_and_reproduce_to_the_papers():
    from harness.privacy import NoiseSpec, certificate

    run = common.config_from(RunConfig, build_parser().parse_args(["run", "--out", "x"]),
                             out=Path("x"))
    repro = common.config_from(ReproduceConfig, build_parser().parse_args(
        ["reproduce", "table3", "--out", "d"]), unset=("program", "protocol"), out=Path("d"))
    # reproduce leaves it to the sweep: the paper's tables keep the paper's corollary,
    # the comparison of mechanisms gives the LTM its tightest
    from harness.experiments.sweeps import load_spec

    assert (run.calibration, repro.calibration) == ("analytic", None)
    assert repro.calibration_of(load_spec("table3")) == "corollary"
    assert repro.calibration_of(load_spec("mechanisms")) == "analytic"
    assert repro.identity()["calibration"] == "corollary"
    assert "(default analytic)" in actions("run")["--calibration"].help
    assert "the paper's corollary elsewhere)" in " ".join(
        actions("reproduce")["--calibration"].help.split())
    # a bare run spends the epsilon it asks for, not 0.442 of it
    noise = NoiseSpec(run.noise, n=run.clients, m=run.rows, d=run.dim, s=run.sparsity,
                      epsilon=run.epsilon, delta=run.delta, eta=run.eta,
                      calibration=run.calibration, frac_bits=run.frac_bits)
    certified, _ = certificate(noise)
    assert run.epsilon * 0.999 <= certified <= run.epsilon
