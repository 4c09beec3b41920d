"""A real Airflow api-server (one worker, simple auth manager) on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiServer:
    def __init__(self, env: dict, log_path: Path) -> None:
        self.env = dict(env)
        self.home = Path(env["AIRFLOW_HOME"])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> ApiServer:
        bin_dir = str(Path(sys.executable).parent)  # the api-server execs tools from the venv
        env = {**self.env, "PATH": f"{bin_dir}:{self.env.get('PATH', '')}", "AIRFLOW__API__BASE_URL": self.url}
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airflow",
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api-server exited {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"api-server not ready after {timeout} s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def password(self, user: str = "admin") -> str:
        path = self.home / "simple_auth_manager_passwords.json.generated"
        return json.loads(path.read_text())[user]

    def token(self, user: str = "admin") -> str:
        resp = httpx.post(
            f"{self.url}/auth/token", json={"username": user, "password": self.password(user)}, timeout=30
        )
        resp.raise_for_status()
        return resp.json()["access_token"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()
