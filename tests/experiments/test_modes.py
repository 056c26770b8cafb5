"""The table of run modes against what ``ltm run`` does with every combination.

Each combination of program x input x sharing x placement is either refused by
``ltm run`` before anything starts, with exactly the table's message, or routed
to the stream the table names: the config streams, the workload's disk check and
file shape, and the clusters' choice of where the stream runs all follow the
table. (Real runs of the combinations that stream: tests/experiments/test_streamed_*.py,
tests/engine/test_netns.py and tests/remote/test_host_streams.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.experiments.workload as workload
from harness.cli import main
from harness.engine import LocalCluster
from harness.errors import InputError
from harness.experiments import RunConfig, build_workload, client_job
from harness.experiments.modes import (
    LIMITS,
    PLACEMENTS,
    PROGRAM_NAMES,
    Limit,
    Mode,
    combinations,
    markdown,
    route_for,
)
from harness.privacy import mechanism_class, mechanism_names
from harness.remote import SshCluster, load_inventory
from harness.stream import BlockShape, SlotShape

_PARTY = ('\n[[party]]\nname = "{0}"\nssh_host = "{0}"\nuser = "u"\nmpc_host = "{0}"\n'
          'mp_spdz = "/d"\n')
_CLIENT = '\n[[client]]\nssh_host = "c"\nuser = "u"\nmpc_host = "c"\n'
_SMALL = {"clients": 200, "rows": 10, "dim": 2, "noise": "none", "seed": 1}


def _placement(tmp_path: Path, placement: str) -> dict:
    """The RunConfig fields (and `ltm run` options) of a placement."""
    if placement == "loopback":
        return {}
    if placement == "network":
        return {"network": "t3.large"}
    known = tmp_path / "known_hosts"
    known.touch()
    inventory = tmp_path / f"{placement}.toml"
    inventory.write_text(f'known_hosts = "{known}"\n' + _PARTY.format("a") + _PARTY.format("b")
                         + (_CLIENT if placement == "client-hosts" else ""))
    return {"hosts": inventory}


def _config(tmp_path: Path, mode: Mode, **extra: object) -> RunConfig:
    return RunConfig(out=tmp_path / "out", program=mode.program, input_mode=mode.input,
                     sharing=mode.sharing, **_placement(tmp_path, mode.placement),
                     **_SMALL, **extra)  # type: ignore[arg-type]


def _argv(tmp_path: Path, mode: Mode) -> list[str]:
    placed = [x for key, value in _placement(tmp_path, mode.placement).items()
              for x in (f"--{key}", str(value))]
    return ["run", "--program", mode.program, "--input", mode.input, "--sharing",
            mode.sharing, *placed, "--clients", "200", "--rows", "10", "--dim", "2",
            "--noise", "none", "--out", str(tmp_path / "out")]


def _name(mode: Mode) -> str:
    return f"{mode.program}-{mode.input}-{mode.sharing}-{mode.placement}"


def test_every_combination_has_one_route_and_the_impossible_ones_are_refused():
    modes = combinations()
    assert len(modes) == 3 * 2 * 2 * len(PLACEMENTS) == 48
    refused = {(m.program, m.input, m.sharing) for m in modes if route_for(m).refused}
    # Only what cannot mean anything: the local program sums shares, and seeded sharing
    # compresses shares; every other combination streams, wherever the parties are.
    assert refused == {("local", "party", "full"), ("local", "party", "seeded"),
                       ("fast", "party", "seeded"), ("reference", "party", "seeded")}
    here = {(m.program, m.input, m.sharing, m.placement) for m in modes
            if route_for(m).here and m.on_hosts}
    # To hosts, only the data owner's text is written here (and sent whole); every share
    # streams to the hosts' servers, and no share file is ever sent.
    assert here == {(p, "party", "full", place) for p in ("fast", "reference")
                    for place in ("hosts", "client-hosts")}
    assert {m for m in modes if route_for(m).shipped} == {
        Mode(*axes) for axes in here}
    # fast's parties are fed its stream as it comes wherever they are not behind an
    # emulated link: here and on every host.
    assert {m.placement for m in modes if route_for(m).fed} == {
        "loopback", "hosts", "client-hosts"}
    assert {m.program for m in modes if route_for(m).fed} == {"fast"}
    for mode in modes:
        route = route_for(mode)
        assert route.refused or (route.sink in ("sum", "shares", "owner")
                                 and route.where in ("servers", "here")
                                 and route.feeding in ("fifo", "held", "files")
                                 and route.transport in ("shm", "tls", "sftp", "none")
                                 and route.shape == {"fast": "blocked", "reference": "slots",
                                                     "local": ""}[mode.program])
        assert "\n" not in route.refused


@pytest.mark.parametrize("mode", [m for m in combinations() if route_for(m).refused],
                         ids=_name)
def test_a_refused_combination_is_refused_by_ltm_run_with_the_tables_message(
        tmp_path, capsys, mode):
    code = main(_argv(tmp_path, mode))
    err = capsys.readouterr().err
    assert code == 1
    assert err == f"ltm: error: {route_for(mode).refused}\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError) as info:  # the plain function says the same
        _config(tmp_path, mode).validate()
    assert str(info.value) == route_for(mode).refused


class _Taken(Exception):
    """Which way a cluster's prepare went."""


