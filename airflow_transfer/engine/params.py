"""The three knobs of a transfer (docs/transfers.md, docs/concepts.md) and their validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import UsageError

# SFTP servers (OpenSSH among them) accept requests up to 256 KiB; 255 KiB
# leaves room for the packet header and matches OpenSSH's advertised limits.
DEFAULT_BLOCK_SIZE = 255 * 1024


@dataclass(frozen=True)
class TransferParams:
    """Pipelining, parallelism and concurrency for one chunk.

    pp: file operations kept outstanding on one connection.
    p:  separate connections writing byte ranges of one file.
    cc: connections moving different files at the same time.
    block_size: bytes per read/write request (0 = backend default).
    tcp_buffer: socket buffer in bytes (0 = kernel default / autotuning).
    """

    pp: int = 1
    p: int = 1
    cc: int = 1
    block_size: int = 0
    tcp_buffer: int = 0

    def __post_init__(self) -> None:
        for name in ("pp", "p", "cc"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1 (got {value!r}); use 1 to turn {name} off")
        for name in ("block_size", "tcp_buffer"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of bytes >= 0 (got {value!r})")

    def as_dict(self) -> dict:
        return asdict(self)


def check_params(pp: int, p: int, cc: int) -> TransferParams:
    """TransferParams from user input, or a UsageError saying what to give instead."""
    try:
        return TransferParams(pp=pp, p=p, cc=cc)
    except ValueError as exc:
        raise UsageError(str(exc), "", "give pp, parallelism and concurrency as whole numbers >= 1") from exc
