"""First use: `ltm run` and the test suite install MP-SPDZ when nothing is configured.

The release comes from a local HTTP server on 127.0.0.1 (``LTM_MPSPDZ_URL``)
serving a release-shaped tarball of this machine's real binaries; ``HOME`` is an
empty directory, so the real default location is never read or written.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from harness import cli
from harness.engine import installer, mpspdz
from harness.engine.mpspdz import SUPPORTED_VERSION, MpSpdz

pytestmark = pytest.mark.mpspdz

REPO = Path(__file__).resolve().parents[2]
RELEASE = f"mp-spdz-{SUPPORTED_VERSION}.tar"


def _bundled_libraries(binary: Path, root: Path) -> list[Path]:
    """Libraries of a source build that the binary loads from its own tree.

    The official release links them statically; a fake release must carry them.
    """
    listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    found = []
    for line in listing.splitlines():
        _, arrow, rest = line.partition("=>")
        path = Path(rest.split("(")[0].strip()) if arrow else None
        if path and path.is_file() and path.resolve().is_relative_to(root.resolve()):
            found.append(path)
    return found


def make_release(real: MpSpdz, dest: Path) -> Path:
    """The official release's layout, holding this machine's real MP-SPDZ."""
    top = f"mp-spdz-{SUPPORTED_VERSION}"
    binary = real.binary("semi2k-party.x")
    files = [binary, *_bundled_libraries(binary, real.root)]
    # Uncompressed: the installer takes plain tar too, and packing stays fast.
    with tarfile.open(dest, "w") as tar:
        tar.add(real.compiler, f"{top}/compile.py")
        tar.add(real.root / "CHANGELOG.md", f"{top}/CHANGELOG.md")
        tar.add(real.root / "Compiler", f"{top}/Compiler",
                filter=lambda info: None if "__pycache__" in info.name else info)
        for variant in ("amd64", "adx"):
            for path in files:
                tar.add(path, f"{top}/bin/Linux-{variant}/{path.name}")
    return dest


class _Server(http.server.ThreadingHTTPServer):
    requests: list[str]


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self.server.requests.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def release_server(mp_spdz: MpSpdz, tmp_path_factory) -> Iterator[tuple[str, _Server, Path]]:
    """(URL of the release, the server, the tarball) on 127.0.0.1."""
    served = tmp_path_factory.mktemp("served")
    archive = make_release(mp_spdz, served / RELEASE)
    server = _Server(("127.0.0.1", 0), partial(_CountingHandler, directory=str(served)))
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{RELEASE}", server, archive
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/{RELEASE}"


def _fresh_env(home: Path, url: str) -> dict[str, str]:
    """A new user's environment: empty HOME, nothing configured, the release at ``url``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "MP_SPDZ_HOME", "LTM_NO_INSTALL")}
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), LTM_MPSPDZ_URL=url, no_proxy="*", PYTHONPATH=str(REPO))
    return env


def _default_location(home: Path) -> Path:
    return home / ".local/share/ltm-harness/mp-spdz"


def _leftovers(home: Path) -> list[str]:
    parent = _default_location(home).parent
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as a new user: empty HOME, nothing configured."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LTM_MPSPDZ_URL", _closed_port_url())
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # for the child processes
    for key in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "MP_SPDZ_HOME", "LTM_NO_INSTALL"):
        monkeypatch.delenv(key, raising=False)
    assert mpspdz.default_home() == _default_location(home)
    return home


# ------------------------------------------------------------------ end to end


def test_first_run_installs_the_release_then_runs_verified(
    release_server: tuple[str, _Server, Path], tmp_path: Path
) -> None:
    url, server, archive = release_server
    home = tmp_path / "home"
    out = tmp_path / "run"
    before = len(server.requests)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--clients", "200", "--rows", "10",
         "--dim", "2", "--seed", "3", "--out", str(out)],
        cwd=tmp_path, env=_fresh_env(home, url), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr

    target = _default_location(home)
    size = f"{archive.stat().st_size / 1e6:.1f} MB"
    assert proc.stderr.splitlines()[0] == (
        f"MP-SPDZ is not installed, so this first use installs it: downloading {url} "
        f"(the MP-SPDZ v{SUPPORTED_VERSION} release, {size}) into {target} "
        "(--no-install or LTM_NO_INSTALL=1 turns this off)")
    assert server.requests[before:] == [f"/{RELEASE}"]
    assert json.loads((target / ".ltm-install.json").read_text())["source"] == url
    result = json.loads((out / "result.json").read_text())
    assert result["verification"]["ok"] is True
    assert result["metadata"]["mp_spdz"]["root"] == str(target)
    assert result["metadata"]["mp_spdz_version"] == SUPPORTED_VERSION
    assert _leftovers(home) == ["mp-spdz"]


_SESSION_TEST = '''
from harness.engine.mpspdz import default_home


def test_engine_is_there(mp_spdz):
    assert mp_spdz.root == default_home()
    assert mp_spdz.binary("semi2k-party.x").is_file()
'''


