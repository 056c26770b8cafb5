"""The MP-SPDZ protocols the harness runs: one source of truth for each.

A protocol fixes the party binary, the party counts it supports, its threat
model, and the share format its parties read from ``Persistence/`` (``None``
when clients cannot write its share files). Everything that starts parties,
locally or over SSH, looks the binary up here.

The security claims (who may be corrupted, semi-honest or malicious) are
MP-SPDZ's own, from its documentation's protocol overview; the docs' Protocols page
(docs/concepts/protocols.md) says what they mean for this computation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.clients import ADDITIVE, MALICIOUS_REPLICATED, REPLICATED, ShareFormat
from harness.errors import InputError

__all__ = ["DEFAULT_PROTOCOL", "PROTOCOLS", "Protocol", "binaries", "build_refusal",
           "detected_tampering", "protocol_for", "unusable_reason"]


@dataclass(frozen=True)
class Protocol:
    name: str
    binary: str
    malicious: bool  # security against malicious (actively cheating) servers
    majority: str  # "dishonest": any S-1 may collude; "honest": at most one of three
    share_format: ShareFormat | None  # None: clients cannot write its share files
    exact_parties: int | None = None
    # Why clients cannot write its share files, for the one-line refusal.
    no_client_shares: str = ""
    # MP-SPDZ converts its shares to binary locally (the compiler's -Z, "split"),
    # which makes edaBits, hence the central mechanism's coins, cheaper.
    splits: bool = False

    def corrupt(self, parties: int) -> int:
        """The most servers that may collude in its threat model (t)."""
        return parties - 1 if self.majority == "dishonest" else (parties - 1) // 2

    def split_args(self, parties: int) -> tuple[str, ...]:
        """The compiler's ``-Z S`` where the protocol converts shares locally."""
        return ("-Z", str(parties)) if self.splits else ()

    def party_count_args(self, parties: int) -> list[str]:
        """``-N S`` for the binaries that take it; the three-party ones reject it."""
        return [] if self.exact_parties is not None else ["-N", str(parties)]

    @property
    def model(self) -> str:
        return "malicious" if self.malicious else "semi-honest"

    def check_parties(self, parties: int) -> None:
        if self.exact_parties is not None and parties != self.exact_parties:
            raise InputError(f"--protocol {self.name} runs with exactly {self.exact_parties} "
                             f"parties, got {parties}; set --parties {self.exact_parties} or "
                             "use --protocol semi2k")
        if parties < 2:
            raise InputError(f"--protocol {self.name} needs at least 2 parties, got {parties};"
                             " set --parties")


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("semi2k", "semi2k-party.x", False, "dishonest", ADDITIVE, splits=True),
    Protocol("replicated-ring", "replicated-ring-party.x", False, "honest", REPLICATED,
             exact_parties=3, splits=True),
    Protocol("ps-rep-ring", "ps-rep-ring-party.x", True, "honest", REPLICATED,
             exact_parties=3, splits=True),
    Protocol("malicious-rep-ring", "malicious-rep-ring-party.x", True, "honest",
             MALICIOUS_REPLICATED, exact_parties=3),
    Protocol("spdz2k", "spdz2k-party.x", True, "dishonest", None,
             no_client_shares="spdz2k's shares carry MACs under a key no client knows, so "
                              "clients cannot write its share files"),
)}
DEFAULT_PROTOCOL = "semi2k"

# What MP-SPDZ v0.4.2 prints when a malicious protocol's check fails: the
# replicated protocols' hash check of opened values (MaliciousRepMC), and the
# MAC check of the SPDZ family (mac_fail's default text).
_DETECTION = re.compile(r"check hash mismatch|MacCheck Failure|MAC check fail", re.I)


def protocol_for(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise InputError(f"unknown --protocol {name!r}; choose one of "
                         f"{', '.join(PROTOCOLS)}") from None


def binaries() -> tuple[str, ...]:
    return tuple(p.binary for p in PROTOCOLS.values())


def detected_tampering(stderr: str) -> str | None:
    """MP-SPDZ's own words when a party aborted on a failed integrity check, else None."""
    found = _DETECTION.search(stderr)
    return found.group(0) if found else None


# MP-SPDZ v0.4.2 built with USE_KOS = 1 (KOS15 OT extension instead of libOTe's
# SoftSpoken) but without -DINSECURE refuses every protocol that needs OT for
# its preprocessing (here: spdz2k) at run time, with this sentence.
_REFUSAL = "You are trying to use insecure benchmarking functionality"
_NEEDS_OT = ("spdz2k",)


def build_refusal(protocol: str, binary_path: object, stderr: str) -> str | None:
    """One line on why this MP-SPDZ build refused to run ``protocol``, else None."""
    if _REFUSAL not in (stderr or ""):
        return None
    return (f"MP-SPDZ's {binary_path} refuses to run {protocol}: this build uses KOS15 OT "
            "extension (USE_KOS = 1), which MP-SPDZ v0.4.2 only runs when compiled with "
            "-DINSECURE; install the official release (`ltm mpspdz install`), whose "
            f"{protocol} uses SoftSpoken OT, or rebuild MP-SPDZ without USE_KOS")


def unusable_reason(protocol: str, root: Path) -> str | None:
    """Why a present binary of ``protocol`` in ``root`` cannot run, judged from the build."""
    if protocol not in _NEEDS_OT:
        return None
    try:
        config = (root / "CONFIG.mine").read_text(errors="replace")
    except OSError:
        return None  # the official release has no CONFIG.mine: built with SoftSpoken
    kos = re.search(r"^\s*USE_KOS\s*=\s*1\s*$", config, re.M)
    if kos and "-DINSECURE" not in config:
        return ("this source build has USE_KOS = 1 without -DINSECURE, so MP-SPDZ refuses "
                "its OT extension at run time; use the official release (`ltm mpspdz install`)")
    return None
