"""Network profiler: kernel TCP limits, RTT, bottleneck bandwidth, hops.

Implements the network profiler of Stork (Kola, Kosar, Livny, Run-time Adaptation
of Grid Data Placement Jobs, 2003, section 4.2) with the standard library only:

- kernel TCP parameters from /proc (tcp_rmem, tcp_wmem, rmem_max, wmem_max,
  congestion control, window scaling);
- RTT by repeated TCP connects to host:port (a connect() returns after one
  SYN / SYN-ACK exchange, i.e. one round trip); median and min are reported;
- bandwidth by a real timed memory-to-memory transfer against this same file
  started as a sink (`--serve PORT`): the client sends (or receives) for T
  seconds over N streams and the receiver's byte count over the elapsed time
  gives Mbit/s. The paper checks its packet-dispersion estimate against real
  transfers; we use the real transfer only, since it is what the data sees;
- hop count and per-hop latency with `traceroute` (or `tracepath`) when one
  is installed, otherwise reported as unavailable with the reason.
  Per-hop latency is the increase of round-trip time from the previous
  answering hop, which is how the paper's tuner uses "hops with a latency
  greater than 10 ms".

`--light` is the periodic re-measurement (paper 003 section 4.2, "light-weight
network profiler"): RTT and a one-second bandwidth probe, no traceroute.

Modes:
  python3 -m profilers.network                       kernel limits of this host
  python3 -m profilers.network --serve PORT          sink/source for the probe
  python3 -m profilers.network --host H --port P     full client measurement

Runs on any python3 >= 3.8; one self-contained file (piped over SSH as
`ssh host python3 - ARGS < network.py`). Prints exactly one JSON object on
stdout. In --serve mode it also writes `READY <address> <port>` on stderr
once it listens, so a caller over SSH knows when to start the client.
"""

import argparse
import hmac
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

VERSION = 1
MAGIC = "ATNP1"  # wire protocol tag of the sink: "ATNP1 <token|-> <CMD> [args]\n"
CHUNK = 256 * 1024
HEADER_MAX = 512
HIGH_LATENCY_MS = 10.0  # paper 003 section 4.3: hops above 10 ms count as high-latency
MAX_SEND_SECONDS = 60.0  # a sink never streams longer than this per request

PROC_FILES = {
    "tcp_rmem": "/proc/sys/net/ipv4/tcp_rmem",
    "tcp_wmem": "/proc/sys/net/ipv4/tcp_wmem",
    "rmem_max": "/proc/sys/net/core/rmem_max",
    "wmem_max": "/proc/sys/net/core/wmem_max",
    "rmem_default": "/proc/sys/net/core/rmem_default",
    "wmem_default": "/proc/sys/net/core/wmem_default",
    "congestion_control": "/proc/sys/net/ipv4/tcp_congestion_control",
    "available_congestion_control": "/proc/sys/net/ipv4/tcp_available_congestion_control",
    "window_scaling": "/proc/sys/net/ipv4/tcp_window_scaling",
    "moderate_rcvbuf": "/proc/sys/net/ipv4/tcp_moderate_rcvbuf",
}


class Interrupted(BaseException):
    """Raised from a signal handler so the process stops cleanly."""


def _header() -> dict:
    return {
        "profiler": "network",
        "version": VERSION,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason}


# -- kernel limits ---------------------------------------------------------


def kernel_limits() -> dict:
    """The TCP buffer limits and congestion control of this host, from /proc.

    tcp_rmem / tcp_wmem are [min, default, max] of autotuned buffers; rmem_max /
    wmem_max cap buffers an application sets with SO_RCVBUF / SO_SNDBUF."""
    out = {"available": True}
    missing = {}
    for name, path in PROC_FILES.items():
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError as exc:
            out[name] = None
            missing[name] = "%s: %s" % (path, exc.strerror or exc)
            continue
        if name in ("tcp_rmem", "tcp_wmem"):
            out[name] = [int(v) for v in text.split()]
        elif name in ("window_scaling", "moderate_rcvbuf"):
            out[name] = text.strip() == "1"
        elif name == "available_congestion_control":
            out[name] = text.split()
        elif name == "congestion_control":
            out[name] = text
        else:
            out[name] = int(text)
    if len(missing) == len(PROC_FILES):
        return _unavailable("no TCP settings under /proc/sys/net (not Linux, or /proc not mounted)")
    if missing:
        out["missing"] = missing
    return out


