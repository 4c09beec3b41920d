"""One conformance suite for every storage backend, each against a real server
(fsspec's pattern: an abstract class, one subclass per backend)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from airflow_transfer.protocols import backends
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh import SSHTarget
from tests.support.servers import FTPServer, HTTPServer, MotoServer
from tests.support.sshd import chown_to_user

DATA = bytes(range(256)) * 1000 + b"tail"  # 256004 bytes, every offset distinguishable


class BackendConformance:
    """Subclasses provide the `env` fixture: (backend, root path, put(rel, data) out of band or None)."""

    @pytest.fixture
    def env(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _seed(self, env, rel: str, data: bytes) -> str:
        b, root, put = env
        path = f"{root.rstrip('/')}/{rel}"
        if put is not None:
            put(rel, data)
        else:
            parent = path.rsplit("/", 1)[0]
            b.mkdir(parent)
            b.write(path, data)
        return path

    def test_stat_file_and_dir(self, env):
        b, root, _ = env
        path = self._seed(env, "sub/a.bin", DATA)
        info = b.stat(path)
        assert info.size == len(DATA) and not info.is_dir
        assert b.stat(f"{root}/sub").is_dir

    def test_missing_is_file_not_found(self, env):
        b, root, _ = env
        self._seed(env, "x.bin", b"x")
        with pytest.raises(FileNotFoundError):
            b.stat(f"{root}/no-such-file")
        with pytest.raises(FileNotFoundError):
            b.read(f"{root}/no-such-file")

    def test_listdir_and_walk(self, env):
        b, root, _ = env
        self._seed(env, "t/one.bin", b"1")
        self._seed(env, "t/deep/two.bin", b"22")
        names = sorted(e.name for e in b.listdir(f"{root}/t"))
        assert names == ["deep", "one.bin"]
        listing = b.walk(f"{root}/t")
        assert [(rel, size) for rel, size, _, _ in listing.files] == [("deep/two.bin", 2), ("one.bin", 1)]
        assert not listing.is_file

    def test_read_ranges(self, env):
        b, _, _ = env
        path = self._seed(env, "r.bin", DATA)
        assert b.read(path) == DATA
        assert b.read(path, 1000, 300) == DATA[1000:1300]
        assert b.read(path, len(DATA) - 4, 100) == b"tail"
        with b.open_read(path, 70000) as f:
            assert f.read() == DATA[70000:]

    def test_digest(self, env):
        import hashlib

        b, _, _ = env
        path = self._seed(env, "d.bin", DATA)
        got, where = b.digest(path, "sha256")
        assert got == hashlib.sha256(DATA).hexdigest() and where in ("server", "read-back")

    # -- writers ---------------------------------------------------------------
    def _writable(self, env):
        if not env[0].caps.write:
            with pytest.raises(PermissionError):
                env[0].write(f"{env[1]}/w.bin", b"no")
            return False
        return True

    def test_write_read_back(self, env):
        b, root, _ = env
        if not self._writable(env):
            return
        b.mkdir(f"{root}/w/x/y")
        b.write(f"{root}/w/x/y/f.bin", DATA)
        assert b.read(f"{root}/w/x/y/f.bin") == DATA
        b.write(f"{root}/w/x/y/f.bin", b"short")  # truncates
        assert b.read(f"{root}/w/x/y/f.bin") == b"short"
        # Binary stays binary after a listing (FTP lists in ASCII mode).
        b.listdir(f"{root}/w/x/y")
        crlf = b"a\r\nb\r\n\n\r" * 1000
        b.write(f"{root}/w/x/y/crlf.bin", crlf)
        b.listdir(f"{root}/w/x/y")
        assert b.read(f"{root}/w/x/y/crlf.bin") == crlf

    def test_offset_writes_where_capable(self, env):
        b, root, _ = env
        if not self._writable(env):
            return
        b.mkdir(f"{root}/o")
        path = f"{root}/o/f.bin"
        b.write(path, DATA[:1000])
        if b.caps.append_write or b.caps.ranged_write:
            b.write(path, DATA[1000:5000], offset=1000)
            assert b.read(path) == DATA[:5000]
        else:
            with pytest.raises(OSError):
                b.write(path, DATA[1000:5000], offset=1000)
        if b.caps.ranged_write:
            b.write(path, b"ZZ", offset=10)
            assert b.read(path, 8, 6) == DATA[8:10] + b"ZZ" + DATA[12:14]

    def test_rename_replaces(self, env):
        b, root, _ = env
        if not self._writable(env):
            return
        b.mkdir(f"{root}/m")
        b.write(f"{root}/m/a", b"new")
        b.write(f"{root}/m/b", b"old")
        b.rename(f"{root}/m/a", f"{root}/m/b")
        assert b.read(f"{root}/m/b") == b"new"
        assert not b.exists(f"{root}/m/a")
        with pytest.raises(FileNotFoundError):
            b.rename(f"{root}/m/none", f"{root}/m/c")

    def test_delete_and_mkdir(self, env):
        b, root, _ = env
        if not self._writable(env):
            return
        b.mkdir(f"{root}/k/l")
        b.mkdir(f"{root}/k/l")  # exist_ok
        b.write(f"{root}/k/l/f", b"1")
        b.delete(f"{root}/k/l/f")
        assert not b.exists(f"{root}/k/l/f")
        with pytest.raises(FileNotFoundError):
            b.delete(f"{root}/k/l/f")

    def test_capabilities_declared(self, env):
        caps = env[0].caps.as_dict()
        assert set(caps) >= {"ranged_write", "server_checksum", "exec", "parallel", "rename"}
        assert backends.capabilities(env[0].scheme).write == env[0].caps.write


class TestFile(BackendConformance):
    @pytest.fixture
    def env(self, tmp_path):
        ep = Endpoint("file", str(tmp_path))
        b = backends.connect(ep)
        yield b, str(tmp_path), None
        b.close()

    def test_not_a_directory_mapped(self, tmp_path):
        b = backends.connect(Endpoint("file", str(tmp_path)))
        (tmp_path / "f").write_bytes(b"x")
        with pytest.raises(NotADirectoryError):
            b.listdir(str(tmp_path / "f"))


class TestSFTP(BackendConformance):
    @pytest.fixture
    def env(self, sshd, remote_dir):
        target = SSHTarget(
            host=sshd.host,
            port=sshd.port,
            username=sshd.user,
            key_filenames=[str(sshd.client_key)],
            known_hosts=[str(sshd.known_hosts)],
            look_for_keys=False,
        )
        b = backends.connect(Endpoint("sftp", str(remote_dir), target))
        yield b, str(remote_dir), None
        b.close()

    def test_permission_error_mapped(self, env):
        b, _, _ = env
        with pytest.raises(PermissionError):
            b.write("/root/at-should-not-exist", b"x") if os.geteuid() == 0 else b.write("/proc/version", b"x")


@pytest.fixture(scope="module")
def ftp_server(test_base):
    base = test_base / ("ftp-" + uuid.uuid4().hex[:8])  # the server's unprivileged user must reach it
    base.mkdir()
    os.chmod(base, 0o755)
    chown_to_user(base, "attest") if os.geteuid() == 0 else None
    server = FTPServer(root=str(base), run_as="attest" if os.geteuid() == 0 else None).start(netrc_dir=base)
    old = os.environ.get("NETRC")
    os.environ["NETRC"] = str(server.netrc_path)
    yield server, base
    if old is None:
        os.environ.pop("NETRC", None)
    else:
        os.environ["NETRC"] = old
    server.stop()


class TestFTP(BackendConformance):
    @pytest.fixture
    def env(self, ftp_server):
        server, _ = ftp_server
        b = backends.connect(Endpoint("ftp", "/", host=server.host, port=server.port, user=server.user))
        root = "/" + uuid.uuid4().hex[:8]
        b.mkdir(root)
        yield b, root, None
        b.close()

    def test_permission_error_mapped(self, ftp_server):
        from airflow_transfer.protocols.backends.ftp import FTPBackend

        server, _ = ftp_server

        b = FTPBackend(server.host, server.port, server.ro_user, "ftp-test-pw")
        try:
            with pytest.raises(PermissionError):
                b.write("/ro-denied.bin", b"x")
        finally:
            b.close()

    def test_bad_password_is_permission_error(self, ftp_server):
        from airflow_transfer.protocols.backends.ftp import FTPBackend

        server, _ = ftp_server
        with pytest.raises(PermissionError):
            FTPBackend(server.host, server.port, server.user, "wrong")


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    server = HTTPServer(root).start()
    yield server, root
    server.stop()


class TestHTTP(BackendConformance):
    @pytest.fixture
    def env(self, http_server):
        server, docroot = http_server
        sub = uuid.uuid4().hex[:8]
        (docroot / sub).mkdir()

        def put(rel: str, data: bytes) -> None:
            p = Path(docroot, sub, rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

        b = backends.connect(Endpoint("http", "/", host=server.host, port=server.port))
        yield b, f"/{sub}", put
        b.close()


class TestMemory(BackendConformance):
    @pytest.fixture
    def env(self):
        b = backends.connect(Endpoint("memory", "/"))
        root = "/conf-" + uuid.uuid4().hex[:8]
        b.mkdir(root)
        yield b, root, None
        b.close()


@pytest.fixture(scope="module")
def moto_server():
    server = MotoServer().start()
    old = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    yield server
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


class TestS3(BackendConformance):
    @pytest.fixture
    def env(self, moto_server):
        ep = Endpoint(
            "s3", "/", options={"endpoint_url": moto_server.endpoint_url, "key": "testing", "secret": "testing"}
        )
        b = backends.connect(ep)
        bucket = "/b" + uuid.uuid4().hex[:8]
        b.mkdir(bucket)
        yield b, bucket + "/root", None
        b.close()
