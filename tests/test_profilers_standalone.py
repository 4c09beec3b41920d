"""The profilers are single self-contained stdlib files: piped over a real SSH
session (`ssh host python3 - ARGS < profilers/X.py`) they run on the far host."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.sshd import free_port

REPO = Path(__file__).resolve().parents[1]
PROFILERS = ("disk", "memory", "network")


@pytest.mark.parametrize("name", PROFILERS)
def test_profiler_is_one_stdlib_only_file_for_python_3_8(name):
    source = (REPO / "profilers" / f"{name}.py").read_text()
    tree = ast.parse(source, feature_version=(3, 8))  # no syntax newer than the remote hosts have
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}.py uses a relative import: it must not need its package"
            imported.add(node.module.split(".")[0])
    assert "profilers" not in imported
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"run", "main"} <= functions


def ssh_cmd(sshd, *extra: str) -> list[str]:
    return ["ssh", "-F", str(sshd.ssh_config), "-o", "BatchMode=yes", *extra, "testhost"]


def test_disk_profiler_piped_over_ssh(sshd, remote_dir):
    with open(REPO / "profilers" / "disk.py", "rb") as script:
        proc = subprocess.run(
            ssh_cmd(sshd)
            + ["python3", "-", "--path", str(remote_dir), "--file-size", "1M", "--total", "8M", "--rounds", "1"],
            stdin=script,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["path"] == str(remote_dir)
    assert out["write"]["best_mib_s"] > 0 and out["read"]["best_block"] in out["block_sizes"]
    assert list(remote_dir.iterdir()) == []


def test_network_sink_over_ssh_through_a_tunnel(sshd):
    """The documented tunnel set-up: the sink listens on the far host's loopback,
    ssh -L forwards a local port to it, the client measures locally; RTT goes
    straight to the SSH port."""
    remote_port, local_port = free_port(), free_port()
    with open(REPO / "profilers" / "network.py", "rb") as script:
        sink = subprocess.Popen(
            ssh_cmd(sshd, "-o", "ExitOnForwardFailure=yes", "-L", f"{local_port}:127.0.0.1:{remote_port}")
            + ["python3", "-", "--serve", str(remote_port), "--idle-timeout", "30"],
            stdin=script,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        ready = sink.stderr.readline().split()
        assert ready == ["READY", "127.0.0.1", str(remote_port)], ready
        deadline = time.monotonic() + 10
        while True:  # ssh opens the forward around the same time; wait until it accepts
            try:
                socket.create_connection(("127.0.0.1", local_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client = subprocess.run(
            [
                sys.executable,
                "-m",
                "profilers.network",
                "--host",
                "127.0.0.1",
                "--port",
                str(local_port),
                "--rtt-host",
                sshd.host,
                "--rtt-port",
                str(sshd.port),
                "--rtt-count",
                "3",
                "--seconds",
                "0.5",
                "--streams",
                "2",
                "--direction",
                "both",
                "--no-hops",
                "--stop-sink",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        stdout, _stderr = sink.communicate(timeout=20)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    out = json.loads(client.stdout)
    assert out["bandwidth"]["send"]["mbit"] > 0 and out["bandwidth"]["recv"]["mbit"] > 0
    assert out["rtt"]["port"] == sshd.port and 0 < out["rtt"]["median_ms"] < 50
    served = json.loads(stdout)
    assert served["serve"]["stopped_by"] == "quit"
    assert served["serve"]["bytes_received"] == out["bandwidth"]["send"]["bytes"]
