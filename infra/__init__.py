"""Cloud infrastructure for running the parties on separate machines (`ltm aws ...`).

The public API is :mod:`infra.aws`'s; it is re-exported here so that its
``__all__`` stays the single list of public names.
"""

from __future__ import annotations

from infra import aws as _aws
from infra._pricing import hourly_price
from infra.aws import *  # noqa: F403

__all__ = [*_aws.__all__, "hourly_price"]
