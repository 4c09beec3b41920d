"""What an SFTP server can do, found out once per server and stated in the copy's summary.

Servers other than OpenSSH's differ in ways that decide whether a copy is
correct, not just how fast it is: some cannot write at an arbitrary offset
(rclone without a VFS cache writes files strictly in order), some answer a
large READ with a few KiB, some run no commands over SSH exec, and the
OpenSSH extensions (posix-rename, fsync, statvfs) may be missing. Each
decision the engine takes about a missing capability is written down here
with its true reason, and the summary carries it (`server`, `tuning.notes`).
"""

from __future__ import annotations

import posixpath
import threading
from dataclasses import dataclass, field

from ..paths import TEMP_SUFFIX
from . import sftp_wire as w

# The offset-write probe's file: hidden and with the temporary suffix, like every file the engine
# writes before it is complete.
PROBE_NAME = f".airflow-transfer-probe{TEMP_SUFFIX}"
POSIX_RENAME = "posix-rename@openssh.com"
FSYNC = "fsync@openssh.com"
STATVFS = "statvfs@openssh.com"


@dataclass
class ServerCapabilities:
    """One server's capabilities. `None` means not found out (the copy never needed to know)."""

    extensions: tuple[str, ...] | None = None  # from the SFTP version reply
    offset_writes: bool | None = None  # a WRITE may land past the file's current end
    offset_writes_error: str = ""  # what the server said when it refused one
    short_reads: int = 0  # READ replies shorter than asked, before the file's end
    exec_method: str | None = None  # how the destination's digests were computed
    exec_reason: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def saw_extensions(self, extensions: dict[str, str]) -> None:
        if self.extensions is None:
            self.extensions = tuple(sorted(extensions))

    def has(self, extension: str) -> bool | None:
        return None if self.extensions is None else extension in self.extensions

    def probe_offset_writes(self, wire: w.SFTPWire, directory: str) -> bool:
        """Whether the server accepts a WRITE beyond the file's current end (p > 1 and resumed
        uploads need it). Found out once, with a one-byte file created and removed in
        `directory`: two round trips.

        The file has one name per directory, a temporary one (PROBE_NAME): a connection lost
        between its creation and its removal leaves it as a temporary file, never under a final
        name, and the next probe in that directory truncates and removes it."""
        with self._lock:
            if self.offset_writes is not None:
                return self.offset_writes
            path = posixpath.join(directory, PROBE_NAME)
            t, r = wire.call(w.OPEN, wire.p_open(path, w.FXF_WRITE | w.FXF_CREAT | w.FXF_TRUNC, w.Attrs(mode=0o600)))
            handle = wire.expect_handle(t, r, path)
            replies: dict[str, tuple[int, w.Reader]] = {}
            # Offset 1 of an empty file: what a second range of a split file, or a resumed
            # upload, asks of the server. Written, closed and removed in one round trip.
            wire.send(
                w.WRITE, wire.p_write_head(handle, 1, 1), lambda t, r: replies.__setitem__("write", (t, r)), b"\0"
            )
            wire.send(w.CLOSE, wire.p_handle(handle), lambda t, r: None)
            wire.send(w.REMOVE, wire.p_path(path), lambda t, r: None)
            while wire.outstanding:
                wire.pump(block=True)
            try:
                t, r = replies["write"]
                wire.expect_status(t, r, path)
                self.offset_writes = True
            except OSError as exc:
                self.offset_writes, self.offset_writes_error = False, str(exc)
            return self.offset_writes

    def summary(self) -> dict:
        """The `server` object of the copy's summary."""
        out: dict = {
            "offset_writes": self.offset_writes,
            "short_reads": self.short_reads > 0,
            "posix_rename": self.has(POSIX_RENAME),
            "fsync": self.has(FSYNC),
            "statvfs": self.has(STATVFS),
            "exec": self.exec_method,
        }
        if self.extensions is not None:
            out["extensions"] = list(self.extensions)
        return out

    def notes(self) -> list[str]:
        """One line per decision a missing capability forced, with its reason."""
        out = []
        if self.offset_writes is False:
            out.append(
                "the server does not accept writes at an offset "
                f"({self.offset_writes_error or 'refused'}): p = 1 for every file, "
                "and an interrupted upload is sent again from its first byte"
            )
        if self.short_reads:
            out.append(
                f"the server answered {self.short_reads} reads with fewer bytes than asked: "
                "the rest was asked for again, and a resume starts after the bytes known to be in place"
            )
        if self.has(STATVFS) is False:
            out.append("the server lacks statvfs: a full disk shows as the server's generic failure")
        if self.has(POSIX_RENAME) is False:
            out.append(
                "the server lacks posix-rename: a file that replaces an existing one is renamed "
                "after removing the old one (not atomic)"
            )
        return out


__all__ = ["FSYNC", "POSIX_RENAME", "STATVFS", "ServerCapabilities"]
