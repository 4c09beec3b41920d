"""Generic transfer path (ftp, http, s3) and alternate-protocol fall-back on loopback, with real servers."""

from __future__ import annotations

import time

import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols import backends
from airflow_transfer.protocols.backends.base import Backend
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.resolve import resolve_endpoint
from tests.support.cli import run_cli
from tests.support.data import make_tree, temp_files, tree_digest
from tests.support.servers import HTTPServer, MotoServer, ftp_at_root


@pytest.fixture(scope="module")
def ftp_root(test_base):
    """pyftpdlib as the sshd's login user, rooted at "/" so FTP and SFTP paths are the same."""
    with ftp_at_root(test_base) as server:
        yield server


def test_upload_over_ftp_verified_then_skipped(ftp_root, local_dir, remote_dir):
    src = make_tree(local_dir / "src", small=40, seed=3)
    url = ftp_root.url(str(remote_dir))
    first = run_cli("copy", str(src), url, "--json", "--concurrency", "3")
    assert first.code == 0, first.err
    s = first.summary
    assert s["verify"]["verified"] == s["files"] > 40 and s["failed"] == []
    assert tree_digest(remote_dir) == tree_digest(src)
    assert temp_files(remote_dir) == []
    again = run_cli("copy", str(src), url, "--json")
    assert again.code == 0 and again.summary["files_skipped"] == s["files"]


def test_download_over_http_and_range_resume(local_dir, tmp_path):
    root = tmp_path / "www"
    make_tree(root / "ds", small=25, seed=4)
    server = HTTPServer(root).start()
    try:
        dst = local_dir / "got"
        res = run_cli("copy", server.url("/ds/"), str(dst), "--json")
        assert res.code == 0, res.err
        assert {k: v for k, v in tree_digest(dst).items() if v != "dir"} == {
            k: v for k, v in tree_digest(root / "ds").items() if v != "dir"
        }
        assert res.summary["verify"]["verified"] == res.summary["files"]
    finally:
        server.stop()


def test_s3_round_trip(local_dir):
    moto = MotoServer().start()
    env = moto.env()
    try:
        src = make_tree(local_dir / "src", small=15, seed=5)
        up = run_cli("copy", str(src), "s3://bucket-a/data", "--json", env=env)
        assert up.code == 0, up.err
        down = run_cli("copy", "s3://bucket-a/data", str(local_dir / "back"), "--json", env=env)
        assert down.code == 0, down.err
        got = {k: v for k, v in tree_digest(local_dir / "back").items() if v != "dir"}
        want = {k: v for k, v in tree_digest(src).items() if v != "dir"}
        assert got == want and down.summary["verify"]["verified"] == len(want)
    finally:
        moto.stop()


class _Truncating(Backend):
    """Reports success but writes one file short: the silent failure of paper 003."""

    def __init__(self, inner: Backend, victim: str) -> None:
        self.inner, self.victim = inner, victim
        self.scheme, self.caps = inner.scheme, inner.caps

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stat(self, path):
        return self.inner.stat(path)

    def listdir(self, path):
        return self.inner.listdir(path)

    def open_read(self, path, offset=0):
        return self.inner.open_read(path, offset)

    def open_write(self, path, offset=0):
        f = self.inner.open_write(path, offset)
        if self.victim not in path:
            return f
        inner_write = f.write

        class Short:
            def write(self_, data):
                return inner_write(data[: max(0, len(data) - 1000)])

            def close(self_):
                f.close()

            def __enter__(self_):
                return self_

            def __exit__(self_, *exc):
                self_.close()

        return Short()

    def rename(self, a, b):
        self.inner.rename(a, b)

    def delete(self, path):
        self.inner.delete(path)

    def mkdir(self, path, parents=True, exist_ok=True):
        self.inner.mkdir(path, parents, exist_ok)

    def close(self):
        self.inner.close()


def test_silent_truncation_detected_by_size_and_resent_over_alternate(sshd, ftp_root, local_dir, remote_dir):
    src = make_tree(local_dir / "src", small=30, seed=6)
    victim = "f0007.dat"
    backends.register_wrapper("sftp", lambda b: _Truncating(b, victim))
    lines: list[str] = []
    try:
        target = sshd.target(look_for_keys=False)
        req = CopyRequest(
            Endpoint("file", str(src)),
            Endpoint("sftp", str(remote_dir), target),
            TransferParams(cc=2),
            alt_protocols=[f"ftp://{ftp_root.user}@{ftp_root.host}:{ftp_root.port}"],
            probe_interval=0.5,
            log=lines.append,
            transfer_key=f"silent-{remote_dir.name}",
            make_endpoint=lambda url: (
                Endpoint("sftp", url.split(str(sshd.port), 1)[1], target)
                if url.startswith("sftp")
                else resolve_endpoint(url)
            ),
        )
        summary = run_copy(req)
    finally:
        backends.register_wrapper("sftp", None)
    assert summary["failed"] == []
    assert tree_digest(remote_dir) == tree_digest(src)
    first = summary["protocol_switches"][0]
    assert first["from"] == "sftp" and first["to"] == "ftp" and "size mismatch" in first["reason"], summary
    assert victim in first["reason"]
    assert summary["protocols"]["ftp"]["files"] >= 1
    assert any("protocol switch: sftp -> ftp" in line for line in lines)


def test_all_protocols_down_fails_at_deadline_naming_each(local_dir, remote_dir):
    from tests.support.sshd import free_port

    src = make_tree(local_dir / "src", small=3, seed=7)
    dead_ssh, dead_ftp = free_port(), free_port()
    t0 = time.monotonic()
    res = run_cli(
        "copy",
        str(src),
        f"sftp://attest@127.0.0.1:{dead_ssh}{remote_dir}",
        "--json",
        "--alt-protocols",
        f"ftp://127.0.0.1:{dead_ftp}",
        "--deadline",
        "8",
        "--switch-after",
        "1",
        "--known-hosts",
        "/dev/null",
        timeout=120,
    )
    assert res.code != 0
    assert "sftp" in res.err and "ftp" in res.err and ("deadline" in res.err or "cannot" in res.err), res.err
    assert time.monotonic() - t0 < 60
