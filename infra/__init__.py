"""Cloud infrastructure for running the parties on separate machines (`ltm aws ...`).

Installed as ``harness.infra`` (the folder stays ``infra/`` in the repository;
pyproject.toml maps it), so an installed harness never claims a top-level
``infra`` package. Modules inside import each other relatively, which works
under either name.

May import: the top-level shared modules and :mod:`harness.remote` (the hosts
inventory it writes, the host keys it records, the setup it runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from ._pricing import hourly_price
    from .aws.lookup import status
    from .aws.provision import up
    from .aws.session import Aborted, AwsError, aws_errors, make_session
    from .aws.state import (
        DEFAULT_CLUSTER,
        DEFAULT_INSTANCE_TYPE,
        DEFAULT_VOLUME_GB,
        MAX_CLIENT_HOSTS,
        MPC_PORT_SPAN,
        PLACEMENT_STRATEGIES,
        ClusterStatus,
        DownResult,
        UpOptions,
        UpResult,
        default_state_dir,
    )
    from .aws.teardown import down

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_INSTANCE_TYPE",
    "DEFAULT_VOLUME_GB",
    "MAX_CLIENT_HOSTS",
    "MPC_PORT_SPAN",
    "PLACEMENT_STRATEGIES",
    "Aborted",
    "AwsError",
    "ClusterStatus",
    "DownResult",
    "UpOptions",
    "UpResult",
    "aws_errors",
    "default_state_dir",
    "down",
    "hourly_price",
    "make_session",
    "status",
    "up",
]

lazy_package(__name__)
