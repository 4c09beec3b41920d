"""pytest support for tests over the emulated WAN (benchmarks/wan/link.py).

    from tests.support.wan import wan_testbed  # noqa: F401  (the fixture)

    def test_over_wan(wan_testbed):
        tb = wan_testbed(rtt_ms=50, rate_mbit=500)   # link + real sshd in dst
        with tb.in_src():                             # this thread now lives in src
            client.connect(**tb.sshd.connect_kwargs())

Layout: the code under test runs in the `src` namespace (10.77.0.1), a real
OpenSSH sshd runs in the `dst` namespace on 10.77.0.2:2222, and every packet
between them crosses the emulator. From the host's own namespace 10.77.0.2 is
not on the link: it follows the host's default route (which, in some sandboxes,
even accepts TCP connections). So a test that measures the link should also
check that its traffic crossed it: `tb.link.stats()` counters, or timing.

Running code in src, two ways:
- In-process, `tb.in_src()` / `tb.call_in_src(fn)`: the *calling thread*
  setns()es into src for the block (Linux namespaces are per thread). Sockets
  created in the block stay in src afterwards; threads started in the block
  (paramiko's transport thread, a ThreadPoolExecutor's workers created there)
  inherit src. Limits: threads that already existed are NOT in src (a pool made
  before the block would connect from the host namespace and fail), and
  asyncio/loop threads must likewise be created inside. Needs root.
- Out of process, `tb.run_in_src(argv)` / `tb.python_in_src(args)`: a
  subprocess under `ip netns exec`; everything it does is in src. Slower to
  start (~0.1 s + imports) but no thread caveats.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from benchmarks.wan.link import EmulatedLink
from tests.support.sshd import SSHServer, chown_to_user

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]

__all__ = ["WanTestbed", "require_wan", "wan_testbed"]


def require_wan() -> None:
    """Fails the test (never skips it) with what to do when this host cannot emulate a WAN."""
    if os.geteuid() != 0:
        pytest.fail(
            "WAN tests need root (network namespaces, TUN devices): run them as root, as CI does "
            "(e.g. `sudo .venv/bin/python -m pytest tests/test_wan_emulator.py`)",
            pytrace=False,
        )
    missing = [tool for tool in ("gcc", "ip", "iperf3", "ping") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"WAN tests need {', '.join(missing)}: run `bash scripts/install-wan-deps.sh` as root", pytrace=False
        )
    if not os.path.exists("/dev/net/tun"):
        pytest.fail("WAN tests need /dev/net/tun: run `bash scripts/install-wan-deps.sh` as root", pytrace=False)


@dataclass
class WanTestbed:
    """An emulated link, optionally with an sshd in dst, and helpers to run code in src."""

    link: EmulatedLink
    base: Path  # world-traversable scratch directory (sshd keys, remote dirs)
    sshd: SSHServer | None = None
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def start(
        cls,
        rtt_ms: float = 50,
        rate_mbit: float = 500,
        queue_bytes: int | None = None,
        sshd: bool = True,
        **link_kwargs: Any,
    ) -> WanTestbed:
        require_wan()
        base = Path(tempfile.mkdtemp(prefix="at-wan-"))
        os.chmod(base, 0o755)  # the sshd's unprivileged login user must traverse it
        link = EmulatedLink(rtt_ms, rate_mbit, queue_bytes, **link_kwargs)
        tb = cls(link=link, base=base)
        try:
            link.up()
            if sshd:
                tb.sshd = SSHServer(base / "sshd", host=link.dst_addr, netns=link.dst_ns).start()
        except BaseException:
            tb.close()
            raise
        return tb

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.sshd is not None:
                self.sshd.stop()
        finally:
            try:
                self.link.down()
            finally:
                shutil.rmtree(self.base, ignore_errors=True)

    # -- code under test, in src ------------------------------------------------
    def in_src(self) -> AbstractContextManager[None]:
        """The calling thread enters src for the block (see the module docstring for limits)."""
        return self.link.inside("src")

    def call_in_src(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) with the calling thread in src; sockets it opens stay in src."""
        with self.in_src():
            return fn(*args, **kwargs)

    def run_in_src(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """A command to completion inside src (text output captured; raises on failure unless check=False)."""
        return self.link.run("src", argv, **kwargs)

    def python_in_src(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """This venv's Python inside src, with the repository importable: python_in_src(["-c", code])."""
        env = {**os.environ, **kwargs.pop("env", {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        return self.link.run("src", [sys.executable, *args], env=env, cwd=kwargs.pop("cwd", REPO_ROOT), **kwargs)

    # -- the dst side ----------------------------------------------------------
    def remote_dir(self, name: str | None = None) -> Path:
        """An empty directory the sshd's login user owns (the files live on this host's disk)."""
        if self.sshd is None:
            raise RuntimeError("this testbed was started with sshd=False: there is no remote side")
        path = self.base / "remote" / (name or uuid.uuid4().hex[:10])
        path.mkdir(parents=True)
        os.chmod(path.parent, 0o755)
        chown_to_user(path, self.sshd.user)
        return path


@pytest.fixture
def wan_testbed() -> Iterator[Callable[..., WanTestbed]]:
    """Factory: wan_testbed(rtt_ms=50, rate_mbit=500, queue_bytes=None, sshd=True, **link_kwargs).

    Each call brings up its own link (and sshd in dst); all are torn down after
    the test, whatever its outcome. Fails, never skips, when not root.
    """
    made: list[WanTestbed] = []

    def make(
        rtt_ms: float = 50,
        rate_mbit: float = 500,
        queue_bytes: int | None = None,
        sshd: bool = True,
        **link_kwargs: Any,
    ) -> WanTestbed:
        tb = WanTestbed.start(rtt_ms, rate_mbit, queue_bytes, sshd, **link_kwargs)
        made.append(tb)
        return tb

    yield make
    errors = []
    for tb in reversed(made):
        try:
            tb.close()
        except Exception as exc:  # noqa: BLE001 - tear every testbed down before reporting
            errors.append(exc)
    if errors:
        raise errors[0]
