"""Real protocol servers for tests: FTP (pyftpdlib), HTTP with Range, S3 (moto's standalone server).

Each runs in its own process (HTTP: a thread) on a free loopback port, or, for
FTP, inside a network namespace as the sshd's login user (the WAN testbed).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.sshd import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
FTP_PASSWORD = "ftp-test-pw"


def _wait_port(
    host: str, port: int, proc: subprocess.Popen | None, timeout: float = 20.0, netns: str | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        if netns is None:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {host}:{port} within {timeout}s")


def _kill_group(proc: subprocess.Popen | None) -> None:
    """Kills a server started in its own session, with everything it started; returns None."""
    if proc is None:
        return None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return None


@dataclass
class FTPServer:
    root: str = "/"
    host: str = "127.0.0.1"
    port: int = 0
    user: str = ""
    netns: str | None = None
    run_as: str | None = None  # drop to this user (root only)
    ro_user: str | None = "ftpro"
    proc: subprocess.Popen | None = None
    netrc_path: Path | None = None

    def start(self, netrc_dir: Path | None = None) -> FTPServer:
        if not self.port:
            self.port = free_port(self.host) if self.netns is None else 2121
        self.user = self.user or self.run_as or "ftptest"
        argv = [
            sys.executable,
            "-m",
            "tests.support.ftpserver",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--root",
            self.root,
            "--user",
            self.user,
            "--password",
            FTP_PASSWORD,
        ]
        if self.ro_user:
            argv += ["--ro-user", self.ro_user]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        if self.run_as and os.geteuid() == 0:
            # The venv's interpreter lives under root's home: the unprivileged user runs the
            # system python3 with the (pure-Python) server library's directory on its path.
            # Only that library: -S keeps the system's site-packages (other versions) out.
            import tempfile

            import pyftpdlib

            libdir = Path(tempfile.mkdtemp(prefix="at-ftplib-"))
            os.chmod(libdir, 0o755)
            # Copies, not links: the venv lives inside the clone, which may be 0700.
            shutil.copytree(Path(pyftpdlib.__file__).resolve().parent, libdir / "pyftpdlib")
            for d, _dirs, _files in os.walk(libdir):
                os.chmod(d, 0o755)
            # The server module is copied there too: the clone may sit in a directory the
            # unprivileged user cannot read (mktemp -d makes it 0700).
            shutil.copy(Path(__file__).with_name("ftpserver.py"), libdir / "at_test_ftpserver.py")
            os.chmod(libdir / "at_test_ftpserver.py", 0o644)
            env["PYTHONPATH"] = str(libdir)
            argv = [
                shutil.which("runuser") or "runuser",
                "-u",
                self.run_as,
                "--",
                "/usr/bin/env",
                f"PYTHONPATH={env['PYTHONPATH']}",
                "/usr/bin/python3",
                "-S",
                "-m",
                "at_test_ftpserver",
                *argv[3:],
            ]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True, text=True
        )
        line = self.proc.stdout.readline()
        if "READY" not in line:
            self.stop()
            raise RuntimeError(f"FTP server did not start: {line!r}")
        if self.netns is None:
            _wait_port(self.host, self.port, self.proc)
        if netrc_dir is not None:
            self.netrc_path = Path(netrc_dir) / "netrc"
            with open(self.netrc_path, "w") as f:
                f.write(f"machine {self.host} login {self.user} password {FTP_PASSWORD}\n")
            os.chmod(self.netrc_path, 0o600)
        return self

    def stop(self) -> None:
        self.proc = _kill_group(self.proc)

    def url(self, path: str) -> str:
        return f"ftp://{self.user}@{self.host}:{self.port}{path}"


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """The standard file server plus single byte ranges (RFC 9110 206 / 416)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or os.path.isdir(path):
            return super().send_head()
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        if not m or (not m.group(1) and not m.group(2)):
            f.close()
            self.send_error(400, "bad range")
            return None
        if m.group(1):
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else size - 1
        else:
            start, end = max(0, size - int(m.group(2))), size - 1
        if start >= size:
            f.close()
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        end = min(end, size - 1)
        f.seek(start)
        self._range_left = end - start + 1
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Last-Modified", self.date_time_string(int(os.fstat(f.fileno()).st_mtime)))
        self.end_headers()
        return f

    def copyfile(self, source, outputfile) -> None:
        left = getattr(self, "_range_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        self._range_left = None
        while left > 0:
            block = source.read(min(left, 1 << 16))
            if not block:
                break
            outputfile.write(block)
            left -= len(block)


@dataclass
class HTTPServer:
    root: Path
    host: str = "127.0.0.1"
    port: int = 0
    _server: http.server.ThreadingHTTPServer | None = field(default=None, repr=False)

    def start(self) -> HTTPServer:
        root = str(self.root)

        class Handler(_RangeHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=root, **kw)

        self._server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"


@dataclass
class MotoServer:
    host: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen | None = None

    def start(self) -> MotoServer:
        self.port = self.port or free_port(self.host)
        exe = Path(sys.executable).with_name("moto_server")
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
        self.proc = subprocess.Popen(
            [*argv, "-H", self.host, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_port(self.host, self.port, self.proc, timeout=60)
        return self

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
        }

    def stop(self) -> None:
        self.proc = _kill_group(self.proc)


@contextlib.contextmanager
def ftp_at_root(netrc_dir: Path):
    """pyftpdlib as the sshd's login user, rooted at "/" so FTP and SFTP paths are the same, with
    NETRC pointing at its credentials while it runs."""
    server = FTPServer(root="/", run_as="attest" if os.geteuid() == 0 else None).start(netrc_dir=netrc_dir)
    old = os.environ.get("NETRC")
    os.environ["NETRC"] = str(server.netrc_path)
    try:
        yield server
    finally:
        if old is None:
            os.environ.pop("NETRC", None)
        else:
            os.environ["NETRC"] = old
        server.stop()
