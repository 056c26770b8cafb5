"""The cloud-init script each instance runs once, as root, on first boot.

It installs OS packages only: Python with venv for the harness, and the
shared libraries a source build of MP-SPDZ links. The harness and MP-SPDZ come
afterwards from `ltm hosts setup` (run by `ltm aws up`), which uploads a wheel
of the harness that runs on the caller's machine, so nothing needs to be
published on a package index. Only with ``--harness-spec`` (a version that is
published, or a git URL) does the instance pip-install the harness itself, as
before. The marker file tells `ltm aws up` that the packages are there.
"""

from __future__ import annotations

import shlex

__all__ = [
    "LOGIN_USER",
    "OS_PACKAGES",
    "READY_MARKER",
    "REMOTE_MP_SPDZ",
    "render_user_data",
]

LOGIN_USER = "ubuntu"
# Given explicitly to `ltm mpspdz install`, as the inventory records this path.
REMOTE_MP_SPDZ = f"/home/{LOGIN_USER}/.local/share/ltm-harness/mp-spdz"
READY_MARKER = "/var/lib/ltm-harness/ready"
# python3-venv: the harness's venv; openssl: MP-SPDZ's certificates; git: so that
# --harness-spec may name a git URL; the libraries: what a source build of MP-SPDZ
# links (`ltm hosts setup --mp-spdz local` names any that is still missing).
OS_PACKAGES = ("python3-venv", "python3-pip", "git", "openssl", "libsodium23", "libgmpxx4ldbl")

_TEMPLATE = """\
#!/bin/bash
# Written by `ltm aws up`. Progress: /var/log/cloud-init-output.log
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -y
apt-get install -y {packages}
{harness}mkdir -p "$(dirname {marker})"
touch {marker}
"""

# Only with --harness-spec: a published harness, installed by the instance itself.
_PUBLISHED = """\
sudo -u {user} -H bash -euxo pipefail <<'LTM_AS_USER'
venv="$HOME/.local/share/ltm-harness/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --upgrade pip
"$venv/bin/pip" install {spec}
mkdir -p "$HOME/.local/bin"
ln -sf "$venv/bin/ltm" "$HOME/.local/bin/ltm"
"$venv/bin/ltm" mpspdz install --prefix {mp_spdz}
LTM_AS_USER
"""


def render_user_data(harness_spec: str | None = None, *, user: str = LOGIN_USER,
                     mp_spdz: str = REMOTE_MP_SPDZ) -> str:
    """The shell script: OS packages, plus pip-installing ``harness_spec`` if given."""
    harness = ""
    if harness_spec is not None:
        # Quoted so that a spec such as "ltm-harness>=0.2" is not read as a redirection.
        harness = _PUBLISHED.format(user=shlex.quote(user), spec=shlex.quote(harness_spec),
                                    mp_spdz=shlex.quote(mp_spdz))
    return _TEMPLATE.format(packages=" ".join(OS_PACKAGES), harness=harness,
                            marker=shlex.quote(READY_MARKER))