@pytest.mark.parametrize("mode", [m for m in combinations() if not route_for(m).refused],
                         ids=_name)
def test_a_streaming_combination_is_routed_as_the_table_says(tmp_path, monkeypatch, mode):
    route = route_for(mode)
    cfg = _config(tmp_path, mode).validate()
    assert cfg.mode == mode and cfg.route == route and cfg.streams
    # The disk check: only files written on this machine need room here.
    checked: list[str] = []
    monkeypatch.setattr(workload, "check_disk", lambda size, path, what, fix: checked.append(what))
    workload.check_fits(cfg, 200, 2, 1)
    written_here = route.sink != "sum" and (mode.placement in ("loopback", "network")
                                            or route.here)
    assert len(checked) == written_here
    if written_here:
        assert ("input text" in checked[0]) == (route.sink == "owner")
    # The files' shape, and the job the cluster gets.
    work = build_workload(cfg)
    shape = work.blocks or work.slots
    assert type(shape) is {"blocked": BlockShape, "slots": SlotShape, "": type(None)}[route.shape]
    job = client_job(cfg, work)
    assert job.route == route and job.blocks == shape
    # The cluster takes the stream where the table says.
    def taken(where: str):
        def take(*args, **kwargs):
            raise _Taken(where)
        return take

    if not mode.on_hosts:
        import harness.engine.cluster as local

        monkeypatch.setattr(local, "write_owner", taken("owner"))
        monkeypatch.setattr(local, "stream_inputs", taken("servers"))
        # The route's TLS: its namespaces are where only a real network cluster has them.
        monkeypatch.setattr(local, "start_fork_server", lambda: None)
        monkeypatch.setattr(LocalCluster, "_hold_network", lambda self: None)
        monkeypatch.setattr(LocalCluster, "_tls_route", lambda self, net, timeout: None)
        cluster = LocalCluster.__new__(LocalCluster)
        cluster.parties, cluster.workdir, cluster.network = cfg.party_count, tmp_path, None
        cluster._held, cluster._waiting, cluster._fed = None, None, False
        with pytest.raises(_Taken, match="^owner$" if route.sink == "owner" else "^servers$"):
            cluster.prepare(job)
        return

    class Group:
        def close(self) -> None:
            pass

    import harness.remote.ssh as ssh

    monkeypatch.setattr(SshCluster, "_write_owner", taken("here"))
    monkeypatch.setattr(SshCluster, "_party_group", lambda self, *a, **k: Group())
    monkeypatch.setattr(SshCluster, "_remove_clients", lambda self: None)
    monkeypatch.setattr(ssh, "stream_to_hosts", taken("servers"))
    assert cfg.hosts is not None
    cluster = SshCluster(None, load_inventory(cfg.hosts), tmp_path / "work",  # type: ignore
                         inventory_path=cfg.hosts)
    with pytest.raises(_Taken, match=f"^{route.where}$"):
        cluster.prepare(job)


@pytest.mark.parametrize(("options", "mode"), [
    ({"dense": True}, Mode("local", "shares", "full", "hosts")),
    ({"dense": True}, Mode("fast", "shares", "seeded", "hosts")),
    ({"dense": True}, Mode("reference", "shares", "full", "client-hosts"))])
def test_an_option_a_route_cannot_carry_is_refused_with_its_limits_message(
        tmp_path, options, mode):
    [limit] = [x for x in LIMITS
               if x.applies(options.get(x.option), mode,
                            route_for(mode))]
    with pytest.raises(InputError) as info:
        _config(tmp_path, mode, **options).validate()
    assert str(info.value) == limit.message.format(value=options[limit.option], **vars(mode))


@pytest.mark.parametrize("name", mechanism_names())
def test_a_mechanism_refuses_every_program_that_does_not_add_its_noise(tmp_path, name):
    """The mechanism, not the table, names the programs its noise is added in."""
    programs = mechanism_class(name).programs
    for mode in combinations():
        if not route_for(mode).runs or mode.placement != "loopback":
            continue
        if programs is None or mode.program in programs:
            assert _config(tmp_path, mode, mechanism=name).validate().mechanism == name
            continue
        with pytest.raises(InputError) as info:
            _config(tmp_path, mode, mechanism=name).validate()
        assert str(info.value) == (
            f"--mechanism {name} adds the servers' noise in the local program, not "
            f"--program {mode.program}; use --program local")


def test_dng_runs_on_hosts_wherever_each_server_has_its_agent(tmp_path):
    # Each server's agent draws its dng noise on its host. A route that reached hosts
    # without the agent (streamed here, the files sent whole) could not draw it there:
    # it would need a limit of its own, which this test then asks for.
    taken = []
    for mode in combinations():
        route = route_for(mode)
        refused = mode.program not in (mechanism_class("dng").programs or PROGRAM_NAMES)
        if mode.on_hosts and route.runs and not refused:
            assert route.where == "servers", mode
            taken.append(mode)
            cfg = _config(tmp_path, mode, mechanism="dng", epsilon=4.0, delta=1e-3).validate()
            assert cfg.mechanism == "dng" and cfg.streams and not client_job(
                cfg, build_workload(cfg)).route.here
    assert {(m.program, m.placement) for m in taken} == {("local", "hosts"),
                                                         ("local", "client-hosts")}


