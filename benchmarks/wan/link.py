"""An emulated WAN link between two network namespaces, `src` and `dst`.

    with EmulatedLink(rtt_ms=50, rate_mbit=500) as link:
        link.run_in("dst", ["iperf3", "-s", "-1"])
        link.run("src", ["iperf3", "-c", link.dst_addr, "-t", "4"])

Each link is two namespaces `at-<name>-src` / `at-<name>-dst` with a TUN
device `wan0` in each (10.77.0.1/24 in src, 10.77.0.2/24 in dst; the traffic
never leaves the namespaces) and a C emulator (linkemu.c) forwarding between
the two devices with a rate, a one-way delay and a drop-tail queue. How it
works, the congestion-control choice and measured fidelity: docs/testbed.md.

Shell: python -m benchmarks.wan.link up --profile wan50 | down | cleanup | status
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.wan import netns
from benchmarks.wan.build import BINARY_PREFIX, emulator_binary

# name: (rtt_ms, rate_mbit)
PROFILES: dict[str, tuple[float, float]] = {
    "wan50": (50.0, 500.0),
    "wan100": (100.0, 500.0),
    "lan": (1.0, 1000.0),
    # Between the LAN and wan50: where an upload's bundles change carrier (engine/bundle_carrier.py).
    "wan5": (5.0, 500.0),
    "wan10": (10.0, 500.0),
}

PREFIX = "at-"  # every namespace and emulator this project creates carries it
STATE_DIR = Path("/run/airflow-transfer-wan")  # tmpfs: cleared by a reboot, like the namespaces
DEVICE = "wan0"
SRC_ADDR = "10.77.0.1"
DST_ADDR = "10.77.0.2"
MTU = 1500
TXQUEUELEN = 10000
# Enough for several BDPs of window at 1 Gbit/s x 200 ms; the kernel only
# grows a socket's buffers this far when the path needs it.
TCP_MEM_MAX = 64 * 1024 * 1024
# With offload the emulator queues TSO frames of up to 64 KiB and drops a frame
# whole, so the queue holds at least four of them: a one-BDP queue on `lan`
# (125 KB) would drop every third burst. Real 1 GbE switch ports buffer more.
MIN_QUEUE_BYTES = 4 * 64 * 1024
MIN_RING_BYTES = 32 * 1024 * 1024
DEFAULT_CC = "cubic"

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_counter = itertools.count()
_live: set[EmulatedLink] = set()
_live_lock = threading.Lock()
_handlers_installed = False


@dataclass
class _State:
    """What a later process (cleanup, `down`, `set`) needs to find a link again."""

    name: str
    src_ns: str
    dst_ns: str
    owner_pid: int
    owner_start: str
    detached: bool
    emulator_pid: int
    rtt_ms: float
    rate_mbit: float
    reverse_rate_mbit: float
    queue_bytes: int | None  # None: one BDP, following rtt and rate
    cc: str
    ring_bytes: int
    loss: float = 0.0  # random loss per packet, both directions


def _ppb(probability: float) -> int:
    """A loss probability as the emulator takes it: parts per billion."""
    return round(probability * 1e9)


def bdp_bytes(rtt_ms: float, rate_mbit: float) -> int:
    """Bandwidth-delay product, BDP = bandwidth x RTT (Yildirim et al., IEEE TCC 2016)."""
    return int(rate_mbit * 1e6 / 8 * rtt_ms / 1e3)


def _process_start(pid: int) -> str:
    """Start time of `pid` in clock ticks since boot, so a reused pid is not mistaken for the owner."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _check_host() -> None:
    if os.geteuid() != 0:
        raise RuntimeError(
            "the emulated WAN link needs root (it creates network namespaces and TUN devices): "
            "run the tests or `python -m benchmarks.wan.link` as root"
        )
    if shutil.which("ip") is None:
        raise RuntimeError("`ip` (iproute2) not found: run `bash scripts/install-wan-deps.sh` as root")
    if not os.path.exists("/dev/net/tun"):
        raise RuntimeError(
            "/dev/net/tun is missing: load the tun module (`modprobe tun`) or run where TUN devices are allowed"
        )