# -- RTT -------------------------------------------------------------------


def _resolve(host: str, port: int):
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    if not infos:
        raise OSError("no address for %s" % host)
    return infos[0][0], infos[0][4]


def measure_rtt(host: str, port: int, count: int = 10, timeout: float = 3.0, interval: float = 0.02) -> dict:
    """Time `count` TCP connects to host:port; each is one SYN / SYN-ACK round trip."""
    try:
        family, address = _resolve(host, port)
    except OSError as exc:
        return dict(_unavailable("cannot resolve %s: %s" % (host, exc)), host=host, port=port)
    samples = []
    errors = []
    for i in range(count):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            start = time.perf_counter()
            sock.connect(address)
            samples.append((time.perf_counter() - start) * 1000.0)
        except OSError as exc:
            errors.append(str(exc) or exc.__class__.__name__)
        finally:
            sock.close()
        if interval and i + 1 < count:
            time.sleep(interval)
    out = {"host": host, "port": port, "address": address[0], "count": count, "failures": len(errors)}
    if not samples:
        out.update(
            _unavailable(
                "no TCP connect to %s:%d succeeded (%s); check that the port is open "
                "(the SSH port 22 works for RTT)" % (host, port, errors[-1])
            )
        )
        return out
    out.update(
        {
            "available": True,
            "samples_ms": [round(s, 4) for s in samples],
            "min_ms": round(min(samples), 4),
            "median_ms": round(statistics.median(samples), 4),
            "max_ms": round(max(samples), 4),
        }
    )
    if errors:
        out["last_error"] = errors[-1]
    return out


# -- sink / source ---------------------------------------------------------


def _set_buffers(sock: socket.socket, nbytes: int) -> None:
    if nbytes > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, nbytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, nbytes)


def _payload() -> bytes:
    # Random bytes: an SSH tunnel with compression on must not inflate the figure.
    return os.urandom(CHUNK)