@pytest.mark.parametrize("mode", [Mode("fast", "party", "full", "hosts"),
                                  Mode("reference", "party", "full", "client-hosts"),
                                  Mode("local", "shares", "seeded", "network")])
def test_the_dense_sketch_goes_where_the_stream_runs_on_this_machine(tmp_path, mode):
    # Streamed here, the dense sketch needs no seed on a host: it runs (was a bare
    # ValueError for the routes to hosts before).
    cfg = _config(tmp_path, mode, dense=True).validate()
    assert cfg.streams and not client_job(cfg, build_workload(cfg)).sketch.counter_based


# A value of each option that a limit refuses where it applies, and its `ltm run` words.
_GIVEN = {"network": "t3.large", "tamper": 0, "poison": 1}
# RunConfig's field where it is not the flag's name (RunConfig.validate is its method).
_FLAG = {"validation": "--validate"}


def _flags(option: str, value: object) -> list[str]:
    flag = _FLAG.get(option, "--" + option)
    return [flag] if value is True else [flag, str(value)]


def _first_refusal(limit: Limit) -> tuple[Mode, object]:
    """A combination that runs, with a value of the limit's option that it refuses first."""
    value = _GIVEN[limit.option] if limit.values is None else limit.values[0]
    for mode in combinations():
        route = route_for(mode)
        hit = [x for x in LIMITS
               if x.option == limit.option and x.applies(value, mode, route)]
        if route.runs and hit[:1] == [limit]:
            return mode, value
    raise AssertionError(f"no combination hits {limit}")


@pytest.mark.parametrize("limit", LIMITS, ids=lambda x: f"{x.option}-{LIMITS.index(x)}")
def test_every_limit_is_refused_by_ltm_run_in_one_line_writing_nothing(
        tmp_path, capsys, limit):
    mode, value = _first_refusal(limit)
    message = limit.message.format(value=value, **vars(mode))
    assert "\n" not in message and "; " in message  # the problem, then the way out
    code = main(_argv(tmp_path, mode) + _flags(limit.option, value))
    assert code == 1
    assert capsys.readouterr().err == f"ltm: error: {message}\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError) as info:  # the plain function says the same
        _config(tmp_path, mode, **{limit.option: value}).validate()
    assert str(info.value) == message


@pytest.mark.parametrize(("option", "value", "mode"), [
    ("network", "t3.large", Mode("local", "shares", "seeded", "client-hosts")),
    ("protocol", "spdz2k", Mode("reference", "shares", "full", "network")),
    ("tamper", 1, Mode("fast", "party", "full", "loopback")),
    ("tamper", 0, Mode("local", "shares", "full", "hosts"))])
def test_the_limits_refuse_the_options_that_were_checked_beside_the_table(
        tmp_path, option, value, mode):
    [limit, *_] = [x for x in LIMITS
                   if x.option == option and x.applies(value, mode, route_for(mode))]
    with pytest.raises(InputError) as info:
        _config(tmp_path, mode, **{option: value}).validate()
    assert str(info.value) == limit.message.format(value=value, **vars(mode))


@pytest.mark.parametrize(("option", "value", "mode"), [
    ("protocol", "spdz2k", Mode("local", "shares", "full", "loopback")),
    ("protocol", "spdz2k", Mode("reference", "party", "full", "loopback")),
    ("tamper", 1, Mode("fast", "shares", "seeded", "network")),
    ("tamper", 0, Mode("reference", "shares", "full", "loopback"))])
def test_where_no_limit_applies_the_option_is_taken(tmp_path, option, value, mode):
    cfg = _config(tmp_path, mode, **{option: value}).validate()
    assert getattr(cfg, option) == value and cfg.streams


@pytest.mark.parametrize("flags", [["--network", "t3.large"], ["--tamper", "1"]])
def test_limits_on_any_hosts_are_refused_before_the_inventory_is_read(tmp_path, capsys, flags):
    # The inventory does not exist: the refusal names the option, not the missing file.
    code = main(["run", "--out", str(tmp_path / "out"), "--hosts",
                 str(tmp_path / "missing.toml"), *flags])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert f"drop {flags[0]}" in err or "drop one of them" in err
    assert "missing.toml" not in err and not (tmp_path / "out").exists()


def test_the_docs_table_of_modes_is_the_tables():
    page = (Path(__file__).parents[2] / "docs" / "concepts" / "modes.md").read_text()
    start = page.index("<!-- modes table -->\n") + len("<!-- modes table -->\n")
    end = page.index("<!-- end of modes table -->")
    assert page[start:end] == markdown(), (
        "docs/concepts/modes.md is out of date: paste harness.experiments.modes.markdown() "
        "between its markers")