def _allow_congestion_control(cc: str) -> None:
    """Lets namespaces use `cc` as their default.

    A namespace other than the host's may only pick a default from
    net.ipv4.tcp_allowed_congestion_control (reno and bbr here). That list is
    host-wide; we add `cc` to it and remove nothing. Adding only changes which
    algorithms unprivileged sockets may ask for; the host's own default stays.
    """
    allowed_path = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    allowed = allowed_path.read_text().split()
    if cc in allowed:
        return
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if cc not in available:
        subprocess.run(["modprobe", f"tcp_{cc}"], capture_output=True)
        available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if cc not in available:
        raise RuntimeError(
            f"congestion control {cc!r} is not available in this kernel (have: {' '.join(available)}): "
            "pass cc= one of those"
        )
    allowed_path.write_text(" ".join([*allowed, cc]))


class EmulatedLink(AbstractContextManager):
    """Two namespaces joined by an emulated link of `rtt_ms` and `rate_mbit`.

    `queue_bytes=None` sizes the drop-tail queue at one BDP of each direction
    and keeps it at one BDP when `set()` changes rate or RTT. `cc` is the
    default TCP congestion control inside both namespaces (see docs/testbed.md).
    `offload=False` makes the emulator move one 1500-byte packet per read and
    write instead of the kernels' TSO super-frames (docs/testbed.md, "Offload");
    the default comes from AT_LINK_OFFLOAD (unset: on). `loss` is a random,
    independent loss probability per packet in both directions (docs/testbed.md,
    "Random loss"); with offload a TSO frame is lost whole if any of its packets is,
    so measure loss-bound TCP with `offload=False`.
    """

    src_addr = SRC_ADDR
    dst_addr = DST_ADDR
    device = DEVICE

    def __init__(
        self,
        rtt_ms: float = 50,
        rate_mbit: float = 500,
        queue_bytes: int | None = None,
        name: str | None = None,
        *,
        reverse_rate_mbit: float | None = None,
        cc: str = DEFAULT_CC,
        ring_bytes: int | None = None,
        offload: bool | None = None,
        loss: float = 0.0,
    ) -> None:
        if not 0.0 <= loss <= 1.0:
            raise ValueError(f"EmulatedLink needs a loss probability in [0, 1], got {loss}")
        if rtt_ms < 0 or rate_mbit <= 0 or (reverse_rate_mbit is not None and reverse_rate_mbit <= 0):
            raise ValueError(
                f"EmulatedLink needs rtt_ms >= 0 and rates > 0, got rtt_ms={rtt_ms}, rate_mbit={rate_mbit}"
            )
        if name is None:
            name = f"{os.getpid()}-{next(_counter)}"
        if not name.startswith(PREFIX):
            name = PREFIX + name
        if not _NAME_RE.match(name):
            raise ValueError(f"link name {name!r}: use at most 40 letters, digits, '.', '_' or '-'")
        self.name = name
        self.rtt_ms = float(rtt_ms)
        self.rate_mbit = float(rate_mbit)
        self.reverse_rate_mbit = float(reverse_rate_mbit or rate_mbit)
        self.queue_bytes = queue_bytes
        self.cc = cc
        self.loss = float(loss)
        if offload is None:
            offload = os.environ.get("AT_LINK_OFFLOAD", "1").strip().lower() not in ("0", "no", "off", "false")
        self.offload = offload
        self.ring_bytes = ring_bytes or self._ring_needed(self.rtt_ms, max(self.rate_mbit, self.reverse_rate_mbit))
        self._emulator: subprocess.Popen | None = None
        self._emulator_pid = 0
        self._detached = False
        self._owner = (0, "")  # (pid, start time) of the process that brought the link up

    # -- names and addresses -------------------------------------------------
    @property
    def src_ns(self) -> str:
        return f"{self.name}-src"

    @property
    def dst_ns(self) -> str:
        return f"{self.name}-dst"

    @property
    def bdp_bytes(self) -> int:
        return bdp_bytes(self.rtt_ms, self.rate_mbit)

    def ns(self, which: str) -> str:
        """'src' or 'dst' (or a namespace name of this link) -> namespace name."""
        if which in ("src", self.src_ns):
            return self.src_ns
        if which in ("dst", self.dst_ns):
            return self.dst_ns
        raise ValueError(f"unknown namespace {which!r} for link {self.name}: use 'src' or 'dst'")

    @property
    def control_path(self) -> Path:
        return STATE_DIR / f"{self.name}.sock"

    @property
    def _state_path(self) -> Path:
        return STATE_DIR / f"{self.name}.json"

    @property
    def log_path(self) -> Path:
        return STATE_DIR / f"{self.name}.log"

    # -- lifecycle -------------------------------------------------------------
    def up(self, *, detached: bool = False) -> EmulatedLink:
        """Creates both namespaces and starts the emulator; returns when packets flow.

        `detached=True` lets the link outlive this process (the shell `up`);
        otherwise it is torn down at exit, on SIGTERM/SIGHUP, and the emulator
        exits by itself if this process dies.
        """
        _check_host()
        try:
            cleanup(everything=False)  # leftovers of crashed runs, never another live run's links
        except (RuntimeError, OSError) as exc:  # our own names are unique: a stuck leftover need not stop us
            print(
                f"benchmarks.wan: could not remove a stale link ({exc}); try `python -m benchmarks.wan.link cleanup`",
                file=sys.stderr,
            )
        if self._state_path.exists() or netns.exists(self.src_ns) or netns.exists(self.dst_ns):
            raise RuntimeError(
                f"link {self.name} already exists: bring it down first "
                f"(`python -m benchmarks.wan.link down --name {self.name}`) or pick another name"
            )
        binary = emulator_binary()
        _allow_congestion_control(self.cc)
        STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._detached = detached
        self._owner = (os.getpid(), _process_start(os.getpid()))
        self._write_state()  # before the namespaces, so a crash mid-way is still found by cleanup
        _register(self)
        try:
            for ns, addr in ((self.src_ns, SRC_ADDR), (self.dst_ns, DST_ADDR)):
                self._make_namespace(ns, addr)
            self._start_emulator(binary)
            self._write_state()
        except BaseException:
            self.down()
            raise
        return self

    def _make_namespace(self, ns: str, addr: str) -> None:
        netns.add(ns)
        sysctls = {
            "net.ipv4.tcp_congestion_control": self.cc,
            # Each test starts from a cold path, not from the last run's cwnd/ssthresh.
            "net.ipv4.tcp_no_metrics_save": "1",
            "net.ipv4.tcp_wmem": f"4096 16384 {TCP_MEM_MAX}",
            "net.ipv4.tcp_rmem": f"4096 131072 {TCP_MEM_MAX}",
        }
        if Path("/proc/sys/net/ipv6").exists():
            # No IPv6 autoconfiguration chatter on the emulated link.
            sysctls["net.ipv6.conf.default.disable_ipv6"] = "1"
        netns.write_sysctls(ns, sysctls)
        netns.ip_batch(
            ns,
            [
                "link set lo up",
                f"tuntap add dev {DEVICE} mode tun",
                # The TUN queue absorbs bursts between the emulator's ~100 us wake-ups.
                f"link set {DEVICE} mtu {MTU} txqueuelen {TXQUEUELEN} up",
                f"addr add {addr}/24 dev {DEVICE}",
            ],
        )

    def _start_emulator(self, binary: Path) -> None:
        delay_us = int(self.rtt_ms * 1000 / 2)
        argv = [
            str(binary),
            "--tag",
            self.name,
            "--src-ns",
            str(netns.NETNS_DIR / self.src_ns),
            "--dst-ns",
            str(netns.NETNS_DIR / self.dst_ns),
            "--dev",
            DEVICE,
            "--ctl",
            str(self.control_path),
            "--delay-us",
            str(delay_us),
            "--rate-bps",
            str(int(self.rate_mbit * 1e6)),
            "--rate-bps-rev",
            str(int(self.reverse_rate_mbit * 1e6)),
            "--queue-bytes",
            str(self._queue_for(self.rate_mbit)),
            "--ring-bytes",
            str(self.ring_bytes),
            "--loss-ppb",
            str(_ppb(self.loss)),
        ]
        if not self._detached:
            argv.append("--watch-stdin")
        if not self.offload:
            argv.append("--no-offload")
        with open(self.log_path, "ab") as log:
            self._emulator = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL if self._detached else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a Ctrl-C in the terminal is handled by us, in order
            )
        self._emulator_pid = self._emulator.pid
        assert self._emulator.stdout is not None
        ready, _, _ = select.select([self._emulator.stdout], [], [], 10.0)
        line = self._emulator.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self._emulator.kill()
            self._emulator.wait()
            raise RuntimeError(f"link emulator for {self.name} did not start: {self._log_tail()}")
        if self._detached:
            self._emulator.stdout.close()
        if (self._queue_for(self.reverse_rate_mbit)) != self._queue_for(self.rate_mbit):
            self._control(f"set dir=rev queue_bytes={self._queue_for(self.reverse_rate_mbit)}")

    def down(self) -> None:
        """Kills everything inside both namespaces, stops the emulator, removes the namespaces. Idempotent."""
        errors = []
        for ns in (self.src_ns, self.dst_ns):
            try:
                netns.kill_all(ns)
            except OSError as exc:
                errors.append(str(exc))
        self._stop_emulator()
        for ns in (self.src_ns, self.dst_ns):
            try:
                netns.delete(ns)
            except RuntimeError as exc:
                errors.append(str(exc))
        for path in (self._state_path, self.control_path, self.log_path):
            path.unlink(missing_ok=True)
        _unregister(self)
        if errors:
            raise RuntimeError(f"tearing down link {self.name}: {'; '.join(errors)}")

    def _stop_emulator(self) -> None:
        proc = self._emulator
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()  # end of file on its stdin: it exits on its own
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None and not proc.stdout.closed:
                proc.stdout.close()
            self._emulator = None
        elif self._emulator_pid:
            _kill_emulator(self._emulator_pid, self.name)
        self._emulator_pid = 0

    def __enter__(self) -> EmulatedLink:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- changing the link while it runs ----------------------------------------
    def set(
        self,
        *,
        rate_mbit: float | None = None,
        rtt_ms: float | None = None,
        queue_bytes: int | None = None,
        reverse_rate_mbit: float | None = None,
        loss: float | None = None,
    ) -> None:
        """Changes rate (both directions unless `reverse_rate_mbit` is given), RTT,
        queue and/or random loss while traffic flows. Packets already queued keep their schedule."""
        if rtt_ms is not None and rtt_ms < 0 or any(r is not None and r <= 0 for r in (rate_mbit, reverse_rate_mbit)):
            raise ValueError("set() needs rtt_ms >= 0 and rates > 0")
        if loss is not None and not 0.0 <= loss <= 1.0:
            raise ValueError(f"set() needs a loss probability in [0, 1], got {loss}")
        before = (self.rtt_ms, self.rate_mbit, self.reverse_rate_mbit, self.queue_bytes)
        if rtt_ms is not None:
            self.rtt_ms = float(rtt_ms)
        if rate_mbit is not None:
            self.rate_mbit = float(rate_mbit)
            if reverse_rate_mbit is None:
                self.reverse_rate_mbit = float(rate_mbit)
        if reverse_rate_mbit is not None:
            self.reverse_rate_mbit = float(reverse_rate_mbit)
        if queue_bytes is not None:
            self.queue_bytes = queue_bytes
        need = self._ring_needed(self.rtt_ms, max(self.rate_mbit, self.reverse_rate_mbit))
        if need > self.ring_bytes:
            self.rtt_ms, self.rate_mbit, self.reverse_rate_mbit, self.queue_bytes = before
            raise ValueError(
                f"link {self.name}: rtt {self.rtt_ms} ms at {self.rate_mbit} Mbit/s needs a {need}-byte ring, "
                f"it was started with {self.ring_bytes}: bring it up with ring_bytes={need}"
            )
        if loss is not None:
            self.loss = float(loss)
        delay = f"delay_us={int(self.rtt_ms * 1000 / 2)}"
        for direction, rate in (("fwd", self.rate_mbit), ("rev", self.reverse_rate_mbit)):
            self._control(
                f"set dir={direction} {delay} rate_bps={int(rate * 1e6)} queue_bytes={self._queue_for(rate)} "
                f"loss_ppb={_ppb(self.loss)}"
            )
        self._write_state()

    def blackhole(self, seconds: float) -> None:
        """Drops every packet, both ways, for `seconds` from now (returns at once)."""
        self._control(f"blackhole ms={max(0, int(seconds * 1000))}")

    def stats(self) -> dict[str, dict[str, int]]:
        """Emulator counters per direction ('fwd' = src->dst, 'rev'): packets, bytes, drops."""
        reply = self._control("stats")
        out: dict[str, dict[str, int]] = {}
        for part in reply.split(";"):
            words = part.split()
            out[words[0]] = {k: int(v) for k, v in (w.split("=", 1) for w in words[1:])}
        return out

    def _control(self, command: str) -> str:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(3)
                s.connect(str(self.control_path))
                s.sendall(command.encode() + b"\n")
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
        except OSError as exc:
            raise RuntimeError(
                f"link {self.name}: emulator does not answer on {self.control_path} ({exc}); is the link up?"
            ) from exc
        text = reply.decode().strip()
        if text.startswith("error"):
            raise RuntimeError(f"link {self.name} emulator refused {command!r}: {text}")
        return text

    # -- running things inside -----------------------------------------------
    def run_in(self, ns: str, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Starts `argv` inside namespace 'src' or 'dst'; it is killed by `down()` if still running."""
        return subprocess.Popen(["ip", "netns", "exec", self.ns(ns), *argv], **popen_kwargs)

    def run(
        self, ns: str, argv: list[str], *, timeout: float = 60, check: bool = True, **kwargs: Any
    ) -> subprocess.CompletedProcess:
        """Runs `argv` to completion inside 'src' or 'dst', capturing text output."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        done = subprocess.run(["ip", "netns", "exec", self.ns(ns), *argv], timeout=timeout, **kwargs)
        if check and done.returncode != 0:
            raise RuntimeError(
                f"`{' '.join(argv)}` in {self.ns(ns)} exited {done.returncode}: {(done.stderr or '').strip()[-500:]}"
            )
        return done

    def inside(self, ns: str) -> AbstractContextManager[None]:
        """In-process: the calling thread enters 'src' or 'dst' for the block (see netns.in_netns)."""
        return netns.in_netns(self.ns(ns))

    # -- internals ---------------------------------------------------------------
    def _queue_for(self, rate_mbit: float) -> int:
        if self.queue_bytes is not None:
            return int(self.queue_bytes)
        return max(MIN_QUEUE_BYTES, bdp_bytes(self.rtt_ms, rate_mbit))

    def _ring_needed(self, rtt_ms: float, rate_mbit: float) -> int:
        # The ring holds the queue plus everything in the one-way delay line; twice that for headroom.
        queue = self.queue_bytes if self.queue_bytes is not None else bdp_bytes(rtt_ms, rate_mbit)
        return max(MIN_RING_BYTES, 2 * (int(queue) + bdp_bytes(rtt_ms / 2, rate_mbit)))

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace").strip()[-1000:] or "(no output)"
        except FileNotFoundError:
            return "(no log)"

    def _write_state(self) -> None:
        state = _State(
            name=self.name,
            src_ns=self.src_ns,
            dst_ns=self.dst_ns,
            owner_pid=self._owner[0],
            owner_start=self._owner[1],
            detached=self._detached,
            emulator_pid=self._emulator_pid,
            rtt_ms=self.rtt_ms,
            rate_mbit=self.rate_mbit,
            reverse_rate_mbit=self.reverse_rate_mbit,
            queue_bytes=self.queue_bytes,
            cc=self.cc,
            loss=self.loss,
            ring_bytes=self.ring_bytes,
        )
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state)))
        tmp.replace(self._state_path)

    @classmethod
    def attach(cls, name: str) -> EmulatedLink:
        """A handle on a link another process brought up (e.g. the shell `up`)."""
        if not name.startswith(PREFIX):
            name = PREFIX + name
        try:
            state = _State(**json.loads((STATE_DIR / f"{name}.json").read_text()))
        except FileNotFoundError:
            raise RuntimeError(f"no link named {name} is up (no {STATE_DIR / name}.json)") from None
        return cls._from_state(state)

    @classmethod
    def _from_state(cls, state: _State) -> EmulatedLink:
        link = cls(
            state.rtt_ms,
            state.rate_mbit,
            state.queue_bytes,
            state.name,
            reverse_rate_mbit=state.reverse_rate_mbit,
            cc=state.cc,
            ring_bytes=state.ring_bytes,
            loss=state.loss,
        )
        link._emulator_pid = state.emulator_pid
        link._detached = state.detached
        link._owner = (state.owner_pid, state.owner_start)
        return link

    def __repr__(self) -> str:
        return f"EmulatedLink(rtt_ms={self.rtt_ms}, rate_mbit={self.rate_mbit}, name={self.name!r})"