@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_pytest_session_installs_before_the_first_mpspdz_test(
    release_server: tuple[str, _Server, Path], tmp_path: Path, online: bool
) -> None:
    url = release_server[0] if online else _closed_port_url()
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    shutil.copy(REPO / "tests" / "_buffers.py", suite / "_buffers.py")  # the conftest imports it
    (suite / "test_engine.py").write_text(_SESSION_TEST)
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(suite)],
        cwd=tmp_path, env=_fresh_env(home, url), capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr

    if online:
        assert proc.returncode == 0, output
        assert "1 passed" in output
        assert (_default_location(home) / ".ltm-install.json").is_file()
        return
    assert proc.returncode == 1, output
    assert "1 error" in output and "skipped" not in output
    assert "Traceback" not in output and "During handling" not in output
    [line] = [ln for ln in output.splitlines() if "MP-SPDZ is required" in ln][:1]
    assert f"download of {url} failed" in line
    for alternative in ("ltm mpspdz install --archive FILE", "from source", "MP_SPDZ_HOME"):
        assert alternative in line
    assert _leftovers(home) == []


# ------------------------------------------------------------------ the CLI's choices


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: ") and err.count("\n") == 1, err
    return err


SMALL_RUN = ["run", "--clients", "200", "--rows", "10"]
SMALL_REPRODUCE = ["reproduce", "table4", "--repeat", "1", "--scale", "0.001"]


@pytest.mark.parametrize("command", [SMALL_RUN, SMALL_REPRODUCE], ids=["run", "reproduce"])
def test_offline_first_use_is_one_line_naming_the_alternatives(
    fresh_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    url = os.environ["LTM_MPSPDZ_URL"]
    out = tmp_path / "out"
    assert cli.main([*command, "--out", str(out)]) == 1
    err = _one_line_error(capsys)
    assert f"download of {url} failed" in err
    assert "`ltm mpspdz install --archive FILE`" in err
    assert f"from source into {_default_location(fresh_home)} per its README" in err
    assert "set MP_SPDZ_HOME to an existing MP-SPDZ directory" in err
    assert _leftovers(fresh_home) == []
    assert not out.exists()


@pytest.mark.parametrize("how", ["--no-install", "LTM_NO_INSTALL=1"])
@pytest.mark.parametrize("command", [SMALL_RUN, SMALL_REPRODUCE], ids=["run", "reproduce"])
def test_no_install_gives_the_not_found_error(
    fresh_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, release_server: tuple[str, _Server, Path],
    command: list[str], how: str,
) -> None:
    url, server, _ = release_server
    monkeypatch.setenv("LTM_MPSPDZ_URL", url)
    before = len(server.requests)
    args = [*command, "--out", str(tmp_path / "out")]
    if how == "--no-install":
        args.append(how)
    else:
        monkeypatch.setenv("LTM_NO_INSTALL", "1")
    assert cli.main(args) == 1
    err = _one_line_error(capsys)
    assert f"MP-SPDZ not found: {_default_location(fresh_home)} (from default location)" in err
    assert server.requests[before:] == []
    assert _leftovers(fresh_home) == []


@pytest.mark.parametrize("how", ["--mp-spdz", "MP_SPDZ_HOME"])
def test_explicit_location_pointing_at_nothing_never_installs(
    fresh_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, release_server: tuple[str, _Server, Path], how: str,
) -> None:
    url, server, _ = release_server
    monkeypatch.setenv("LTM_MPSPDZ_URL", url)
    before = len(server.requests)
    missing = tmp_path / "no-such-mp-spdz"
    args = [*SMALL_RUN, "--out", str(tmp_path / "out")]
    if how == "--mp-spdz":
        args += ["--mp-spdz", str(missing)]
    else:
        monkeypatch.setenv("MP_SPDZ_HOME", str(missing))
    assert cli.main(args) == 1
    assert f"MP-SPDZ not found: {missing} (from {how}) does not exist" in _one_line_error(capsys)
    assert server.requests[before:] == []
    assert not missing.exists() and _leftovers(fresh_home) == []


def test_second_first_use_waits_for_the_install_under_way(
    fresh_home: Path, release_server: tuple[str, _Server, Path]
) -> None:
    """A second process waits on the lock and then uses what the first installed."""
    archive = release_server[2]
    target = mpspdz.default_home()
    # The child's URL is a closed port: it can only succeed without downloading.
    child_code = "from harness.engine import ensure_mpspdz; print(ensure_mpspdz().root)"
    with installer._install_lock(target, io.StringIO()):
        child = subprocess.Popen([sys.executable, "-c", child_code], env=dict(os.environ),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Blocks until the child reports that it waits, so the install below
            # certainly happens while the child is waiting on the lock.
            waiting = child.stderr.readline()
            assert waiting == f"Waiting for another process installing MP-SPDZ into {target}\n"
            installer._install(target, archive, "", False, io.StringIO())
        except BaseException:
            child.kill()
            raise
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr
    assert stdout.strip() == str(target)
    assert "download" not in stderr.lower()
