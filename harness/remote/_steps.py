"""Where a server's files lie in its remote working directory, laid out as its local
staging directory (:class:`harness.engine.PartyStaging`)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.engine import party_input_file

__all__ = ["CERT_NAME", "input_file_there", "share_file_there"]

# The parties' certificates and their hash links in Player-Data: public, every party's.
CERT_NAME = re.compile(r"P\d+\.pem|[0-9a-f]{8}\.\d+")


def share_file_there(party: int) -> str:
    """The share file MP-SPDZ reads on server ``party``'s host."""
    return f"Persistence/Transactions-P{party}.data"


def input_file_there(party: int) -> str:
    """Server ``party``'s private input to the MPC on its host (its aggregate, its noise),
    relative to its working directory, as a party here has it in its own."""
    return party_input_file(Path(), party).as_posix()
