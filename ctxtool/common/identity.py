"""Who wrote a row of usage: the user and the machine a team's dataset groups by (``--by user|machine``).

Owns: where they come from (an option, else ``CTXTOOL_USER`` and ``CTXTOOL_MACHINE``, else the login and the
host name). Must not import anything of ctxtool but its errors.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from ctxtool.common.errors import UsageError


@dataclass(frozen=True, slots=True)
class Identity:
    """Who wrote a row: ``user`` is a column of every table, ``machine`` the partition its objects are in."""

    user: str
    machine: str


def identity(
    user: str | None = None, machine: str | None = None, env: Mapping[str, str] | None = None
) -> Identity:
    """``--user`` and ``--machine``, else ``CTXTOOL_USER`` and ``CTXTOOL_MACHINE``, else login, host name."""
    env = os.environ if env is None else env
    u = user or env.get("CTXTOOL_USER") or _login()
    m = machine or env.get("CTXTOOL_MACHINE") or socket.gethostname() or "unknown"
    for what, value in (("--user", u), ("--machine", m)):
        if not value.strip() or any(ord(c) < 0x20 for c in value):
            raise UsageError(
                f"{what} {value!r} is not a name", f"Pass a name without control characters to {what}"
            )
    return Identity(u, m)


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no such user in the password database (a container's uid)
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"
