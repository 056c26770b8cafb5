"""The hosts inventory: parsing, validation messages, and atomic writing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.remote.hosts import Host, Inventory, format_inventory, load_inventory, write_inventory

GOOD = """\
known_hosts = "known_hosts"   # file checked by the SSH runner
base_port = 15000
cluster = "ltm-demo"
region = "eu-west-1"

[[party]]
name = "p0"
ssh_host = "54.1.2.3"
ssh_port = 2222
user = "ubuntu"
key = "~/.ssh/ltm-demo.pem"
mpc_host = "10.0.0.5"
mp_spdz = "/home/ubuntu/.local/share/ltm-harness/mp-spdz"

[[party]]
name = "p1"
ssh_host = "54.1.2.4"
user = "ubuntu"
mpc_host = "10.0.0.6"
mp_spdz = "/opt/mp-spdz"
workdir = "/var/tmp/runs"
"""

PARTY = """
[[party]]
name = "{name}"
ssh_host = "h"
user = "u"
mpc_host = "m"
mp_spdz = "/d"
"""


def write(tmp_path: Path, text: str, name: str = "hosts.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def two_parties(header: str = 'known_hosts = "kh"\n') -> str:
    return header + PARTY.format(name="a") + PARTY.format(name="b")


def test_load_reads_every_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.base_port == 15000
    assert inv.cluster == "ltm-demo"
    assert inv.region == "eu-west-1"
    assert inv.known_hosts == tmp_path / "known_hosts"
    p0, p1 = inv.hosts
    assert p0 == Host(name="p0", ssh_host="54.1.2.3", ssh_port=2222, user="ubuntu",
                      key=str(tmp_path / "home/.ssh/ltm-demo.pem"), mpc_host="10.0.0.5",
                      mp_spdz="/home/ubuntu/.local/share/ltm-harness/mp-spdz")
    assert p1.ssh_port == 22
    assert p1.key is None
    assert p1.workdir == "/var/tmp/runs"
    assert p0.workdir == "~/.cache/ltm-harness/runs"  # per user, in the login home
    assert inv.host("p1") is p1


def test_defaults_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", two_parties('known_hosts = "../kh"\n'))
    monkeypatch.chdir(tmp_path)
    inv = load_inventory(Path("sub/hosts.toml"))
    assert inv.base_port == 14000
    assert inv.cluster is None and inv.region is None
    # Relative to the inventory's directory, not the working directory, and absolute.
    assert inv.known_hosts.is_absolute()
    assert inv.known_hosts.resolve() == (path.parent / "../kh").resolve()


def test_relative_key_is_relative_to_the_inventory(tmp_path: Path) -> None:
    text = two_parties().replace('user = "u"', 'user = "u"\nkey = "keys/id"', 1)
    inv = load_inventory(write(tmp_path, text))
    assert inv.hosts[0].key == str(tmp_path / "keys/id")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PARTY.format(name="a") + PARTY.format(name="b"), "missing or empty 'known_hosts'"),
        ('known_hosts = "kh"\n' + PARTY.format(name="a"), "needs at least 2 parties, found 1"),
        ('known_hosts = "kh"\n', "needs at least 2 parties, found 0"),
        (two_parties().replace('name = "b"', 'name = "a"'),
         "entries #1 and #2 are both named 'a'"),
        (two_parties().replace('mpc_host = "m"\n', "", 1),
         "entry #1 ('a') is missing 'mpc_host'"),
        (two_parties().replace('user = "u"', 'user = "u"\nssh_port = 70000', 1),
         "ssh_port must be an integer port between 1 and 65535, got 70000"),
        (two_parties().replace('user = "u"', 'user = "u"\nssh_port = "22"', 1),
         "got '22'"),
        (two_parties().replace('user = "u"', 'user = "u"\nssh_port = true', 1), "got True"),
        (two_parties('known_hosts = "kh"\nbase_port = 0\n'), "base_port must be an integer"),
        (two_parties('known_hosts = "kh"\nbase_port = 65535\n'), "leaves no port for party 1"),
        (two_parties().replace('user = "u"', 'user = "u"\nsshhost = "x"', 1),
         "unknown key(s) 'sshhost' in [[party]] entry #1 ('a')"),
        (two_parties('known_hosts = "kh"\nbaseport = 1\n'), "unknown key(s) 'baseport'"),
        (two_parties('known_hosts = "kh"\ncluster = 3\n'), "'cluster' must be a non-empty"),
        ('known_hosts = "kh"\nparty = 3\n', "'party' must be an array of tables"),
        ("known_hosts = \n", "not valid TOML"),
    ],
)
def test_validation_errors_name_file_entry_and_fix(tmp_path: Path, text: str,
                                                   expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_inventory(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such hosts inventory.*ltm aws up"):
        load_inventory(tmp_path / "nope.toml")


def sample_inventory(tmp_path: Path) -> Inventory:
    hosts = tuple(
        Host(name=f"p{i}", ssh_host=f"54.0.0.{i}", user="ubuntu", key=str(tmp_path / "k.pem"),
             mpc_host=f"10.0.0.{i}", mp_spdz='/odd "dir"\\with\tescapes', ssh_port=22 + i)
        for i in range(3)
    )
    return Inventory(hosts=hosts, known_hosts=tmp_path / "out" / "c.known_hosts",
                     base_port=14500, cluster="c", region="us-east-1")


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    inv = sample_inventory(tmp_path)
    path = write_inventory(inv, tmp_path / "out" / "c.toml")
    assert 'known_hosts = "c.known_hosts"' in path.read_text()  # relative: moves with it
    assert load_inventory(path) == inv


def test_write_keeps_absolute_known_hosts_outside_its_directory(tmp_path: Path) -> None:
    inv = sample_inventory(tmp_path)
    path = write_inventory(inv, tmp_path / "elsewhere" / "c.toml")
    assert load_inventory(path).known_hosts == inv.known_hosts


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    inv = sample_inventory(tmp_path)
    path = tmp_path / "hosts.toml"
    path.write_text("precious")
    with pytest.raises(InputError, match="already exists"):
        write_inventory(inv, path)
    assert path.read_text() == "precious"
    assert os.listdir(tmp_path) == ["hosts.toml"]  # no temp file left behind
    write_inventory(inv, path, overwrite=True)
    assert load_inventory(path) == inv
    assert sorted(os.listdir(tmp_path)) == ["hosts.toml"]


def test_write_is_atomic_when_replacing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_inventory(sample_inventory(tmp_path), path, overwrite=True)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["hosts.toml"]


def test_a_party_listens_on_its_mpc_host_unless_its_entry_says_where(tmp_path: Path) -> None:
    inv = Inventory(hosts=(Host(name="a", ssh_host="h", user="u", mpc_host="10.0.0.5",
                                mp_spdz="/d"),
                           Host(name="b", ssh_host="g", user="u", mpc_host="54.1.2.3",
                                mp_spdz="/d", listen="0.0.0.0")),
                    known_hosts=tmp_path / "kh")
    path = write(tmp_path, format_inventory(inv, base_dir=tmp_path))
    loaded = load_inventory(path)
    assert loaded == inv
    assert [h.listen_address for h in loaded.hosts] == ["10.0.0.5", "0.0.0.0"]
    path.write_text(path.read_text().replace('listen = "0.0.0.0"', "listen = 0"))
    with pytest.raises(InputError, match=r"\[\[party\]\] entry #2 \('b'\) has an invalid "
                                         "'listen': give an address of that host"):
        load_inventory(path)


def test_format_omits_unset_optionals(tmp_path: Path) -> None:
    inv = Inventory(
        hosts=tuple(Host(name=n, ssh_host="h", user="u", mpc_host="m", mp_spdz="/d")
                    for n in ("a", "b")),
        known_hosts=tmp_path / "kh")
    text = format_inventory(inv, base_dir=tmp_path)
    assert "cluster" not in text and "region" not in text and "key =" not in text
    assert text.count("[[party]]") == 2


# --- client hosts: one [client] or several [[client]] --------------------------------------

CLIENT = """
{section}
ssh_host = "{host}"
user = "u"
mpc_host = "{host}"
"""


def clients(*hosts: str, section: str = "[[client]]") -> str:
    return "".join(CLIENT.format(section=section, host=h) for h in hosts)


def test_one_client_table_or_several_client_sections(tmp_path: Path) -> None:
    one = load_inventory(write(tmp_path, two_parties() + clients("c", section="[client]")))
    assert [c.name for c in one.clients] == ["client"]
    several = load_inventory(write(tmp_path, two_parties() + clients("c", "d", "e"),
                                   name="several.toml"))
    # named in order by default; the client hosts run no party, so need no MP-SPDZ path
    assert [(c.name, c.ssh_host) for c in several.clients] == [
        ("client0", "c"), ("client1", "d"), ("client2", "e")]
    assert all(c.mp_spdz.endswith("ltm-harness/mp-spdz") for c in several.clients)
    assert load_inventory(write(tmp_path, two_parties(), name="none.toml")).clients == ()


@pytest.mark.parametrize(("text", "expected"), [
    (two_parties() + clients("c", "d").replace('user = "u"', 'user = "u"\nname = "x"'),
     "[[client]] entries #1 and #2 are both named 'x'; give each host a distinct name"),
    (two_parties() + clients("c").replace('user = "u"', 'user = "u"\nname = "a"'),
     "[[party]] entry #1 and [[client]] entry #1 are both named 'a'"),
    (two_parties() + clients("c", "d").replace('mpc_host = "d"', ""),
     "[[client]] entry #2 ('client1') is missing 'mpc_host'"),
    (two_parties() + clients("c", "d").replace('user = "u"', 'user = "u"\nport = 1', 1),
     "unknown key(s) 'port' in [[client]] entry #1 ('client0')"),
    ('client = 3\n' + two_parties(), "'client' must be a [client] section, or one [[client]]"),
])
def test_client_host_errors_name_the_entry(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize(("hosts", "expected"), [
    (("c", "h"), "the client host 'client1' (h:22) is also party 'b'"),
    (("c", "c"), "the client host 'client1' (c:22) is also client host 'client0'"),
])
def test_a_client_host_that_is_another_host_is_refused(tmp_path: Path, hosts, expected) -> None:
    from harness.remote.hosts import check_distinct

    text = two_parties().replace('ssh_host = "h"', 'ssh_host = "h2"', 1)  # a on h2, b on h
    inv = load_inventory(write(tmp_path, text + clients(*hosts)))
    with pytest.raises(InputError) as info:
        check_distinct(inv, "inv.toml")
    message = str(info.value)
    assert message.startswith("inv.toml: ") and "\n" not in message
    assert expected in message and "a machine of its own" in message


def test_several_clients_round_trip_as_client_sections(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, two_parties() + clients("c", "d")))
    text = format_inventory(inv, base_dir=tmp_path)
    assert text.count("[[client]]") == 2 and "\n[client]\n" not in text
    again = load_inventory(write(tmp_path, text, name="again.toml"))
    assert again.clients == inv.clients
    one = load_inventory(write(tmp_path, two_parties() + clients("c", section="[client]"),
                               name="one.toml"))
    # one client host keeps the [client] table older inventories have
    assert "\n[client]\n" in format_inventory(one) and "[[client]]" not in format_inventory(one)
