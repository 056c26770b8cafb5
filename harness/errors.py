"""Error types. Every error a user can cause is an :class:`LtmError`.

The CLI prints an ``LtmError`` as one line and exits with status 1; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class LtmError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class InputError(LtmError):
    """Bad parameters or data."""


class MpSpdzError(LtmError):
    """MP-SPDZ is missing, incomplete, or failed to compile a program."""


class PartyError(LtmError):
    """A party process failed, timed out or was killed.

    Carries what is needed to diagnose it without rerunning: the party, its
    exit status, and its captured output.
    """

    def __init__(
        self,
        message: str,
        *,
        party: int | str | None = None,
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        self.party = party
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = stderr_tail(stderr)
        super().__init__(f"{message}\n{tail}" if tail else message)


class VerificationError(LtmError):
    """The revealed sketch differs from the plaintext computation."""


def stderr_tail(text: str, lines: int = 8) -> str:
    """The last non-empty lines of a party's stderr, indented for display."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept)
