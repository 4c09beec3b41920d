"""Host keys are verified by default: an unknown or changed key is refused before any
credential is sent, and the message gives the server's fingerprint and how to trust it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cli


def _fingerprint(pub: Path) -> str:
    return subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout.split()[1]


def _one_error_line(res) -> str:
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code != 0 and len(lines) == 1 and "Traceback" not in res.err, res.err
    return lines[0]


@pytest.fixture
def src(local_dir):
    (local_dir / "src").mkdir()
    (local_dir / "src" / "a.txt").write_text("hello")
    return local_dir / "src"


def test_checked_by_default_without_any_known_hosts(sshd, src, remote_dir, local_dir):
    """No --known-hosts and an empty home: nothing is trusted, so the copy is refused."""
    home = local_dir / "home"
    home.mkdir()
    res = run_cli(
        "copy", str(src), sshd.url(f"{remote_dir}/dst"), "--identity", str(sshd.client_key), env={"HOME": str(home)}
    )
    line = _one_error_line(res)
    fp = _fingerprint(Path(f"{sshd.host_key}.pub"))
    assert "not known" in line and fp in line and "ssh-keyscan" in line, line
    assert str(home / ".ssh" / "known_hosts") in line, line
    assert not (remote_dir / "dst").exists()


def test_changed_key_names_both_fingerprints(sshd, src, remote_dir, local_dir):
    other_pub = Path(f"{sshd.other_key}.pub")
    forged = local_dir / "known_hosts_forged"
    forged.write_text(f"[{sshd.host}]:{sshd.port} {' '.join(other_pub.read_text().split()[:2])}\n")
    res = run_cli(
        "copy",
        str(src),
        sshd.url(f"{remote_dir}/dst"),
        "--identity",
        str(sshd.client_key),
        "--known-hosts",
        str(forged),
    )
    line = _one_error_line(res)
    assert "CHANGED" in line and "man-in-the-middle" in line, line
    assert _fingerprint(Path(f"{sshd.host_key}.pub")) in line  # what the server offers
    assert _fingerprint(other_pub) in line  # what known_hosts holds
    assert f"ssh-keygen -R '[{sshd.host}]:{sshd.port}'" in line, line
    assert not (remote_dir / "dst").exists()


def test_connection_without_known_hosts_is_checked(airflow_home, sshd, remote_dir, local_dir):
    """An Airflow connection with no host key settings verifies against ~/.ssh/known_hosts."""
    home = local_dir / "home"
    home.mkdir()
    conn = {
        "conn_type": "sftp",
        "host": sshd.host,
        "port": sshd.port,
        "login": sshd.user,
        "extra": {"key_file": str(sshd.client_key)},
    }
    code = (
        "from airflow_transfer.hooks.endpoint import TransferEndpointHook\n"
        "from airflow_transfer.protocols.ssh import open_transport\n"
        "from airflow_transfer.errors import HostKeyError\n"
        "ep = TransferEndpointHook('at_hostkey').endpoint('/tmp')\n"
        "assert ep.target.check_host_key\n"
        "try:\n    open_transport(ep.target)\nexcept HostKeyError as exc:\n    print('REFUSED', exc.message)\n"
    )
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**airflow_home, "HOME": str(home), "AIRFLOW_CONN_AT_HOSTKEY": json.dumps(conn)},
    )
    assert "REFUSED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _fingerprint(Path(f"{sshd.host_key}.pub")) in proc.stdout
