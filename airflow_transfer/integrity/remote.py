"""Destination-side digests: the stdlib helper over an exec channel, or coreutils.

docs/integrity.md (after Liu, Jung, Kettimuthu, Sun, Towards Optimizing
Large-Scale Data Transfers with End-to-End Integrity Verification): the destination
digest is computed where the data landed, after it is on disk. First choice
is the long-lived helper (airflow_transfer/remote/checksum_helper.py) started
with python3 over SSH exec (helper_client.py); if python3 is missing there, one
coreutils command per file (`sha256sum -- FILE` and friends, checksummers.py);
only then does the engine read the file back over SFTP. `choose_remote_method`
says which, and why, so the mode used can be reported instead of silently
downgraded.

This module is where the engine takes all of it from: the client, the
checksummers, their requests, results and errors.
"""

from __future__ import annotations

from collections.abc import Collection

from .algorithms import COREUTILS_COMMANDS, algorithm_info
from .checksummers import (
    BareChecksummer,
    CoreutilsChecksummer,
    CoreutilsOutput,
    RunCommand,
    bare_path,
    coreutils_command,
    parse_coreutils_output,
)
from .helper_client import (
    BOOTSTRAP,
    HELPER_NAME,
    ChecksumHelperClient,
    OpenChannel,
    helper_command,
    helper_preamble,
    helper_source,
)
from .remote_errors import (
    HelperUnavailable,
    RemoteChecksumError,
    RemoteFileNotFoundError,
    RemoteIsADirectoryError,
    RemoteOSError,
    RemotePermissionError,
    remote_error,
)
from .remote_results import DigestRequest, PathArg, RemoteDigest


def choose_remote_method(
    algorithm: str, helper_algorithms: Collection[str] | None, coreutils_ok: bool
) -> tuple[str, str]:
    """("helper" | "coreutils" | "sftp-readback", reason) for a destination.

    helper_algorithms: what the helper's hello listed, None when it could not
    start. coreutils_ok: the destination has the matching command.
    """
    name = algorithm_info(algorithm).name
    tool = COREUTILS_COMMANDS.get(name)
    if helper_algorithms is not None and name in helper_algorithms:
        return "helper", f"the python3 helper computes {name} at the destination"
    if tool and coreutils_ok:
        why = "the python3 helper is unavailable" if helper_algorithms is None else f"the helper lacks {name}"
        return "coreutils", f"{why}; {tool} computes it at the destination, one command per file"
    if helper_algorithms is None:
        why = "the python3 helper is unavailable"
    else:
        why = f"the helper lacks {name}"
    return "sftp-readback", (
        f"{why} and coreutils has no usable command for {name}; "
        "the file is read back over SFTP and digested locally (a second transfer)"
    )


__all__ = [
    "BOOTSTRAP",
    "BareChecksummer",
    "ChecksumHelperClient",
    "CoreutilsChecksummer",
    "CoreutilsOutput",
    "DigestRequest",
    "HELPER_NAME",
    "HelperUnavailable",
    "OpenChannel",
    "PathArg",
    "RemoteChecksumError",
    "RemoteDigest",
    "RemoteFileNotFoundError",
    "RemoteIsADirectoryError",
    "RemoteOSError",
    "RemotePermissionError",
    "RunCommand",
    "bare_path",
    "choose_remote_method",
    "coreutils_command",
    "helper_command",
    "helper_preamble",
    "helper_source",
    "parse_coreutils_output",
    "remote_error",
]
