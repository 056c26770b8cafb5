"""Talking to AWS and to the user: sessions, one-line errors, the yes/no question,
and the caller's address for the SSH rule.
"""

from __future__ import annotations

import ipaddress
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from harness.errors import InputError, LtmError

from .state import Ask

__all__ = [
    "CHECKIP_URL",
    "Aborted",
    "AwsError",
    "aws_errors",
    "caller_cidr",
    "confirm",
    "error_code",
    "make_session",
    "normalise_cidr",
    "region_of",
    "say",
]

CHECKIP_URL = "https://checkip.amazonaws.com"


class AwsError(LtmError):
    """AWS refused a request, or could not be reached or authenticated against."""


class Aborted(LtmError):
    """The user declined the confirmation question."""


def say(message: str) -> None:
    print(message, flush=True)


# --- sessions, errors, questions --------------------------------------------

def make_session(profile: str | None = None, region: str | None = None) -> Any:
    """A boto3 session from the standard AWS configuration (profile, env, config files)."""
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound:
        raise AwsError(f"no AWS profile named {profile!r}; check --profile against "
                       "~/.aws/config") from None


def region_of(session: Any) -> str:
    if not session.region_name:
        raise InputError("no AWS region configured: pass --region, set AWS_DEFAULT_REGION, "
                         "or give your profile a region")
    return str(session.region_name)


_ERROR_HINTS = {
    "UnauthorizedOperation": "your AWS credentials lack the EC2 permission for this",
    "AuthFailure": "AWS rejected the credentials; check your profile or keys",
    "VcpuLimitExceeded": "ask AWS for a higher vCPU limit, or use fewer or smaller instances",
    "InsufficientInstanceCapacity": "try again later, or another --instance-type or --region",
    "InvalidAMIID.NotFound": "check --ami exists in this region",
}


@contextmanager
def aws_errors() -> Iterator[None]:
    """Turn boto3's exceptions into one-line AwsErrors for the CLI."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        NoRegionError,
        WaiterError,
    )

    try:
        yield
    except ClientError as exc:
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        hint = _ERROR_HINTS.get(code)
        raise AwsError(f"AWS refused {exc.operation_name}: {code}: {message}"
                       + (f"; {hint}" if hint else "")) from None
    except NoCredentialsError:
        raise AwsError("no AWS credentials found: configure a profile (--profile) or set "
                       "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") from None
    except NoRegionError:
        raise InputError("no AWS region configured: pass --region or set "
                         "AWS_DEFAULT_REGION") from None
    except WaiterError as exc:
        raise AwsError(f"gave up waiting: {exc}") from None
    except BotoCoreError as exc:
        raise AwsError(f"AWS request failed: {exc}") from None


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def confirm(question: str, *, assume_yes: bool, ask: Ask = input,
            stdin: TextIO | None = None) -> bool:
    """Ask a yes/no question; refuse (InputError) when there is no terminal to ask on."""
    if assume_yes:
        return True
    stream = sys.stdin if stdin is None else stdin
    try:
        interactive = stream is not None and stream.isatty()
    except (AttributeError, OSError, ValueError):
        interactive = False
    if not interactive:
        raise InputError(f"{question} needs a yes, but there is no terminal to ask on; "
                         "pass --yes to go ahead")
    try:
        answer = ask(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


# --- the caller's address ------------------------------------------------------

def normalise_cidr(text: str) -> str:
    """An IPv4 address or network as CIDR; a bare address becomes a /32."""
    try:
        network = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise InputError(f"--ssh-cidr {text!r} is not an IPv4 address or network; "
                         "give e.g. 203.0.113.7/32") from None
    if network.version != 4:
        raise InputError(f"--ssh-cidr {text!r} is IPv6; the security group is IPv4 only: "
                         "give your public IPv4 address")
    if network.prefixlen == 0:
        raise InputError("--ssh-cidr 0.0.0.0/0 would open SSH to the whole internet; "
                         "give your own address as a /32")
    return str(network)


def caller_cidr(url: str = CHECKIP_URL, timeout: float = 5.0) -> str:
    """This machine's public IPv4 address as a /32, as AWS's checkip service sees it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read(64).decode("ascii", "replace").strip()
        address = ipaddress.IPv4Address(text)
    except (OSError, ValueError) as exc:
        raise LtmError(f"could not learn your public IP address from {url} ({exc}); "
                       "pass --ssh-cidr ADDRESS/32") from None
    return f"{address}/32"

