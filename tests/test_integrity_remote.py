"""The destination helper as a real subprocess (and over a real sshd), and the coreutils path."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from airflow_transfer.integrity.algorithms import ALGORITHMS, STDLIB_ALGORITHMS, digest_bytes
from airflow_transfer.integrity.blocks import file_digests
from airflow_transfer.integrity.remote import (
    ChecksumHelperClient,
    CoreutilsChecksummer,
    DigestRequest,
    HelperUnavailable,
    RemoteChecksumError,
    RemoteFileNotFoundError,
    RemoteIsADirectoryError,
    RemotePermissionError,
    choose_remote_method,
    coreutils_command,
    helper_command,
    helper_source,
    parse_coreutils_output,
)

HELPER_FILE = Path(__file__).resolve().parents[1] / "airflow_transfer" / "remote" / "checksum_helper.py"
BLOCK = 4096
SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7]
IS_ROOT = os.geteuid() == 0
OTHER_USER = "attest"  # made by scripts/setup-test-deps.sh


def oldest_python() -> str:
    """A bare python3 without crc32c/xxhash/blake3, the oldest here (3.8 proves the floor)."""
    for candidate in (os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python3"), "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("no bare python3 found for the stdlib-only helper test")


class Pipes:
    """OpenChannel over a local shell: the same `sh -c COMMAND` an SSH exec runs."""

    def __init__(self, user: str | None = None, prefix: str = "") -> None:
        self.user, self.prefix = user, prefix
        self.procs: list[subprocess.Popen] = []
        self.commands: list[str] = []

    def __call__(self, command: str):
        self.commands.append(command)
        kwargs = {"user": self.user} if self.user else {}
        proc = subprocess.Popen(
            self.prefix + command,
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            **kwargs,
        )
        self.procs.append(proc)

        def write(data: bytes) -> None:
            proc.stdin.write(data)
            proc.stdin.flush()

        return write, proc.stdout.readline, proc.stdin.close

    def wait(self) -> list[int]:
        return [p.wait(timeout=10) for p in self.procs]


def run_shell(command: str, user: str | None = None) -> tuple[int, bytes, bytes]:
    kwargs = {"user": user} if user else {}
    done = subprocess.run(command, shell=True, capture_output=True, timeout=30, **kwargs)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def files(local_dir: Path) -> dict[int, Path]:
    data = os.urandom(SIZES[-1])
    out = {}
    for size in SIZES:
        path = local_dir / f"f{size}.bin"
        path.write_bytes(data[:size])
        out[size] = path
    return out


@pytest.fixture
def helper():
    pipes = Pipes()
    client = ChecksumHelperClient(pipes, python=sys.executable, where="local test")
    client.start()
    yield client
    client.close()
    assert pipes.wait() == [0]  # EOF on stdin ends the helper cleanly


def test_helper_source_is_stdlib_only_ascii() -> None:
    source = helper_source()
    assert source.isascii()
    imports = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imports |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imports.add((node.module or "").split(".")[0])
    calls = {n.func.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    optional = {"crc32c", "xxhash", "blake3"}  # imported inside try/except ImportError only
    assert imports - optional <= set(sys.stdlib_module_names)
    assert {"os", "hashlib", "json"} <= imports
    assert not imports & {"subprocess", "shlex", "pty", "importlib"}
    assert not calls & {"eval", "exec", "compile", "__import__", "system", "popen"}


def test_bare_python38_helper_over_bootstrap(files: dict[int, Path]) -> None:
    python = oldest_python()
    pipes = Pipes()
    with ChecksumHelperClient(pipes, python=python) as client:
        assert set(client.algorithms) == set(STDLIB_ALGORITHMS)
        assert client.info["version"] == 1
        for name in STDLIB_ALGORITHMS:
            got = client.digest(files[BLOCK + 1], name, block_size=BLOCK)
            want = file_digests(name, files[BLOCK + 1], BLOCK)
            assert got.digests == want
            assert got.method == "helper"
        # Refused before anything is sent, so the session stays usable.
        [refused, fine] = client.digest_many([DigestRequest(files[1], "xxh128"), DigestRequest(files[1], "md5")])
        assert isinstance(refused, RemoteChecksumError) and refused.code == "ENOALGO"
        assert "xxh128" in str(refused)
        assert fine.digest == digest_bytes("md5", files[1].read_bytes())
    assert pipes.commands == [helper_command(python)]
    assert pipes.wait() == [0]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_helper_round_trip_every_algorithm_and_edge_size(helper, files, name: str) -> None:
    results = helper.digest_many([DigestRequest(p, name, block_size=BLOCK) for p in files.values()])
    for (size, path), got in zip(files.items(), results):
        want = file_digests(name, path, BLOCK)
        assert got.digests == want, (name, size)
        assert len(got.digests.blocks) == -(-size // BLOCK)
        assert got.fsynced is True and got.cache_dropped is True


def test_helper_ranges_and_pipelined_window(files) -> None:
    path = files[3 * BLOCK + 7]
    client = ChecksumHelperClient(Pipes(), python=sys.executable, window=2)
    with client:
        requests = [
            DigestRequest(path, "sha256", offset=o, length=BLOCK, block_size=1000) for o in (0, BLOCK, 2 * BLOCK)
        ]
        requests.insert(1, DigestRequest(path.with_name("missing"), "sha256"))
        requests.append(DigestRequest(path, "sha256", offset=3 * BLOCK, length=8))  # 7 bytes there
        results = client.digest_many(requests)
    assert [r.digests.offset for r in (results[0], results[2], results[3])] == [0, BLOCK, 2 * BLOCK]
    for r in (results[0], results[2], results[3]):
        assert r.digests == file_digests("sha256", path, 1000, offset=r.digests.offset, length=BLOCK)
    assert isinstance(results[1], RemoteFileNotFoundError) and results[1].code == "ENOENT"
    assert isinstance(results[4], RemoteChecksumError) and results[4].code == "ESHORT"


def test_error_codes_map_to_clear_exceptions(helper, files, local_dir: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        helper.digest(local_dir / "nope")
    assert isinstance(missing.value, RemoteFileNotFoundError)
    message = str(missing.value)
    assert "nope" in message and "local test" in message and "transfer it again" in message
    assert "\n" not in message

    with pytest.raises(RemoteIsADirectoryError):
        helper.digest(local_dir)

    fifo = local_dir / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RemoteChecksumError) as not_regular:  # must not hang on the FIFO
        helper.digest(fifo)
    assert not_regular.value.code == "ENOTREG"

    with pytest.raises(RemoteChecksumError) as short:
        helper.digest(files[1], "md5", length=2)
    assert short.value.code == "ESHORT"

    with pytest.raises(ValueError, match="unknown checksum algorithm"):
        helper.digest(files[1], "sha3")
    # The session survived every error above.
    assert helper.digest(files[1], "md5").digest == digest_bytes("md5", files[1].read_bytes())


def test_permission_denied_as_an_unprivileged_user(files) -> None:
    secret = files[BLOCK]
    os.chmod(secret, 0o600 if IS_ROOT else 0o000)
    user = OTHER_USER if IS_ROOT else None
    python = "/usr/bin/python3" if IS_ROOT else sys.executable  # reachable by that user
    try:
        with ChecksumHelperClient(Pipes(user=user), python=python) as client:
            with pytest.raises(PermissionError) as denied:
                client.digest(secret)
            assert isinstance(denied.value, RemotePermissionError) and denied.value.code == "EACCES"
            assert "permissions" in str(denied.value)
            readable = files[BLOCK + 1]
            assert client.digest(readable).digest == digest_bytes("sha256", readable.read_bytes())
    finally:
        os.chmod(secret, 0o644)


def test_raw_protocol_when_run_as_a_script(files) -> None:
    """`python3 checksum_helper.py` with pipes: requests straight on stdin."""
    lines = [
        {"op": "hello", "id": "h"},
        "this is not json",
        ["not", "an", "object"],
        {"op": "rm", "id": 3},
        {"id": 4, "path": str(files[1]), "algo": "md5", "offset": -1},
        {"id": 5, "path": str(files[1]), "algo": "md5", "fsync": "yes"},
        {"id": 6, "path": str(files[1]), "algo": "__import__('os').system('touch x')"},
        {"id": 7, "path": str(files[BLOCK + 1]), "algo": "adler32", "block_size": BLOCK, "drop_cache": False},
    ]
    stdin = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n\n"
    done = subprocess.run([sys.executable, str(HELPER_FILE)], input=stdin.encode(), capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.decode("ascii").splitlines()]
    assert [r["id"] for r in replies] == ["h", None, None, 3, 4, 5, 6, 7]
    assert [r.get("code") for r in replies[1:7]] == ["EBADREQ", "EBADREQ", "EBADREQ", "EBADREQ", "EBADREQ", "ENOALGO"]
    assert replies[7]["digest"] == file_digests("adler32", files[BLOCK + 1], BLOCK).digest
    assert len(replies[7]["blocks"]) == 2 and replies[7]["cache_dropped"] is False


def test_helper_unavailable_and_login_noise(files) -> None:
    with pytest.raises(HelperUnavailable) as gone:
        ChecksumHelperClient(Pipes(), python="/nonexistent/python3", where="hostA").start()
    assert gone.value.code == "ENOHELPER" and "hostA" in str(gone.value)
    # A login script printing to stdout before the helper starts is skipped.
    noisy = Pipes(prefix="echo 'Welcome to hostB'; echo '{\"motd\": 1}'; ")
    with ChecksumHelperClient(noisy, python=sys.executable) as client:
        assert client.digest(files[1], "sha1").digest == digest_bytes("sha1", files[1].read_bytes())


def resident_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True, check=True, text=True
    ).stdout
    return int(out.strip())


def test_digest_leaves_the_file_out_of_the_page_cache(helper, local_dir: Path) -> None:
    path = local_dir / "cached.bin"
    path.write_bytes(os.urandom(4 * 1024 * 1024))  # dirty pages, then cached ones
    assert resident_bytes(path) > 0
    helper.digest(path, drop_cache=False)
    assert resident_bytes(path) > 0
    result = helper.digest(path)
    assert result.fsynced and result.cache_dropped
    assert resident_bytes(path) == 0


# -- coreutils ---------------------------------------------------------------

HOSTILE_NAMES = [
    "with space.bin",
    "$(touch PWNED_A).bin",
    "`touch PWNED_B`.bin",
    "semi; touch PWNED_C; .bin",
    "quote ' single.bin",
    'quote " double.bin',
    "back\\slash.bin",
    "new\nline.bin",
    "-n",
    "-",
    "star *.bin",
    "caf\u00e9.bin",
]


@pytest.mark.parametrize("name", ["md5", "sha1", "sha256", "blake2b"])
def test_coreutils_digests_hostile_names(local_dir: Path, name: str) -> None:
    data = os.urandom(BLOCK + 1)
    checker = CoreutilsChecksummer(run_shell)
    for i, file_name in enumerate(HOSTILE_NAMES):
        path = local_dir / file_name
        path.write_bytes(data[i:])
        got = checker.digest(path, name)
        assert got.digest == digest_bytes(name, data[i:]), file_name
        assert got.digests.length == len(data) - i
        assert got.method == "coreutils" and got.fsynced and got.cache_dropped
        # Relative names too (the shell runs in the file's directory).
        rel = CoreutilsChecksummer(lambda c: run_shell(f"cd {local_dir} && {c}"))
        assert rel.digest(file_name, name).digest == got.digest
    leftovers = set(os.listdir(local_dir)) - set(HOSTILE_NAMES)
    assert leftovers == set(), leftovers
    assert not any(Path(p).exists() for p in ("PWNED_A", "PWNED_B", "PWNED_C"))


def test_coreutils_errors_and_limits(local_dir: Path) -> None:
    checker = CoreutilsChecksummer(run_shell, where="hostC")
    with pytest.raises(RemoteFileNotFoundError) as missing:
        checker.digest(local_dir / "gone $(x)")
    assert "hostC" in str(missing.value) and "gone $(x)" in str(missing.value)
    with pytest.raises(RemoteChecksumError) as directory:
        checker.digest(local_dir)
    assert directory.value.code == "ENOTREG"
    os.mkfifo(local_dir / "fifo")
    with pytest.raises(RemoteChecksumError) as fifo:
        checker.digest(local_dir / "fifo")
    assert fifo.value.code == "ENOTREG"
    with pytest.raises(ValueError, match="coreutils has no command for 'xxh128'"):
        coreutils_command("xxh128", "/x")
    no_tools = CoreutilsChecksummer(lambda c: run_shell(f"PATH=/nonexistent; export PATH; {c}"))
    with pytest.raises(RemoteChecksumError) as missing_tool:
        no_tools.digest(local_dir / "gone")
    assert missing_tool.value.code == "ENOCMD"
    assert checker.probe("sha256") is True and checker.probe("crc32c") is False
    assert no_tools.probe("sha256") is False


def test_coreutils_permission_denied(local_dir: Path) -> None:
    path = local_dir / "secret.bin"
    path.write_bytes(b"x")
    os.chmod(path, 0o600 if IS_ROOT else 0o000)
    user = OTHER_USER if IS_ROOT else None
    try:
        with pytest.raises(PermissionError) as denied:
            CoreutilsChecksummer(lambda c: run_shell(c, user=user)).digest(path)
        assert denied.value.code == "EACCES"
    finally:
        os.chmod(path, 0o644)


def test_parse_coreutils_output_rejects_garbage() -> None:
    good = b"fsync=1\ndrop=0\nsize=3\n" + digest_bytes("md5", b"abc").encode() + b"  ./x\n"
    parsed = parse_coreutils_output("md5", good)
    assert (parsed.digest, parsed.fsynced, parsed.cache_dropped, parsed.size) == (
        "900150983cd24fb0d6963f7d28e17f72",
        True,
        False,
        3,
    )
    with pytest.raises(ValueError):
        parse_coreutils_output("md5", b"fsync=1\ndrop=0\nsize=3\nnot-a-digest  ./x\n")
    with pytest.raises(ValueError):
        parse_coreutils_output("sha256", good)  # an md5 is too short for sha256
    with pytest.raises(ValueError):
        parse_coreutils_output("md5", b"Welcome!\n" + good)


def test_choose_remote_method_reports_why() -> None:
    assert choose_remote_method("sha256", {"sha256", "md5"}, True)[0] == "helper"
    method, why = choose_remote_method("sha256", None, True)
    assert method == "coreutils" and "unavailable" in why and "sha256sum" in why
    method, why = choose_remote_method("xxh128", set(STDLIB_ALGORITHMS), True)
    assert method == "sftp-readback" and "lacks xxh128" in why
    assert choose_remote_method("md5", None, False)[0] == "sftp-readback"
    assert choose_remote_method("blake2b", {"md5"}, True)[0] == "coreutils"


# -- over a real sshd (paramiko exec channel) --------------------------------


def test_helper_and_coreutils_over_real_ssh(sshd, remote_dir: Path) -> None:
    data = os.urandom(3 * BLOCK + 7)
    path = remote_dir / "over ssh $(x).bin"
    path.write_bytes(data)
    kw = sshd.connect_kwargs()
    client = paramiko.SSHClient()
    client.load_host_keys(kw["known_hosts"])
    client.connect(
        kw["host"],
        port=kw["port"],
        username=kw["username"],
        key_filename=kw["key_filename"],
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    try:

        def open_channel(command: str):
            stdin, stdout, _ = client.exec_command(command, timeout=20)

            def write(chunk: bytes) -> None:
                stdin.write(chunk)
                stdin.flush()

            return write, stdout.readline, stdin.channel.shutdown_write

        with ChecksumHelperClient(open_channel, where=f"{sshd.host}:{sshd.port}") as helper:
            got = helper.digest(path, "sha256", block_size=BLOCK)
            assert got.digests == file_digests("sha256", path, BLOCK)
            with pytest.raises(RemoteFileNotFoundError):
                helper.digest(remote_dir / "absent")

        def run(command: str) -> tuple[int, bytes, bytes]:
            _, stdout, stderr = client.exec_command(command, timeout=20)
            out, err = stdout.read(), stderr.read()
            return stdout.channel.recv_exit_status(), out, err

        assert CoreutilsChecksummer(run).digest(path, "md5").digest == digest_bytes("md5", data)
    finally:
        client.close()