class Sink:
    """The far end of the bandwidth probe: counts what clients send (SEND) and
    streams to clients that ask (RECV <seconds>). One thread per connection.

    It stops on QUIT from a client, after `idle_timeout` seconds without any
    connection, after `max_seconds` in all, or on stop(), so a sink started
    over SSH and forgotten does not linger."""

    def __init__(
        self,
        port: int = 0,
        bind: str = "127.0.0.1",
        token: str = "",
        idle_timeout: float = 60.0,
        max_seconds: float = 600.0,
    ) -> None:
        self.bind, self.requested_port, self.token = bind, port, token
        self.idle_timeout, self.max_seconds = idle_timeout, max_seconds
        self.port = 0
        self.stopped_by = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active = 0
        self._last = time.monotonic()
        self._started = time.monotonic()
        self._thread = None
        self._listener = None
        self._payload = _payload()
        self.stats = {"connections": 0, "bare_connects": 0, "rejected": 0, "bytes_received": 0, "bytes_sent": 0}

    def start(self) -> "Sink":
        family = socket.AF_INET6 if ":" in self.bind else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.bind, self.requested_port))
        listener.listen(128)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="sink-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self, reason: str = "stop") -> None:
        if not self.stopped_by:
            self.stopped_by = reason
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wait(self) -> None:
        """Block until the sink stops by itself (QUIT, idle, lifetime)."""
        while not self._stop.is_set():
            self._stop.wait(0.2)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict:
        with self._lock:
            stats = dict(self.stats)
        return dict(
            stats,
            bind=self.bind,
            port=self.port,
            stopped_by=self.stopped_by,
            seconds=round(time.monotonic() - self._started, 3),
        )

    def _accept_loop(self) -> None:
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                with self._lock:
                    idle = self._active == 0 and now - self._last > self.idle_timeout
                if idle:
                    self.stopped_by = self.stopped_by or "idle"
                    break
                if now - self._started > self.max_seconds:
                    self.stopped_by = self.stopped_by or "max-seconds"
                    break
                try:
                    conn, _peer = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                with self._lock:
                    self._active += 1
                    self._last = time.monotonic()
                    self.stats["connections"] += 1
                threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()
        finally:
            self._listener.close()
            self._stop.set()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10.0)
            header, rest = _read_line(conn)
            parts = header.split()
            if not parts:
                self._count("bare_connects", 1)
                return  # an RTT probe: connect and close
            if len(parts) < 3 or parts[0] != MAGIC:
                self._count("rejected", 1)
                return
            if not hmac.compare_digest(parts[1], self.token or "-"):
                self._count("rejected", 1)
                conn.sendall(b"ERR bad token\n")
                return
            command, args = parts[2], parts[3:]
            if command in ("SEND", "RECV"):
                conn.sendall(b"GO\n")  # the client times from here, after any refusal could arrive
            if command == "SEND":
                self._sink(conn, rest, _int_arg(args, 0), _float_arg(args, 1))
            elif command == "RECV":
                seconds = min(MAX_SEND_SECONDS, max(0.0, float(args[0]) if args else 1.0))
                self._source(conn, seconds, _int_arg(args, 1))
            elif command == "QUIT":
                conn.sendall(b"BYE\n")
                self.stopped_by = self.stopped_by or "quit"
                self._stop.set()
            else:
                conn.sendall(b"ERR unknown command\n")
        except (OSError, ValueError):
            pass  # a client that went away mid-probe: its own side reports the error
        finally:
            conn.close()
            with self._lock:
                self._active -= 1
                self._last = time.monotonic()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.stats[key] += n

    def _sink(self, conn: socket.socket, rest: bytes, buffer: int, omit: float) -> None:
        _set_buffers(conn, buffer)
        conn.settimeout(30.0)
        got = _receive(conn, len(rest), omit)
        self._count("bytes_received", got["bytes"])
        conn.sendall(
            (
                "OK %d %.6f %d %.6f %.6f %.6f\n"
                % (
                    got["bytes"],
                    got["end"] - got["start"],
                    got["steady_bytes"],
                    got["steady_s"],
                    got["mark"],
                    got["end"],
                )
            ).encode()
        )

    def _source(self, conn: socket.socket, seconds: float, buffer: int) -> None:
        _set_buffers(conn, buffer)
        conn.settimeout(30.0)
        deadline = time.monotonic() + seconds
        sent = 0
        try:
            while time.monotonic() < deadline and not self._stop.is_set():
                conn.sendall(self._payload)
                sent += len(self._payload)
            conn.shutdown(socket.SHUT_WR)
        finally:
            self._count("bytes_sent", sent)


def _float_arg(args: list, index: int) -> float:
    try:
        return min(MAX_SEND_SECONDS, max(0.0, float(args[index])))
    except (IndexError, ValueError):
        return 0.0


def _receive(sock: socket.socket, initial: int, omit: float) -> dict:
    """Read to EOF. Besides the total, count the bytes that arrive after the first
    `omit` seconds (to the last byte): the rate once TCP has left slow start."""
    view = memoryview(bytearray(1024 * 1024))
    start = last = time.perf_counter()
    mark_at = start + omit
    total, mark_bytes, mark_time = initial, None, None
    while True:
        n = sock.recv_into(view)
        if n == 0:
            break
        now = time.perf_counter()
        if mark_bytes is None and now >= mark_at:
            mark_bytes, mark_time = total, now
        total += n
        last = now
    if omit > 0 and mark_bytes is not None and last > mark_time:
        steady_bytes, steady_s = total - mark_bytes, last - mark_time
    else:
        steady_bytes, steady_s = 0, 0.0
    return {
        "bytes": total,
        "start": start,
        "end": last,
        "steady_bytes": steady_bytes,
        "steady_s": steady_s,
        "mark": mark_time if steady_s else 0.0,
    }


