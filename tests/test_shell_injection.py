"""Names that a shell would execute, against a real OpenSSH sshd: nothing runs but our own code.

The remote checksum helper, the coreutils fall-back, the remote lister and the
profilers all start commands over SSH exec, where the server's login shell
parses the command line. Every file and directory name here would run
`touch` if it ever reached that shell unquoted; the tests assert the marker
files never appear and the copies are byte-identical both ways.
"""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_transfer.profiling.hosts import parse_host
from airflow_transfer.profiling.library import profile_host
from airflow_transfer.profiling.remote import HostRunner
from airflow_transfer.store import Store
from tests.support.cli import run_cli, ssh_args
from tests.support.sshd import SSHServer, chown_to_user

SLASH = "$(printf '\\57')"  # "/" once a shell runs it: an absolute marker path in a name without '/'


def hostile_names(tag: str) -> list[str]:
    marker = f"{SLASH}tmp{SLASH}pwned-{tag}"
    return [
        f"$(touch {marker}-a)",
        f"x; touch {marker}-b; y",
        f"`touch {marker}-c`",
        f"q'$(touch {marker}-d)'q",
        f'dq"$(touch {marker}-e)"dq',
        f"-n leading dash $(touch pwned-{tag}-f)",
        "sp ace & | > < * ~ ! \\ back",
    ]


def test_names_hold_no_slash():
    assert all("/" not in name for name in hostile_names("x"))


def make_tree(root: Path, tag: str) -> dict[str, bytes]:
    """Files under hostile names, in hostile directories; returns {relative path: content}."""
    names = hostile_names(tag)
    out = {}
    for i, name in enumerate(names):
        out[name] = os.urandom(1000 + 37 * i)
        out[f"{names[(i + 1) % len(names)]}.d/{name}"] = os.urandom(70_000 + i)
    for rel, body in out.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return out


def read_tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = full.read_bytes()
    return out


def assert_no_markers(tag: str, *dirs: Path) -> None:
    found = glob.glob(f"/tmp/pwned-{tag}*")
    for d in dirs:
        found += glob.glob(f"{glob.escape(str(d))}/pwned-{tag}*")
    assert found == [], f"a name was executed by a shell: {found}"


def home_of(user: str) -> Path:
    import pwd

    return Path(pwd.getpwnam(user).pw_dir)


@pytest.fixture(scope="module")
def sshd_no_python(test_base):
    """An sshd whose sessions find coreutils but no python3: verification falls back to
    one coreutils command per file, listing to SFTP readdir."""
    bin_dir = test_base / "no-python-bin"
    bin_dir.mkdir(exist_ok=True)
    os.chmod(bin_dir, 0o755)
    for tool in ("sh", "env", "sync", "dd", "wc", "sha256sum", "md5sum", "cat", "printf"):
        path = shutil.which(tool)
        if path and not (bin_dir / tool).exists():
            os.symlink(path, bin_dir / tool)
    server = SSHServer(test_base / "sshd-no-python", extra_config=f"SetEnv PATH={bin_dir}").start()
    yield server
    server.stop()


def remote_root(base: Path, user: str) -> Path:
    path = base / "remote" / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    chown_to_user(path, user)
    return path


def _url(server: SSHServer, path: Path) -> str:
    return server.url(quote(str(path), safe="/"))


def _round_trip(
    server: SSHServer, tmp_path: Path, base: Path, tag: str, where_up: str, where_down: str, *up_args: str
) -> None:
    names = hostile_names(tag)
    local = tmp_path / names[0]  # the roots are hostile too
    files = make_tree(local, tag)
    remote = remote_root(base, server.user) / names[2]
    up = run_cli("copy", str(local), _url(server, remote), *ssh_args(server), "--json", *up_args, timeout=240)
    assert up.code == 0, up.err
    where = up.summary["verify"]["where"]
    assert where == where_up or (where_up == "bundle sink" and where.startswith("bundle sink (")), up.summary["verify"]
    assert up.summary["verify"]["verified"] == len(files)
    assert read_tree(remote) == files

    back = tmp_path / names[1]
    down = run_cli("copy", _url(server, remote), str(back), *ssh_args(server), "--json", *up_args, timeout=240)
    assert down.code == 0, down.err
    where = down.summary["verify"]["where"]
    assert where == where_down or (where_down.startswith("bundle helper") and where.startswith(where_down)), where
    assert down.summary["verify"]["verified"] == len(files)
    assert read_tree(back) == files
    assert_no_markers(tag, home_of(server.user), Path.cwd(), tmp_path, remote.parent)


def test_hostile_names_round_trip_with_the_remote_helper(sshd, tmp_path, test_base):
    tag = uuid.uuid4().hex[:8]
    # Over SFTP one by one (both ways), so every name goes through the checksum helper's requests.
    _round_trip(sshd, tmp_path, test_base, tag, "helper", "source helper, destination local", "--no-bundle")


def test_hostile_names_round_trip_in_bundles(sshd, tmp_path, test_base):
    tag = uuid.uuid4().hex[:8]
    # Every file is under 1 MiB: all travel in bundles, their names in the helper's headers and gets.
    _round_trip(sshd, tmp_path, test_base, tag, "bundle sink", "bundle helper digests at the source, checked here (")


def test_hostile_names_round_trip_with_the_coreutils_fallback(sshd_no_python, tmp_path, test_base):
    tag = uuid.uuid4().hex[:8]
    _round_trip(sshd_no_python, tmp_path, test_base, tag, "coreutils", "source coreutils, destination local")


def test_disk_profiler_in_a_hostile_remote_directory(sshd, tmp_path, test_base):
    tag = uuid.uuid4().hex[:8]
    target = remote_root(test_base, sshd.user) / hostile_names(tag)[3] / hostile_names(tag)[5]
    target.mkdir(parents=True)
    chown_to_user(target.parent, sshd.user)
    host = parse_host(_url(sshd, target), None, str(sshd.client_key), str(sshd.known_hosts))
    assert host.path == str(target)
    store = Store.open(f"sqlite:///{tmp_path / 'lib.db'}")
    try:
        with HostRunner(host) as runner:
            out = profile_host(store, runner, kinds=("disk",), quick=True)
    finally:
        store.close()
    assert out["disk"]["ok"], out
    assert out["disk"]["summary"]["write"]["best_block"] > 0
    assert os.listdir(target) == []  # the profiler cleaned up after itself, in that very directory
    assert_no_markers(tag, home_of(sshd.user), Path.cwd(), target.parent)
