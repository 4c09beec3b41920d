"""One profiler run on one host: `python3 - ARGS` with the profiler's file on stdin.

Locally that is a subprocess of this interpreter (-I -S: standard library
only, exactly what a bare remote host has); on an SSH host it is an exec
channel of one authenticated connection (host key checked, as for
transfers). Nothing is installed or left on the remote host.
"""

from __future__ import annotations

import json
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import profilers

from ..errors import ConnectError, TransferError
from ..protocols.ssh import open_transport
from .hosts import ProfileHost

REMOTE_PYTHON = "python3"
EXIT_NOT_FOUND = 127


def profiler_source(name: str) -> bytes:
    if name not in ("disk", "memory", "network"):
        raise ValueError(f"no profiler named {name!r}")
    return (Path(profilers.__file__).resolve().parent / f"{name}.py").read_bytes()


def parse_output(host: ProfileHost, name: str, status: int, out: bytes, err: bytes) -> dict[str, Any]:
    """The profiler's one JSON object, or a one-line error saying what went wrong on which host."""
    lines = [line for line in out.decode("utf-8", "replace").splitlines() if line.strip()]
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = None
        if isinstance(result, dict):
            return result
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {status}"]
    if status == EXIT_NOT_FOUND:
        raise TransferError(
            f"no python3 on {host.key} ({tail[0]})",
            host.key,
            "install python3 (3.8 or later) on that host: the profilers need nothing else",
        )
    raise TransferError(
        f"the {name} profiler printed no result on {host.key}: {tail[0]}",
        host.key,
        "run it by hand there: python3 - < profilers/" + name + ".py",
    )


class HostRunner:
    """Runs profilers on one host; keeps one SSH connection for all of them. Close it (or use `with`)."""

    def __init__(self, host: ProfileHost) -> None:
        self.host = host
        self._transport = None
        self._lock = threading.Lock()

    def __enter__(self) -> HostRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    @property
    def transport(self):
        """The SSH transport (opened on first use); ConnectError/AuthError/HostKeyError when unreachable."""
        with self._lock:
            if self._transport is None or not self._transport.is_active():
                self._transport = open_transport(self.host.ssh)
            return self._transport

    def run(self, name: str, args: list[str], timeout: float = 300.0) -> dict[str, Any]:
        """Run profiler `name` with `args` to completion; returns its JSON object."""
        source = profiler_source(name)
        if self.host.is_local:
            proc = subprocess.run(
                [sys.executable, "-I", "-S", "-", *args],
                input=source,
                capture_output=True,
                timeout=timeout,
                cwd=tempfile.gettempdir(),
            )
            return parse_output(self.host, name, proc.returncode, proc.stdout, proc.stderr)
        remote = self.start(name, args, timeout)
        status, out, err = remote.wait(timeout)
        return parse_output(self.host, name, status, out, err)

    def start(self, name: str, args: list[str], timeout: float = 300.0) -> RemoteProcess:
        """Start profiler `name` on the SSH host and return at once (for the network sink)."""
        if self.host.is_local:
            raise ValueError("start() is for SSH hosts; run local profilers with run() or subprocess")
        transport = self.transport  # connection errors are already one-line TransferErrors
        try:
            chan = transport.open_session()
            chan.settimeout(timeout)
            chan.exec_command(shlex.join([REMOTE_PYTHON, "-", *args]))
            chan.sendall(profiler_source(name))
            chan.shutdown_write()
        except Exception as exc:
            raise ConnectError(
                f"cannot run python3 over SSH on {self.host.key}: {exc}",
                self.host.key,
                "check that the server allows exec channels (no ForceCommand)",
            ) from exc
        return RemoteProcess(chan)


class RemoteProcess:
    """A profiler running on an SSH host: stderr lines as they come, stdout at the end."""

    def __init__(self, chan) -> None:
        self.chan = chan
        self.stderr_lines: queue.Queue[str | None] = queue.Queue()
        self._err = bytearray()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True, name="profiler-stderr")
        self._reader.start()

    def _read_stderr(self) -> None:
        pending = b""
        try:
            while True:
                data = self.chan.recv_stderr(65536)
                if not data:
                    break
                self._err += data
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self.stderr_lines.put(line.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - a closed channel ends the stream either way
            pass
        finally:
            self.stderr_lines.put(None)

    def wait_line(self, prefix: str, timeout: float) -> str | None:
        """The first stderr line starting with `prefix`, None when the process ended or the time ran out."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.stderr_lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            if line.startswith(prefix):
                return line

    def wait(self, timeout: float) -> tuple[int, bytes, bytes]:
        out = bytearray()
        self.chan.settimeout(timeout)
        try:
            while True:
                data = self.chan.recv(1 << 20)
                if not data:
                    break
                out += data
            status = self.chan.recv_exit_status()
        except OSError as exc:
            raise TransferError(
                f"profiler on the remote host stopped answering ({exc})",
                "",
                "check the host, or run the profiler by hand there",
            ) from exc
        self._reader.join(timeout=5)
        return status, bytes(out), bytes(self._err)

    def close(self) -> None:
        self.chan.close()