def _int_arg(args: list, index: int) -> int:
    try:
        return max(0, int(args[index]))
    except (IndexError, ValueError):
        return 0


def _read_line(conn: socket.socket):
    """Read up to the first newline; return (line, bytes received after it)."""
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > HEADER_MAX and b"\n" not in data[:HEADER_MAX]:
            raise ValueError("header too long")
    line, _sep, rest = data.partition(b"\n")
    return line.decode("ascii", "replace").strip(), rest


# -- bandwidth client --------------------------------------------------------


def _stream(
    host_addr,
    family,
    direction: str,
    seconds: float,
    buffer: int,
    token: str,
    timeout: float,
    barrier: threading.Barrier,
    payload: bytes,
    out: dict,
    omit: float = 0.0,
) -> None:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        _set_buffers(sock, buffer)  # before connect, so the window scale can cover it
        sock.settimeout(timeout)
        sock.connect(host_addr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        barrier.wait(timeout)
        tok = token or "-"
        if direction == "send":
            sock.sendall(("%s %s SEND %d %.3f\n" % (MAGIC, tok, buffer, omit)).encode())
            _expect_go(sock)
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            reply, _rest = _read_line(sock)
            end = time.perf_counter()
            parts = reply.split()
            if len(parts) < 2 or parts[0] != "OK":
                raise OSError("sink answered %r instead of a byte count" % reply[:80])
            nbytes = int(parts[1])
            if len(parts) >= 7:  # the sink's own clock: comparable across the streams it received
                out.update(
                    steady_bytes=int(parts[3]), steady_s=float(parts[4]), mark=float(parts[5]), last=float(parts[6])
                )
        else:
            sock.sendall(("%s %s RECV %.3f %d\n" % (MAGIC, tok, seconds, buffer)).encode())
            rest = _expect_go(sock)
            got = _receive(sock, len(rest), omit)
            start, end, nbytes = got["start"], got["end"], got["bytes"]
            out.update(steady_bytes=got["steady_bytes"], steady_s=got["steady_s"], mark=got["mark"], last=end)
        out.update(bytes=nbytes, start=start, end=end)
    except threading.BrokenBarrierError:
        out["error"] = "another stream failed to connect"
    except (OSError, ValueError) as exc:
        out["error"] = str(exc) or exc.__class__.__name__
        barrier.abort()
    finally:
        sock.close()


def _expect_go(sock: socket.socket) -> bytes:
    """Wait for the sink's GO; return any bytes that came after it."""
    reply, rest = _read_line(sock)
    if reply == "GO":
        return rest
    if reply.startswith("ERR"):
        raise OSError(
            "sink refused the probe: %s (pass the sink's --token)" % reply[4:]
            if "token" in reply
            else "sink refused the probe: %s" % reply[4:]
        )
    raise OSError("no answer from the sink (got %r); is it this profiler's --serve?" % reply[:40])


def _stream_timeout(timeout: float, seconds: float) -> float:
    # The sink's byte count comes back only after everything queued in socket
    # buffers (and in an SSH tunnel, when the probe runs through one) has drained;
    # on a busy host that drain can take several times the probe itself.
    return max(timeout, 3.0 * seconds + 30.0)


def measure_bandwidth(
    host: str,
    port: int,
    seconds: float = 3.0,
    streams: int = 4,
    direction: str = "send",
    buffer: int = 0,
    token: str = "",
    timeout: float = 10.0,
    omit: float | None = None,
) -> dict:
    """Timed memory-to-memory transfer against a `--serve` sink.

    direction "send": this host -> sink host (the sink counts the bytes and
    reports them once the stream is closed, so data still queued in socket
    buffers is never counted as delivered); "recv": sink host -> this host.
    The aggregate is the sum of bytes over the span from the first stream's
    start to the last stream's end.

    omit (default: a third of `seconds`, at most 1 s): the receiving end also
    counts only what arrives after the first `omit` seconds; `mbit` is then
    that steady-state rate (all streams over one window), because on a long fat
    link slow start takes a good part of a short probe (about 0.7 s at
    100 ms RTT). `mbit_whole` is the rate over the whole span."""
    if direction not in ("send", "recv"):
        raise ValueError("direction must be send or recv (got %r)" % direction)
    if streams < 1 or seconds <= 0:
        raise ValueError("streams must be >= 1 and seconds > 0")
    try:
        family, address = _resolve(host, port)
    except OSError as exc:
        return dict(_unavailable("cannot resolve %s: %s" % (host, exc)), direction=direction)
    barrier = threading.Barrier(streams)
    payload = _payload()
    if omit is None:
        omit = min(1.0, seconds / 3.0)
    omit = max(0.0, min(omit, seconds / 2.0))
    results = [{} for _ in range(streams)]
    threads = [
        threading.Thread(
            target=_stream,
            args=(
                address,
                family,
                direction,
                seconds,
                buffer,
                token,
                _stream_timeout(timeout, seconds),
                barrier,
                payload,
                r,
                omit,
            ),
            daemon=True,
        )
        for r in results
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r["error"] for r in results if "error" in r]
    out = {"host": host, "port": port, "direction": direction, "streams": streams, "seconds": seconds, "buffer": buffer}
    if errors:
        hint = "" if "refused the probe" in errors[0] else "; is `--serve %d` running there?" % port
        out.update(_unavailable("bandwidth probe to %s:%d failed: %s%s" % (host, port, errors[0], hint)))
        return out
    nbytes = sum(r["bytes"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    whole = round(nbytes * 8 / max(span, 1e-9) / 1e6, 2)
    out.update(
        {
            "available": True,
            "bytes": nbytes,
            "elapsed_s": round(span, 4),
            "mbit": whole,
            "mbit_whole": whole,
            "omit_s": omit,
            "per_stream_mbit": [round(r["bytes"] * 8 / max(r["end"] - r["start"], 1e-9) / 1e6, 2) for r in results],
        }
    )
    if omit > 0 and all(r.get("steady_s", 0) > 0 for r in results):
        # one window for all streams, on the receiving process's clock
        window = max(r["last"] for r in results) - min(r["mark"] for r in results)
        out["mbit"] = round(sum(r["steady_bytes"] for r in results) * 8 / max(window, 1e-9) / 1e6, 2)
        out["steady_s"] = round(window, 4)
        out["rate"] = "steady state: bytes after the first %.2f s of each stream, over one window" % omit
    else:
        out["rate"] = "whole span (too short to leave out slow start)" if omit > 0 else "whole span"
    return out


def stop_sink(host: str, port: int, token: str = "", timeout: float = 5.0) -> bool:
    """Ask a sink to exit; True when it acknowledged."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(("%s %s QUIT\n" % (MAGIC, token or "-")).encode())
            reply, _rest = _read_line(sock)
            return reply == "BYE"
    except OSError:
        return False


# -- hops --------------------------------------------------------------------

_MS = re.compile(r"(\d+(?:\.\d+)?)\s*ms\b")


def parse_traceroute(text: str) -> list:
    """Hop lines of `traceroute -n` output -> [{"hop", "address", "rtt_ms"}],
    rtt_ms being the smallest of the probes (None when no probe answered)."""
    hops = []
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(.*)$", line)
        if not m:
            continue
        rest = m.group(2)
        times = [float(v) for v in _MS.findall(rest)]
        stripped = _MS.sub(" ", rest)
        address = next(
            (tok for tok in stripped.split() if tok != "*" and not tok.startswith("!") and not tok.startswith("(")),
            None,
        )
        hops.append({"hop": int(m.group(1)), "address": address, "rtt_ms": min(times) if times else None})
    return hops


def parse_tracepath(text: str) -> list:
    """Hop lines of `tracepath -n` output -> the same shape as parse_traceroute.
    tracepath prints a hop once per probe; the smallest time is kept."""
    by_hop = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\??:\s+(\S+)(.*)$", line)
        if not m:
            continue
        hop, address, rest = int(m.group(1)), m.group(2), m.group(3)
        if address.startswith("["):  # "1?: [LOCALHOST]  pmtu 1500": not a hop
            continue
        if address == "no":  # "5:  no reply"
            address = None
        times = [float(v) for v in _MS.findall(rest)]
        entry = by_hop.setdefault(hop, {"hop": hop, "address": address, "rtt_ms": None})
        if address and not entry["address"]:
            entry["address"] = address
        if times:
            best = min(times)
            entry["rtt_ms"] = best if entry["rtt_ms"] is None else min(entry["rtt_ms"], best)
    return [by_hop[h] for h in sorted(by_hop)]


def hop_latencies(hops: list) -> list:
    """Add latency_ms: the RTT increase over the previous hop that answered
    (clamped at 0: ICMP replies are generated on routers' slow paths, so a
    later hop can answer faster than an earlier one)."""
    previous = 0.0
    out = []
    for hop in hops:
        entry = dict(hop)
        if hop["rtt_ms"] is None:
            entry["latency_ms"] = None
        else:
            entry["latency_ms"] = round(max(0.0, hop["rtt_ms"] - previous), 4)
            previous = hop["rtt_ms"]
        out.append(entry)
    return out


def trace_hops(host: str, max_hops: int = 30, timeout: float = 20.0) -> dict:
    """Hop count and per-hop latency via traceroute, else tracepath."""
    try:
        address = _resolve(host, 0)[1][0]
    except OSError as exc:
        return _unavailable("cannot resolve %s: %s" % (host, exc))
    traceroute, tracepath = shutil.which("traceroute"), shutil.which("tracepath")
    if traceroute:
        tool, cmd, parse = (
            "traceroute",
            [traceroute, "-n", "-q", "3", "-w", "1", "-m", str(max_hops), address],
            parse_traceroute,
        )
    elif tracepath:
        tool, cmd, parse = "tracepath", [tracepath, "-n", "-m", str(max_hops), address], parse_tracepath
    else:
        return _unavailable(
            "neither traceroute nor tracepath is installed; install the traceroute "
            "or iputils-tracepath package for hop latencies"
        )
    complete = True
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
        text = proc.stdout.decode("utf-8", "replace")
        if proc.returncode != 0 and not text.strip():
            return dict(
                _unavailable(
                    "%s failed: %s"
                    % (tool, proc.stderr.decode("utf-8", "replace").strip() or "exit status %d" % proc.returncode)
                ),
                tool=tool,
            )
    except subprocess.TimeoutExpired as exc:
        complete = False
        text = (exc.stdout or b"").decode("utf-8", "replace")
    except OSError as exc:
        return dict(_unavailable("%s could not run: %s" % (tool, exc)), tool=tool)
    hops = hop_latencies(parse(text))
    if not hops:
        return dict(
            _unavailable("%s printed no hops%s" % (tool, "" if complete else " before its %gs timeout" % timeout)),
            tool=tool,
        )
    answered = [h for h in hops if h["rtt_ms"] is not None]
    return {
        "available": True,
        "tool": tool,
        "target": address,
        "complete": complete,
        "reached": bool(answered) and answered[-1]["address"] == address,
        "hop_count": len(hops),
        "hops": hops,
        "high_latency_hops": sum(1 for h in hops if (h["latency_ms"] or 0.0) > HIGH_LATENCY_MS),
        "unanswered_hops": len(hops) - len(answered),
    }


# -- the whole profile -------------------------------------------------------


def run(
    host: str | None = None,
    port: int | None = None,
    rtt_host: str | None = None,
    rtt_port: int | None = None,
    trace_host: str | None = None,
    seconds: float | None = None,
    streams: int = 4,
    direction: str = "send",
    buffer: int = 0,
    token: str = "",
    rtt_count: int | None = None,
    hops: bool = True,
    light: bool = False,
    max_hops: int = 30,
    hop_timeout: float = 20.0,
) -> dict:
    """Measure what can be measured from the arguments; return the result dict.

    host/port: the sink for the bandwidth probe (may be a local SSH tunnel end).
    rtt_host/rtt_port: where to time TCP connects (default host/port; over a
    tunnel pass the real host and its SSH port). trace_host: traceroute target
    (default rtt_host). direction: send | recv | both. light: RTT and a short
    probe only (the periodic re-measurement)."""
    clock = time.monotonic()
    if seconds is None:
        seconds = 1.0 if light else 3.0
    if rtt_count is None:
        rtt_count = 5 if light else 10
    if direction not in ("send", "recv", "both"):
        raise ValueError("direction must be send, recv or both (got %r)" % direction)
    rtt_host = rtt_host or host
    rtt_port = rtt_port or port
    trace_host = trace_host or rtt_host
    result = _header()
    result["mode"] = "light" if light else "full"
    result["kernel"] = kernel_limits()

    if not rtt_host:
        result["rtt"] = _unavailable("no --host given: only this host's kernel limits were read")
    elif not rtt_port:
        result["rtt"] = _unavailable("no port to connect to: pass --rtt-port (e.g. 22, the SSH port) or --port")
    else:
        result["rtt"] = measure_rtt(rtt_host, rtt_port, count=rtt_count)

    bandwidth = {}
    for d in ("send", "recv") if direction == "both" else (direction,):
        if not host or not port:
            bandwidth[d] = _unavailable("no sink given: start `--serve PORT` on the far host and pass --host/--port")
        else:
            bandwidth[d] = measure_bandwidth(
                host, port, seconds=seconds, streams=streams, direction=d, buffer=buffer, token=token
            )
    result["bandwidth"] = bandwidth

    if light:
        result["hops"] = _unavailable("light mode: hops are measured by the full profile only")
    elif not hops:
        result["hops"] = _unavailable("hop tracing turned off (--no-hops)")
    elif not trace_host:
        result["hops"] = _unavailable("no --host given")
    else:
        result["hops"] = trace_hops(trace_host, max_hops=max_hops, timeout=hop_timeout)

    rtt = result["rtt"]
    hop_info = result["hops"]
    result["summary"] = {
        "rtt_ms": rtt.get("median_ms"),
        "rtt_min_ms": rtt.get("min_ms"),
        "send_mbit": bandwidth.get("send", {}).get("mbit"),
        "recv_mbit": bandwidth.get("recv", {}).get("mbit"),
        "hop_count": hop_info.get("hop_count"),
        "hop_latencies_ms": [h["latency_ms"] for h in hop_info["hops"]] if hop_info.get("available") else None,
    }
    result["ok"] = True
    result["seconds"] = round(time.monotonic() - clock, 3)
    return result


def serve(
    port: int = 0,
    bind: str = "127.0.0.1",
    token: str = "",
    idle_timeout: float = 60.0,
    max_seconds: float = 600.0,
    ready: Callable[[str, int], None] | None = None,
) -> dict:
    """Run a sink in the foreground until QUIT, idle timeout, lifetime or a signal.
    `ready(address, port)` is called once it listens."""
    sink = Sink(port=port, bind=bind, token=token, idle_timeout=idle_timeout, max_seconds=max_seconds).start()
    if ready is not None:
        ready(bind, sink.port)
    try:
        sink.wait()
    except (KeyboardInterrupt, Interrupted) as exc:
        sink.stop(str(exc) or "SIGINT")
    result = _header()
    result.update({"mode": "serve", "ok": True, "serve": sink.summary()})
    return result


def _on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def _announce(address: str, port: int) -> None:
    sys.stderr.write("READY %s %d\n" % (address, port))
    sys.stderr.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m profilers.network",
        description="Network profiler (paper 003 section 4.2): kernel TCP limits, RTT, bandwidth by a real "
        "timed transfer, hops. Prints one JSON object.",
    )
    parser.add_argument("--serve", type=int, metavar="PORT", help="run the sink/source on PORT (0 = any)")
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        help="sink address (default 127.0.0.1: reach it through an SSH tunnel; 0.0.0.0 exposes it, use --token then)",
    )
    parser.add_argument("--idle-timeout", type=float, default=60.0, help="sink exits after this idle time")
    parser.add_argument("--max-lifetime", type=float, default=600.0, help="sink exits after this long")
    parser.add_argument("--token", default="", help="shared secret between client and sink")
    parser.add_argument("--host", help="sink host (or the local end of a tunnel)")
    parser.add_argument("--port", type=int, help="sink port")
    parser.add_argument("--rtt-host", help="host to time TCP connects to (default --host)")
    parser.add_argument("--rtt-port", type=int, help="port to time TCP connects to (default --port; 22 works)")
    parser.add_argument("--trace-host", help="traceroute target (default --rtt-host)")
    parser.add_argument("--seconds", type=float, help="bandwidth probe length (default 3, light 1)")
    parser.add_argument("--streams", type=int, default=4, help="parallel TCP streams of the probe (default 4)")
    parser.add_argument(
        "--direction",
        choices=("send", "recv", "both"),
        default="send",
        help="send: here -> sink host; recv: sink host -> here (default send)",
    )
    parser.add_argument(
        "--buffer", type=int, default=0, help="SO_SNDBUF/SO_RCVBUF bytes for the probe (0 = kernel autotuning)"
    )
    parser.add_argument("--rtt-count", type=int, help="TCP connects to time (default 10, light 5)")
    parser.add_argument("--no-hops", action="store_true", help="skip traceroute")
    parser.add_argument("--max-hops", type=int, default=30)
    parser.add_argument("--hop-timeout", type=float, default=20.0, help="traceroute time limit (default 20)")
    parser.add_argument("--light", action="store_true", help="periodic mode: RTT and a short probe only")
    parser.add_argument("--stop-sink", action="store_true", help="ask the sink to exit after measuring")
    args = parser.parse_args(argv)
    for name in ("SIGTERM", "SIGHUP"):
        if getattr(signal, name, None) is not None:
            signal.signal(getattr(signal, name), _on_signal)
    try:
        if args.serve is not None:
            _emit(
                serve(
                    port=args.serve,
                    bind=args.bind,
                    token=args.token,
                    idle_timeout=args.idle_timeout,
                    max_seconds=args.max_lifetime,
                    ready=_announce,
                )
            )
            return 0
        result = run(
            host=args.host,
            port=args.port,
            rtt_host=args.rtt_host,
            rtt_port=args.rtt_port,
            trace_host=args.trace_host,
            seconds=args.seconds,
            streams=args.streams,
            direction=args.direction,
            buffer=args.buffer,
            token=args.token,
            rtt_count=args.rtt_count,
            hops=not args.no_hops,
            light=args.light,
            max_hops=args.max_hops,
            hop_timeout=args.hop_timeout,
        )
        if args.stop_sink and args.host and args.port:
            result["sink_stopped"] = stop_sink(args.host, args.port, args.token)
        _emit(result)
        return 0
    except (KeyboardInterrupt, Interrupted) as exc:
        _emit(dict(_header(), ok=False, error="interrupted by %s" % (str(exc) or "SIGINT")))
        return 130
    except (OSError, ValueError) as exc:
        message = "network profiler failed: %s" % exc
        sys.stderr.write(message + "\n")
        _emit(dict(_header(), ok=False, error=message))
        return 1


if __name__ == "__main__":
    sys.exit(main())
