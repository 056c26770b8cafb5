"""The cloud-init script each instance runs once, as root, on first boot.

It installs the harness into a virtualenv owned by the login user and then lets
the harness fetch MP-SPDZ's official release, so a machine is ready for
`ltm` once `cloud-init status --wait` returns.
"""

from __future__ import annotations

import shlex

__all__ = [
    "DEFAULT_HARNESS_SPEC",
    "LOGIN_USER",
    "READY_MARKER",
    "REMOTE_MP_SPDZ",
    "render_user_data",
]

DEFAULT_HARNESS_SPEC = "ltm-harness"
LOGIN_USER = "ubuntu"
# Given explicitly to `ltm mpspdz install`, as the inventory records this path.
REMOTE_MP_SPDZ = f"/home/{LOGIN_USER}/.local/share/ltm-harness/mp-spdz"
READY_MARKER = "/var/lib/ltm-harness/ready"

_TEMPLATE = """\
#!/bin/bash
# Written by `ltm aws up`. Progress: /var/log/cloud-init-output.log
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -y
# git: so that --harness-spec may name a git URL; openssl: MP-SPDZ's certificates.
apt-get install -y python3-venv python3-pip git openssl
sudo -u {user} -H bash -euxo pipefail <<'LTM_AS_USER'
venv="$HOME/.local/share/ltm-harness/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --upgrade pip
"$venv/bin/pip" install {spec}
mkdir -p "$HOME/.local/bin"
ln -sf "$venv/bin/ltm" "$HOME/.local/bin/ltm"
"$venv/bin/ltm" mpspdz install --prefix {mp_spdz}
LTM_AS_USER
mkdir -p "$(dirname {marker})"
touch {marker}
"""


def render_user_data(harness_spec: str = DEFAULT_HARNESS_SPEC, *, user: str = LOGIN_USER,
                     mp_spdz: str = REMOTE_MP_SPDZ) -> str:
    """The shell script; ``harness_spec`` is anything pip accepts (a version pin, a git URL)."""
    # Quoted so that a spec such as "ltm-harness>=0.2" is not read as a redirection.
    return _TEMPLATE.format(user=shlex.quote(user), spec=shlex.quote(harness_spec),
                            mp_spdz=shlex.quote(mp_spdz), marker=shlex.quote(READY_MARKER))
