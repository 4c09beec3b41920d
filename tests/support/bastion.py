"""A real sshd reachable only through a real bastion sshd (network namespaces; needs root).

    from tests.support.bastion import bastion_site  # noqa: F401  (the fixture)

    def test_x(bastion_site):
        site = bastion_site                      # one per test module
        site.ssh_config                          # Host bastion / Host target (ProxyJump bastion)

Layout: two namespaces joined by one veth pair and nothing else. The target's sshd listens
on 10.79.0.2:2222 in `target`; the bastion's sshd on 10.79.0.1:2222 in `bastion`, and a relay
in this process forwards 127.0.0.1:<port> of the host's own namespace to it. So the test
process (and every process it starts) reaches the bastion, the bastion reaches the target,
and nothing else reaches the target: no route leads into `target` from the host's namespace.

The relay counts the connections it carried and the target's sshd logs the address of every
client, so a test can check its traffic went through the bastion.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.wan import netns
from tests.support.sshd import SSHServer, chown_to_user

BASTION_ADDR = "10.79.0.1"
TARGET_ADDR = "10.79.0.2"
PREFIX = "at-jump-"  # not "at-<name>-src|dst": benchmarks.wan.link's cleanup never takes these for its own


def require_namespaces() -> None:
    """Fails (never skips) with what to do when this host cannot make network namespaces."""
    if os.geteuid() != 0:
        pytest.fail(
            "bastion tests need root (network namespaces): run them as root, as CI does "
            "(e.g. `sudo .venv/bin/python -m pytest tests/test_bastion.py`)",
            pytrace=False,
        )
    if shutil.which("ip") is None:
        pytest.fail("bastion tests need `ip` (iproute2): run `bash scripts/install-wan-deps.sh` as root", pytrace=False)


class Relay:
    """127.0.0.1:<port> in this namespace -> (host, port) inside namespace `ns`, byte for byte."""

    def __init__(self, ns: str, host: str, port: int) -> None:
        self.ns, self.host, self.port = ns, host, port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.local_port = self.listener.getsockname()[1]
        self.carried = 0  # connections forwarded so far
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="bastion-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            with netns.in_netns(self.ns):  # the socket keeps the namespace it was made in
                upstream = socket.create_connection((self.host, self.port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self.carried += 1
            self._socks += [client, upstream]
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                s.shutdown(how)

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()


@dataclass
class BastionSite:
    """The two sshds, the relay, and client files that name them (all under `base`)."""

    base: Path
    bastion_ns: str
    target_ns: str
    bastion: SSHServer
    target: SSHServer
    relay: Relay
    known_hosts: Path = field(init=False)
    ssh_config: Path = field(init=False)

    def __post_init__(self) -> None:
        self.known_hosts = self.base / "known_hosts"
        self.ssh_config = self.base / "ssh_config"

    @property
    def bastion_port(self) -> int:
        return self.relay.local_port

    def write_client_files(self) -> None:
        """known_hosts with both hosts (the bastion as the relay's address), and an ssh config
        naming `bastion` and `target` (ProxyJump bastion) and `target-cmd` (a ProxyCommand)."""
        bastion_key = (Path(str(self.bastion.host_key) + ".pub")).read_text().split()
        self.known_hosts.write_text(
            f"[127.0.0.1]:{self.bastion_port} {bastion_key[0]} {bastion_key[1]}\n" + self.target.known_hosts.read_text()
        )
        common = [
            f"  User {self.target.user}",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  StrictHostKeyChecking yes",
        ]
        self.ssh_config.write_text(
            "\n".join(
                [
                    "Host bastion",
                    "  HostName 127.0.0.1",
                    f"  Port {self.bastion_port}",
                    f"  IdentityFile {self.bastion.client_key}",
                    "  BatchMode yes",
                    *common,
                    "Host target",
                    f"  HostName {self.target.host}",
                    f"  Port {self.target.port}",
                    f"  IdentityFile {self.target.client_key}",
                    "  ProxyJump bastion",
                    *common,
                    "Host target-cmd",
                    f"  HostName {self.target.host}",
                    f"  Port {self.target.port}",
                    f"  IdentityFile {self.target.client_key}",
                    f"  ProxyCommand ssh -F {self.ssh_config} -W %h:%p bastion",
                    *common,
                    "",
                ]
            )
        )

    def remote_dir(self, name: str | None = None) -> Path:
        """An empty directory the target's login user owns (it lives on this host's disk)."""
        path = self.base / "remote" / (name or uuid.uuid4().hex[:10])
        path.mkdir(parents=True)
        os.chmod(path.parent, 0o755)
        chown_to_user(path, self.target.user)
        return path

    def target_clients(self) -> list[str]:
        """The client address of every connection the target's sshd accepted."""
        return re.findall(r"Connection from (\S+) port \d+", self.target.log_text())

    def close(self) -> None:
        try:
            self.relay.close()
            for server in (self.target, self.bastion):
                server.stop()
        finally:
            for ns in (self.target_ns, self.bastion_ns):
                netns.delete(ns)
            shutil.rmtree(self.base, ignore_errors=True)


def _remove_stale() -> None:
    """Namespaces an earlier, killed run left: their names carry the pid that made them."""
    for ns in netns.names():
        m = re.match(rf"^{PREFIX}(\d+)-", ns)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            netns.delete(ns)


def start_site() -> BastionSite:
    require_namespaces()
    _remove_stale()
    tag = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    bastion_ns, target_ns = f"{tag}-b", f"{tag}-t"
    base = Path(tempfile.mkdtemp(prefix="at-bastion-"))
    os.chmod(base, 0o755)  # the sshds' unprivileged login user must traverse it
    made: list[str] = []
    servers: list[SSHServer] = []
    try:
        for ns in (bastion_ns, target_ns):
            netns.add(ns)
            made.append(ns)
            netns.ip_batch(ns, ["link set lo up"])
        # One veth pair, made inside `bastion` with its peer inside `target`: the host's own
        # namespace never holds either end, so it has no route to the target.
        netns.ip_batch(
            bastion_ns,
            [
                f"link add vb0 type veth peer name vt0 netns {target_ns}",
                f"addr add {BASTION_ADDR}/24 dev vb0",
                "link set vb0 up",
            ],
        )
        netns.ip_batch(target_ns, [f"addr add {TARGET_ADDR}/24 dev vt0", "link set vt0 up"])
        servers.append(SSHServer(base / "target", host=TARGET_ADDR, netns=target_ns).start())
        servers.append(SSHServer(base / "bastion", host=BASTION_ADDR, netns=bastion_ns).start())
        target, bastion = servers
        # The bastion also accepts the target's key (sshd reads the file at each login): a jump
        # host with no key of its own in the config is tried with the far host's key.
        with open(bastion.authorized_keys, "a") as f:
            f.write(Path(str(target.client_key) + ".pub").read_text())
    except BaseException:
        for server in servers:
            server.stop()
        for ns in made:
            netns.delete(ns)
        shutil.rmtree(base, ignore_errors=True)
        raise
    relay = Relay(bastion_ns, BASTION_ADDR, bastion.port)
    site = BastionSite(base, bastion_ns, target_ns, bastion, target, relay)
    site.write_client_files()
    return site


@pytest.fixture(scope="module")
def bastion_site() -> Iterator[BastionSite]:
    site = start_site()
    try:
        yield site
    finally:
        site.close()
