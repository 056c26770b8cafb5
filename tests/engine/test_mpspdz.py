"""Tests for finding, checking and installing MP-SPDZ.

Everything runs in ``tmp_path`` with ``HOME``/``XDG_DATA_HOME``/``MP_SPDZ_HOME``
redirected: the real default location may hold a real MP-SPDZ build and must
never be read or written here. Downloads go to a local HTTP server only.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tqdm import tqdm

from harness import cli
from harness.cli import mpspdz as cli_mpspdz
from harness.engine import checkup, installer, mpspdz, release
from harness.engine.mpspdz import MpSpdz
from harness.errors import MpSpdzError

VERSION_LINE = "## 0.4.2 (Dec 24, 2025)"
_REAL_CPU_FLAGS = release._cpu_flags  # saved before the autouse fixture replaces it


# ------------------------------------------------------------------ fixtures/helpers


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every location rule into tmp_path and pretend to be x86-64 Linux."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("MP_SPDZ_HOME", raising=False)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setattr(installer, "_host", lambda: ("Linux", "x86_64"))
    monkeypatch.setattr(release, "_cpu_flags", lambda: {"fpu", "sse2"})
    assert mpspdz.default_home().is_relative_to(tmp_path)
    return home


def make_tree(root: Path, binaries: tuple[str, ...] = ("semi2k-party.x",)) -> Path:
    """A minimal MP-SPDZ directory, as a source build or an installed release looks."""
    (root / "Compiler").mkdir(parents=True)
    (root / "Compiler" / "__init__.py").write_text("")
    (root / "compile.py").write_text("print('compile')\n")
    (root / "CHANGELOG.md").write_text(f"The changelog explains...\n\n{VERSION_LINE}\n\n- x\n")
    for name in binaries:
        path = root / name
        path.write_text("#!/bin/sh\necho hi\n")
        path.chmod(0o755)
    return root


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def _script(variant: str) -> bytes:
    return f"#!/bin/sh\necho semi2k-party.x {variant}\n".encode()


def make_release(
    path: Path,
    *,
    top: str = "mp-spdz-0.4.2",
    compression: str = "xz",
    variants: tuple[str, ...] = ("amd64", "adx"),
    changelog: str = VERSION_LINE,
    extra: tuple[tarfile.TarInfo, ...] = (),
) -> Path:
    """A fake release tarball with the official layout."""
    mode = f"w:{compression}" if compression else "w"
    with tarfile.open(path, mode) as tar:
        _add_dir(tar, top)
        _add(tar, f"{top}/compile.py", b"print('compile')\n", 0o755)
        _add_dir(tar, f"{top}/Compiler")
        _add(tar, f"{top}/Compiler/__init__.py")
        _add(tar, f"{top}/CHANGELOG.md", f"Intro.\n\n{changelog}\n\n- stuff\n".encode())
        _add(tar, f"{top}/Scripts/tldr.sh", b"#!/bin/sh\nexit 1\n", 0o755)
        for variant in variants:
            _add(tar, f"{top}/bin/Linux-{variant}/semi2k-party.x", _script(variant), 0o755)
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def _member(name: str, *, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


def run_binary(path: Path) -> str:
    return subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout.strip()


def leftovers(parent: Path) -> list[str]:
    """Scratch directories an install may have left next to its prefix."""
    return sorted(p.name for p in parent.iterdir() if ".install-" in p.name)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(directory served, base URL) from a local server that is shut down afterwards."""
    served = tmp_path / "served"
    served.mkdir()
    handler = partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def healthy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the package/openssl checks independent of this machine."""
    monkeypatch.setattr(checkup, "_package_version", lambda module, dist: "1.0")
    monkeypatch.setattr(checkup, "_find_openssl", lambda: "/usr/bin/openssl")


# ------------------------------------------------------------------- locating


def test_default_home_follows_home_and_xdg(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert mpspdz.default_home() == isolated / ".local/share/ltm-harness/mp-spdz"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert mpspdz.default_home() == tmp_path / "xdg/ltm-harness/mp-spdz"


def test_find_precedence_explicit_env_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = make_tree(mpspdz.default_home())
    env = make_tree(tmp_path / "env")
    explicit = make_tree(tmp_path / "explicit")

    assert mpspdz.find_mpspdz().root == default
    monkeypatch.setenv("MP_SPDZ_HOME", str(env))
    assert mpspdz.find_mpspdz().root == env
    assert mpspdz.find_mpspdz(explicit).root == explicit
    assert mpspdz.find_mpspdz(str(explicit)).root == explicit


@pytest.mark.parametrize("source", ["--mp-spdz", "MP_SPDZ_HOME", "default location"])
def test_find_missing_says_where_and_how_to_fix(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    explicit = None
    if source == "--mp-spdz":
        explicit = missing
    elif source == "MP_SPDZ_HOME":
        monkeypatch.setenv("MP_SPDZ_HOME", str(missing))
    else:
        missing = mpspdz.default_home()

    with pytest.raises(MpSpdzError) as info:
        mpspdz.find_mpspdz(explicit)
    message = str(info.value)
    assert str(missing) in message
    assert f"(from {source})" in message
    assert "does not exist" in message
    for fix in ("ltm mpspdz install", "--archive FILE", "MP_SPDZ_HOME", "--mp-spdz", "v0.4.2"):
        assert fix in message
    assert "\n" not in message


def test_find_rejects_incomplete_directories(tmp_path: Path) -> None:
    no_compiler = tmp_path / "a"
    no_compiler.mkdir()
    with pytest.raises(MpSpdzError, match="has no compile.py"):
        mpspdz.find_mpspdz(no_compiler)

    no_package = make_tree(tmp_path / "b")
    (no_package / "Compiler" / "__init__.py").unlink()
    (no_package / "Compiler").rmdir()
    with pytest.raises(MpSpdzError, match="has no Compiler/ package"):
        mpspdz.find_mpspdz(no_package)

    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(MpSpdzError, match="is not a directory"):
        mpspdz.find_mpspdz(a_file)


def test_mpspdz_properties(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp", binaries=("semi2k-party.x", "mascot-party.x"))
    (root / "replicated-ring-party.x").write_text("not executable")
    mp = MpSpdz(root)

    assert mp.compiler == root / "compile.py"
    assert mp.version == "0.4.2"
    assert mp.binary("semi2k-party.x") == root / "semi2k-party.x"
    assert mp.describe() == {
        "root": str(root),
        "version": "0.4.2",
        "binaries": ["mascot-party.x", "semi2k-party.x"],
        "compiler": True,
    }
    with pytest.raises(MpSpdzError) as info:
        mp.binary("replicated-ring-party.x")
    message = str(info.value)
    assert "replicated-ring-party.x" in message
    assert str(root) in message
    assert "ltm mpspdz install" in message
    assert "build it in" in message and "replicated-ring-party.x" in message


def test_version_absent_or_unparsable(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp")
    (root / "CHANGELOG.md").write_text("no versions here\n## next\n")
    assert MpSpdz(root).version is None
    (root / "CHANGELOG.md").unlink()
    assert MpSpdz(root).version is None
    assert MpSpdz(root).describe()["version"] is None


def test_add_mpspdz_argument() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cli_mpspdz.add_mpspdz_argument(parser)
    assert parser.parse_args([]).mp_spdz is None
    assert parser.parse_args(["--mp-spdz", "/x"]).mp_spdz == "/x"
    assert "MP_SPDZ_HOME" in parser.format_help()


# ----------------------------------------------------------------------- doctor


@pytest.mark.usefixtures("healthy_env")
def test_doctor_all_present(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp", binaries=mpspdz.REQUIRED_BINARIES
                     + mpspdz.OPTIONAL_BINARIES)
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is True
    text = out.getvalue()
    assert f"{root} (from --mp-spdz)" in text
    assert "0.4.2" in text
    assert "MISSING" not in text
    for name in ("compile.py", "semi2k-party.x", "replicated-ring-party.x", "ps-rep-ring-party.x",
                 "malicious-rep-ring-party.x", "spdz2k-party.x", "numpy", "openssl"):
        assert name in text
    assert ("protocols usable: semi2k, replicated-ring, ps-rep-ring, malicious-rep-ring, "
            "spdz2k\n") in text


@pytest.mark.usefixtures("healthy_env")
def test_doctor_lists_unusable_protocols_and_why(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp", binaries=("semi2k-party.x", "ps-rep-ring-party.x",
                                                "spdz2k-party.x"))
    # a source build with KOS15 OT and without -DINSECURE: MP-SPDZ refuses spdz2k
    (root / "CONFIG.mine").write_text("USE_KOS = 1\n")
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is True  # semi2k, the default, is there
    text = out.getvalue()
    assert "protocols usable: semi2k, ps-rep-ring\n" in text
    assert "protocol not usable: replicated-ring (no replicated-ring-party.x)" in text
    line = next(x for x in text.splitlines() if "not usable: spdz2k" in x)
    assert "USE_KOS = 1" in line and "ltm mpspdz install" in line


@pytest.mark.usefixtures("healthy_env")
def test_doctor_optional_binary_missing_is_still_ok(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp")
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is True
    line = next(x for x in out.getvalue().splitlines() if "replicated-ring-party.x" in x)
    assert "MISSING" in line and "(optional)" in line and "build it in" in line


@pytest.mark.usefixtures("healthy_env")
def test_doctor_missing_required_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "mp", binaries=())
    monkeypatch.setenv("MP_SPDZ_HOME", str(root))
    out = io.StringIO()
    assert checkup.doctor(out=out) is False
    text = out.getvalue()
    assert "(from MP_SPDZ_HOME)" in text
    line = next(x for x in text.splitlines() if "semi2k-party.x" in x)
    assert "MISSING" in line and "ltm mpspdz install" in line and "build it in" in line


@pytest.mark.usefixtures("healthy_env")
def test_doctor_nothing_installed_still_reports_everything() -> None:
    out = io.StringIO()
    assert checkup.doctor(out=out) is False
    text = out.getvalue()
    assert "(from default location)" in text
    assert "ltm mpspdz install" in text
    assert "numpy" in text and "openssl" in text


def _avx2() -> bool:
    with open("/proc/cpuinfo") as fh:
        return any(line.startswith("flags") and " avx2" in line for line in fh)


@pytest.mark.usefixtures("healthy_env")
def test_doctor_reports_the_compiled_loops_and_how_the_sampler_runs(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "mp")
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is True
    lines = out.getvalue().splitlines()
    sampler = next(x for x in lines if "Gaussian sampler" in x)
    how = "four draws at a time (AVX2)" if _avx2() else "one draw at a time"
    assert sampler.split()[0] == "ok" and sampler.endswith(how)
    assert next(x for x in lines if "sketch's loops" in x).split()[0] == "ok"
    assert next(x for x in lines if "fast's blocks" in x).split()[0] == "ok"


@pytest.mark.usefixtures("healthy_env")
def test_doctor_names_a_loop_not_built_and_the_fix_and_stays_healthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An install without a C compiler: the same values through numpy, more slowly.
    import harness.clients.gaussian as gaussian
    import harness.clients.picks as picks
    import harness.stream.placing as placing

    monkeypatch.setattr(gaussian, "_library", lambda: None)
    monkeypatch.setattr(picks, "_library", lambda: None)
    monkeypatch.setattr(placing, "_library", lambda: None)
    root = make_tree(tmp_path / "mp")
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is True
    for name in ("Gaussian sampler", "sketch's loops", "servers' copy into fast's blocks"):
        line = next(x for x in out.getvalue().splitlines() if name in x)
        assert line.split()[0] == "slower" and "not built" in line and "C compiler" in line


def test_doctor_missing_package_and_openssl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_tree(tmp_path / "mp")
    monkeypatch.setattr(
        checkup, "_package_version", lambda module, dist: None if module == "paramiko" else "1"
    )
    monkeypatch.setattr(checkup, "_find_openssl", lambda: None)
    out = io.StringIO()
    assert checkup.doctor(root, out=out) is False
    lines = out.getvalue().splitlines()
    assert "pip install paramiko" in next(x for x in lines if "paramiko" in x)
    openssl = next(x for x in lines if "openssl" in x)
    assert "MISSING" in openssl and "install OpenSSL" in openssl


def test_package_check_on_this_interpreter() -> None:
    # The real lookup, without importing: the harness's own dependencies are installed.
    assert checkup._package_version("numpy", "numpy") is not None
    assert checkup._package_version("surely_not_a_module_xyz", "x") is None


# ---------------------------------------------------------------------- install


def test_install_from_archive(tmp_path: Path) -> None:
    archive = make_release(tmp_path / "mp-spdz-0.4.2.tar.xz")
    out = io.StringIO()
    mp = installer.install(archive=archive, out=out)

    home = mpspdz.default_home()
    assert mp.root == home
    assert mp.version == "0.4.2"
    assert run_binary(mp.binary("semi2k-party.x")) == "semi2k-party.x amd64"
    assert (home / "Player-Data").is_dir()
    assert mpspdz.find_mpspdz().root == home

    record = json.loads((home / ".ltm-install.json").read_text())
    assert record["source"] == str(archive)
    assert record["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert record["version"] == "0.4.2"
    assert record["date"]
    text = out.getvalue()
    assert "Installed MP-SPDZ 0.4.2 (Linux-amd64" in text and str(home) in text
    assert leftovers(home.parent) == []


@pytest.mark.parametrize(
    ("flags", "variants", "expected"),
    [
        ({"sse2", "adx", "bmi2"}, ("amd64", "adx"), "adx"),
        ({"sse2"}, ("amd64", "adx"), "amd64"),
        ({"adx"}, ("amd64",), "amd64"),  # adx CPUs can run amd64 binaries
    ],
)
def test_install_picks_binary_variant(
    flags: set[str],
    variants: tuple[str, ...],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(release, "_cpu_flags", lambda: flags)
    archive = make_release(tmp_path / "r.tar.xz", variants=variants)
    mp = installer.install(prefix=tmp_path / "p", archive=archive, out=io.StringIO())
    assert run_binary(mp.binary("semi2k-party.x")) == f"semi2k-party.x {expected}"
    assert json.loads((mp.root / ".ltm-install.json").read_text())["binaries"] == (
        f"Linux-{expected}"
    )


@pytest.mark.parametrize("compression", ["gz", ""])
def test_install_accepts_gz_and_plain_tar(compression: str, tmp_path: Path) -> None:
    archive = make_release(tmp_path / "release.tar", compression=compression)
    mp = installer.install(prefix=tmp_path / "p", archive=archive, out=io.StringIO())
    assert mp.binary("semi2k-party.x").is_file()


def test_cpu_flags_reader_reads_the_flags_line(tmp_path: Path) -> None:
    # The real reader, on a cpuinfo of two processors (the first one's flags count).
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse2 adx bmi2\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert _REAL_CPU_FLAGS(cpuinfo) == {"fpu", "sse2", "adx", "bmi2"}
    assert _REAL_CPU_FLAGS(tmp_path / "missing") == set()  # unreadable: no flags, amd64
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd\n")  # an ARM cpuinfo
    assert _REAL_CPU_FLAGS(cpuinfo) == set()


def test_install_via_url(tmp_path: Path, http_dir: tuple[Path, str]) -> None:
    served, base = http_dir
    archive = make_release(served / "mp-spdz-0.4.2.tar.xz")
    url = f"{base}/mp-spdz-0.4.2.tar.xz"
    prefix = tmp_path / "data" / "mp"
    out = io.StringIO()

    mp = installer.install(prefix=prefix, url=url, out=out)

    assert mp.root == prefix
    assert run_binary(mp.binary("semi2k-party.x")) == "semi2k-party.x amd64"
    record = json.loads((prefix / ".ltm-install.json").read_text())
    assert record["source"] == url
    assert record["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    text = out.getvalue()
    assert f"Downloading {url}" in text
    # Not the default location, so it says how to use it.
    assert f"--mp-spdz {prefix}" in text
    assert leftovers(prefix.parent) == []


def test_install_via_url_404(tmp_path: Path, http_dir: tuple[Path, str]) -> None:
    _, base = http_dir
    prefix = tmp_path / "p"
    with pytest.raises(MpSpdzError) as info:
        installer.install(prefix=prefix, url=f"{base}/missing.tar.xz", out=io.StringIO())
    message = str(info.value)
    assert "HTTP 404" in message and "--archive FILE" in message and "missing.tar.xz" in message
    assert not prefix.exists()
    assert leftovers(tmp_path) == []


def test_install_network_failure(tmp_path: Path) -> None:
    # A port nothing listens on: bind, note the port, close.
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(MpSpdzError, match="--archive FILE"):
        installer.install(
            prefix=tmp_path / "p", url=f"http://127.0.0.1:{port}/x.tar.xz", out=io.StringIO()
        )
    assert leftovers(tmp_path) == []


def test_install_refuses_existing_without_force_and_replaces_with_it(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    old = make_tree(prefix)
    (old / "marker-old").write_text("old")
    archive = make_release(tmp_path / "r.tar.xz")

    with pytest.raises(MpSpdzError) as info:
        installer.install(prefix=prefix, archive=archive, out=io.StringIO())
    assert "already holds an MP-SPDZ installation" in str(info.value)
    assert "--force" in str(info.value)
    assert (old / "marker-old").exists()

    mp = installer.install(prefix=prefix, archive=archive, force=True, out=io.StringIO())
    assert not (prefix / "marker-old").exists()
    assert run_binary(mp.binary("semi2k-party.x")) == "semi2k-party.x amd64"
    assert leftovers(tmp_path) == []


def test_install_into_empty_existing_directory(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    prefix.mkdir()
    archive = make_release(tmp_path / "r.tar.xz")
    mp = installer.install(prefix=prefix, archive=archive, out=io.StringIO())
    assert mp.binary("semi2k-party.x").is_file()


def test_force_never_wipes_an_unrelated_directory(tmp_path: Path) -> None:
    prefix = tmp_path / "precious"
    prefix.mkdir()
    (prefix / "thesis.tex").write_text("years of work")
    archive = make_release(tmp_path / "r.tar.xz")
    with pytest.raises(MpSpdzError, match="does not hold an MP-SPDZ installation"):
        installer.install(prefix=prefix, archive=archive, force=True, out=io.StringIO())
    assert (prefix / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize(
    "evil",
    [
        _member("mp-spdz-0.4.2/../evil"),
        _member("../evil"),
        _member("/tmp/evil-absolute"),
        _member("mp-spdz-0.4.2/link", kind=tarfile.SYMTYPE, link="../../evil"),
        _member("mp-spdz-0.4.2/abs", kind=tarfile.SYMTYPE, link="/etc/passwd"),
        _member("mp-spdz-0.4.2/hard", kind=tarfile.LNKTYPE, link="../evil"),
        _member("mp-spdz-0.4.2/dev", kind=tarfile.CHRTYPE),
    ],
    ids=["dotdot-inside", "dotdot", "absolute", "symlink-out", "symlink-abs", "hardlink", "dev"],
)
def test_malicious_archive_rejected_and_nothing_left(evil: tarfile.TarInfo, tmp_path: Path) -> None:
    archive = make_release(tmp_path / "evil.tar.xz", extra=(evil,))
    prefix = tmp_path / "install" / "p"
    with pytest.raises(MpSpdzError, match="unsafe"):
        installer.install(prefix=prefix, archive=archive, out=io.StringIO())
    assert not prefix.exists()
    # not even the parent directory the install made for its scratch directory
    assert not (tmp_path / "install").exists()
    assert not (tmp_path / "evil").exists() and not (tmp_path / "install" / "evil").exists()


def test_link_through_link_rejected(tmp_path: Path) -> None:
    # Each link looks harmless alone; together they point outside.
    chained = (
        _member("mp-spdz-0.4.2/up", kind=tarfile.SYMTYPE, link=".."),
        _member("mp-spdz-0.4.2/up/out", kind=tarfile.SYMTYPE, link="../evil"),
    )
    archive = make_release(tmp_path / "chain.tar.xz", extra=chained)
    prefix = tmp_path / "install" / "p"
    with pytest.raises(MpSpdzError, match="unsafe"):
        installer.install(prefix=prefix, archive=archive, out=io.StringIO())
    assert not (tmp_path / "install").exists()


def test_broken_archive_leaves_existing_install_untouched(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    make_tree(prefix)
    before = sorted(p.relative_to(prefix) for p in prefix.rglob("*"))
    good = make_release(tmp_path / "good.tar.xz").read_bytes()
    broken = tmp_path / "broken.tar.xz"
    broken.write_bytes(good[: len(good) // 2])

    with pytest.raises(MpSpdzError, match="cannot unpack"):
        installer.install(prefix=prefix, archive=broken, force=True, out=io.StringIO())
    assert sorted(p.relative_to(prefix) for p in prefix.rglob("*")) == before
    assert leftovers(tmp_path) == []


def test_failed_verification_leaves_existing_install_untouched(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    make_tree(prefix)
    (prefix / "marker-old").write_text("old")
    source_only = make_release(tmp_path / "src.tar.xz", variants=())
    with pytest.raises(MpSpdzError, match="source-code-only"):
        installer.install(prefix=prefix, archive=source_only, force=True, out=io.StringIO())
    assert (prefix / "marker-old").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("layout", ["two-tops", "no-compile"])
def test_not_a_release(layout: str, tmp_path: Path) -> None:
    archive = tmp_path / "other.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add(tar, "a/readme.txt", b"hi")
        if layout == "two-tops":
            _add(tar, "b/compile.py", b"")
    with pytest.raises(MpSpdzError, match="is not an MP-SPDZ release"):
        installer.install(prefix=tmp_path / "p", archive=archive, out=io.StringIO())
    assert not (tmp_path / "p").exists()


def test_missing_archive_file(tmp_path: Path) -> None:
    with pytest.raises(MpSpdzError, match="does not exist"):
        installer.install(prefix=tmp_path / "p", archive=tmp_path / "nope.tar.xz")


def test_unsupported_host_fails_before_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(installer, "_host", lambda: ("Linux", "aarch64"))
    archive = make_release(tmp_path / "r.tar.xz")
    with pytest.raises(MpSpdzError, match="x86-64 Linux only.*build MP-SPDZ from source"):
        installer.install(prefix=tmp_path / "p", archive=archive, out=io.StringIO())


def test_other_version_installs_with_a_warning(tmp_path: Path) -> None:
    archive = make_release(tmp_path / "r.tar.xz", changelog="## 0.4.1 (Jan 1, 2025)")
    out = io.StringIO()
    mp = installer.install(prefix=tmp_path / "p", archive=archive, out=out)
    assert mp.version == "0.4.1"
    assert "Warning: ltm-harness is tested with MP-SPDZ 0.4.2" in out.getvalue()


# -------------------------------------------------------------------------- CLI


@pytest.fixture
def only_mpspdz_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other command modules are written in parallel; this tests our commands alone.
    monkeypatch.setattr(cli, "_COMMANDS", {name: entry for name, entry in cli._COMMANDS.items()
                                           if entry[0] == "harness.cli.mpspdz"})


@pytest.mark.usefixtures("only_mpspdz_commands")
def test_cli_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(
        ["mpspdz", "install", "--archive", str(tmp_path / "nope.tar.xz"), "--prefix", "x"]
    )
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.usefixtures("only_mpspdz_commands")
def test_cli_install_not_a_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "junk.tar"
    archive.write_bytes(b"this is not a tarball" * 100)
    status = cli.main(["mpspdz", "install", "--archive", str(archive)])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: cannot unpack") and err.count("\n") == 1
    assert not mpspdz.default_home().exists()


@pytest.mark.usefixtures("only_mpspdz_commands", "healthy_env")
def test_cli_install_and_doctor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = make_release(tmp_path / "r.tar.xz")
    assert cli.main(["doctor"]) == 1
    assert "ltm mpspdz install" in capsys.readouterr().out

    assert cli.main(["mpspdz", "install", "--archive", str(archive)]) == 0
    assert "Installed MP-SPDZ 0.4.2" in capsys.readouterr().out

    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "(from default location)" in out and "All required components found." in out

    assert cli.main(["mpspdz", "install", "--archive", str(archive)]) == 1
    assert "--force" in capsys.readouterr().err


@pytest.mark.usefixtures("only_mpspdz_commands")
def test_cli_archive_and_url_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["mpspdz", "install", "--archive", "a", "--url", "http://x"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "not allowed with" in err and err.startswith("ltm: error: ") and err.count("\n") == 1


@pytest.mark.usefixtures("only_mpspdz_commands")
def test_cli_mpspdz_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mpspdz"]) == 1
    assert "install" in capsys.readouterr().out


@pytest.mark.usefixtures("only_mpspdz_commands")
def test_cli_install_downloads_from_the_url_variable(
    http_dir: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served, base = http_dir
    make_release(served / "mirror.tar.xz")
    url = f"{base}/mirror.tar.xz"
    monkeypatch.setenv("LTM_MPSPDZ_URL", url)
    assert cli.main(["mpspdz", "install"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    home = mpspdz.default_home()
    assert first.startswith(f"Downloading {url} (the MP-SPDZ v0.4.2 release, ")
    assert first.endswith(f" MB) into {home}")
    assert json.loads((home / ".ltm-install.json").read_text())["source"] == url


@pytest.mark.usefixtures("only_mpspdz_commands", "healthy_env")
def test_cli_doctor_fix_installs_on_first_use(
    http_dir: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served, base = http_dir
    make_release(served / "r.tar.xz")
    monkeypatch.setenv("LTM_MPSPDZ_URL", f"{base}/r.tar.xz")

    monkeypatch.setenv("LTM_NO_INSTALL", "1")
    assert cli.main(["doctor", "--fix"]) == 1
    assert "MP-SPDZ not found" in capsys.readouterr().out
    assert not mpspdz.default_home().exists()

    monkeypatch.delenv("LTM_NO_INSTALL")
    assert cli.main(["doctor", "--fix"]) == 0
    out = capsys.readouterr().out
    assert f"first use installs it: downloading {base}/r.tar.xz" in out
    assert "All required components found." in out
    assert run_binary(mpspdz.default_home() / "semi2k-party.x") == "semi2k-party.x amd64"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_download_progress_reaches_the_total_on_a_terminal_only(
    terminal: bool, tmp_path: Path, http_dir: tuple[Path, str]
) -> None:
    served, base = http_dir
    big = tarfile.TarInfo("mp-spdz-0.4.2/data")
    big.size = 2_500_000  # three chunks of the download
    archive = make_release(served / "r.tar", compression="", extra=(big,))
    size = archive.stat().st_size
    out = _Terminal() if terminal else io.StringIO()

    mp = installer.install(prefix=tmp_path / "p", url=f"{base}/r.tar", out=out)

    assert run_binary(mp.binary("semi2k-party.x")) == "semi2k-party.x amd64"
    before, found, _ = out.getvalue().partition(f"  downloaded {size / 1e6:.1f} MB\n")
    assert found
    announced, _, progress = before.partition(" MB) into " + str(tmp_path / "p") + "\n")
    assert announced.startswith(f"Downloading {base}/r.tar")
    if terminal:
        # tqdm redraws the bar in place; its last state is the whole file, then a newline.
        states = progress.rstrip("\n").split("\r")[1:]
        total = tqdm.format_sizeof(size, divisor=1000)
        assert len(states) >= 2 and states[0].startswith("  0%")
        assert states[-1].startswith("100%") and f"{total}/{total}" in states[-1]
        assert progress.endswith("\n")
    else:
        assert progress == ""  # a log gets the lines before and after, no bar


def test_install_prints_the_archive_s_digest_and_refuses_a_mismatch_before_unpacking(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    archive = make_release(tmp_path / "mp-spdz-0.4.2.tar.xz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    prefix = tmp_path / "p"
    unpacked: list[Path] = []
    real_extract = release.extract
    monkeypatch.setattr(release, "extract",
                        lambda path, *a: unpacked.append(path) or real_extract(path, *a))
    argv = ["mpspdz", "install", "--archive", str(archive), "--prefix", str(prefix)]

    def refused(*extra: str) -> str:
        assert cli.main([*argv, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith("ltm: error: ") and err.count("\n") == 1, err
        assert not prefix.exists() and unpacked == [] and leftovers(tmp_path) == []
        return err

    wrong = "0" * 64
    err = refused("--sha256", wrong)
    assert f"has sha256 {digest}, not {wrong} (--sha256)" in err and "nothing was unpacked" in err
    monkeypatch.setenv("LTM_MPSPDZ_SHA256", wrong)
    assert f"not {wrong} (LTM_MPSPDZ_SHA256)" in refused()
    assert "64 hexadecimal digits, not 'xyz'" in refused("--sha256", "xyz")
    # the given digest is checked, and said
    monkeypatch.setenv("LTM_MPSPDZ_SHA256", digest.upper())
    assert cli.main(argv) == 0
    assert f"sha256 {digest} (matches LTM_MPSPDZ_SHA256)" in capsys.readouterr().out
    # without one the digest is printed, unchecked
    monkeypatch.delenv("LTM_MPSPDZ_SHA256")
    assert cli.main([*argv, "--force"]) == 0
    assert f"sha256 {digest} (not checked: give --sha256" in capsys.readouterr().out
    assert len(unpacked) == 2