# -- crash safety: atexit, signals, leftovers -----------------------------------
def _register(link: EmulatedLink) -> None:
    global _handlers_installed
    with _live_lock:
        if link._detached:
            return
        _live.add(link)
        if _handlers_installed:
            return
        _handlers_installed = True
    atexit.register(_down_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                # Turn the signal into SystemExit so `with` blocks, fixtures and atexit run.
                signal.signal(sig, _exit_on_signal)


def _unregister(link: EmulatedLink) -> None:
    with _live_lock:
        _live.discard(link)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _down_all() -> None:
    with _live_lock:
        links = list(_live)
    for link in links:
        try:
            link.down()
        except Exception as exc:  # noqa: BLE001 - at exit: report and go on with the others
            print(f"benchmarks.wan: {exc}", file=sys.stderr)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _emulator_processes() -> dict[int, str]:
    """pid -> link name of every running emulator of ours."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if argv and os.path.basename(argv[0]).startswith(BINARY_PREFIX) and "--tag" in argv[:-1]:
            tag = argv[argv.index("--tag") + 1]
            if tag.startswith(PREFIX):
                found[int(entry.name)] = tag
    return found


def _kill_emulator(pid: int, name: str) -> None:
    if _emulator_processes().get(pid) != name:
        return  # gone already, or the pid now belongs to something else
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and pid in _emulator_processes():
        time.sleep(0.02)
    if pid in _emulator_processes():
        os.kill(pid, signal.SIGKILL)


def _states() -> list[_State]:
    out = []
    for path in sorted(STATE_DIR.glob(f"{PREFIX}*.json")) if STATE_DIR.exists() else []:
        try:
            out.append(_State(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out


def _is_stale(state: _State) -> bool:
    if state.detached:
        return False
    start = _process_start(state.owner_pid)
    return not start or start != state.owner_start


def _link_of_namespace(ns: str) -> str | None:
    m = re.match(rf"^({re.escape(PREFIX)}[A-Za-z0-9_.-]+)-(src|dst)$", ns)
    return m.group(1) if m else None


def cleanup(everything: bool = True) -> list[str]:
    """Removes links left behind; returns their names.

    everything=True (the shell `cleanup`): every namespace and emulator this
    project created, including live and detached ones. everything=False (run
    at each `up()`): only links whose owning process is gone (a crash, a
    SIGKILL), so concurrent test runs on one machine leave each other alone.
    """
    removed: set[str] = set()
    for state in _states():
        if everything or _is_stale(state):
            EmulatedLink._from_state(state).down()
            removed.add(state.name)

    # Orphans: namespaces or emulators without a state file (it is written
    # before either exists, so these are remains of an interrupted teardown).
    # Checked at the moment of deciding, not against the list read above: a
    # link another process brings up meanwhile has its state file already.
    def orphan(name: str) -> bool:
        return everything or not (STATE_DIR / f"{name}.json").exists()

    for ns in netns.names():
        name = _link_of_namespace(ns)
        if name and orphan(name):
            netns.delete(ns)
            removed.add(name)
    for pid, name in _emulator_processes().items():
        if orphan(name):
            _kill_emulator(pid, name)
            removed.add(name)
    return sorted(removed)


def leftovers() -> dict[str, list]:
    """Namespaces, emulator processes and state files of ours that exist now (for tests and `status`)."""
    return {
        "namespaces": [ns for ns in netns.names() if _link_of_namespace(ns)],
        "emulators": sorted(_emulator_processes().items()),
        "state_files": sorted(p.name for p in STATE_DIR.glob(f"{PREFIX}*")) if STATE_DIR.exists() else [],
    }


# -- shell entry points ------------------------------------------------------------
def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wan.link", description="Emulated WAN link between two network namespaces."
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring a link up and leave it running")
    up.add_argument("--profile", choices=sorted(PROFILES), default=None)
    up.add_argument("--rtt-ms", type=float)
    up.add_argument("--rate-mbit", type=float)
    up.add_argument("--queue-bytes", type=int)
    up.add_argument("--cc", default=DEFAULT_CC, help="TCP congestion control inside the namespaces (default cubic)")
    up.add_argument("--name", help="link name (default: the profile name, or 'manual')")
    down = sub.add_parser("down", help="tear down a link brought up with `up` (all of them without --name)")
    down.add_argument("--name")
    sub.add_parser("cleanup", help="remove every namespace and emulator this project created, live or stale")
    sub.add_parser("status", help="print the links that exist (JSON)")
    st = sub.add_parser("set", help="change a running link")
    st.add_argument("--name", required=True)
    st.add_argument("--rtt-ms", type=float)
    st.add_argument("--rate-mbit", type=float)
    st.add_argument("--queue-bytes", type=int)
    bh = sub.add_parser("blackhole", help="drop all packets for SECONDS")
    bh.add_argument("--name", required=True)
    bh.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    try:
        _check_host()
        if args.cmd == "up":
            rtt, rate = PROFILES[args.profile or "wan50"]
            as_profile = args.profile and args.rtt_ms is None and args.rate_mbit is None
            link = EmulatedLink(
                args.rtt_ms if args.rtt_ms is not None else rtt,
                args.rate_mbit if args.rate_mbit is not None else rate,
                args.queue_bytes,
                args.name or (args.profile if as_profile else "manual"),
                cc=args.cc,
            ).up(detached=True)
            print(
                json.dumps(
                    {
                        "name": link.name,
                        "src_ns": link.src_ns,
                        "dst_ns": link.dst_ns,
                        "src_addr": link.src_addr,
                        "dst_addr": link.dst_addr,
                        "rtt_ms": link.rtt_ms,
                        "rate_mbit": link.rate_mbit,
                        "queue_bytes": link._queue_for(link.rate_mbit),
                        "cc": link.cc,
                    }
                )
            )
            print(f"try: ip netns exec {link.src_ns} ping -c 3 {link.dst_addr}", file=sys.stderr)
        elif args.cmd == "down":
            wanted = (args.name, PREFIX + args.name) if args.name else None
            states = [s for s in _states() if s.detached and (wanted is None or s.name in wanted)]
            if args.name and not states:
                raise RuntimeError(f"no link named {args.name} was brought up with `up` (see `status`)")
            for state in states:
                EmulatedLink._from_state(state).down()
                print(f"down: {state.name}", file=sys.stderr)
        elif args.cmd == "cleanup":
            removed = cleanup(everything=True)
            print(f"removed: {' '.join(removed) or 'nothing'}", file=sys.stderr)
        elif args.cmd == "status":
            print(json.dumps({"links": [asdict(s) for s in _states()], **leftovers()}, indent=2))
        elif args.cmd == "set":
            EmulatedLink.attach(args.name).set(
                rtt_ms=args.rtt_ms, rate_mbit=args.rate_mbit, queue_bytes=args.queue_bytes
            )
        elif args.cmd == "blackhole":
            EmulatedLink.attach(args.name).blackhole(args.seconds)
    except RuntimeError as exc:
        print(f"benchmarks.wan.link {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
