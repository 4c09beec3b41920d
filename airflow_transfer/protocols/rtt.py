"""The round-trip time of a connection the copy opened anyway: no probe traffic of its own.

Over paramiko the SSH connection is a TCP socket in this process, and the kernel keeps its
smoothed RTT and the minimum RTT it has seen (`TCP_INFO`, Linux). The handshake and key
exchange have crossed the path several times by the time a connection is handed out, so both
are already meaningful. Over an OpenSSH client process (or a proxy) there is no socket here:
then the quickest of a few SFTP round trips stands in (it adds the server's reply time, a few
tens of microseconds).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

# struct tcp_info (linux/tcp.h): u32 tcpi_rtt at byte 68, u32 tcpi_min_rtt at byte 148 (Linux 4.6+),
# both in microseconds; u32 tcpi_snd_mss at 16 (bytes) and tcpi_snd_cwnd at 80 (segments).
_RTT_OFFSET, _MIN_RTT_OFFSET, _INFO_BYTES = 68, 148, 152
_MSS_OFFSET, _CWND_OFFSET = 16, 80
SFTP_SAMPLES = 3


def _tcp_info(sock: Any) -> bytes | None:
    option = getattr(socket, "TCP_INFO", None)
    if option is None or not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, option, _INFO_BYTES)
    except OSError:
        return None


def tcp_send_rate(sock: Any) -> float | None:
    """Bytes per second the connection's congestion window carries now (one window per smoothed
    RTT), or None where the kernel cannot say. A connection that lost packets early, or that is
    still in slow start, reads low: what it will move in the next moment, not what the path can."""
    info = _tcp_info(sock)
    if info is None or len(info) < _CWND_OFFSET + 4:
        return None
    (rtt,) = struct.unpack_from("I", info, _RTT_OFFSET)
    (mss,) = struct.unpack_from("I", info, _MSS_OFFSET)
    (cwnd,) = struct.unpack_from("I", info, _CWND_OFFSET)
    if rtt <= 0 or mss <= 0 or cwnd <= 0:
        return None
    return cwnd * mss / (rtt / 1e6)


def tcp_rtt(sock: Any) -> tuple[float, float] | None:
    """(smoothed RTT, minimum RTT) in seconds from the kernel, or None where it cannot say."""
    info = _tcp_info(sock)
    if info is None or len(info) < _RTT_OFFSET + 4:
        return None
    (rtt,) = struct.unpack_from("I", info, _RTT_OFFSET)
    low = struct.unpack_from("I", info, _MIN_RTT_OFFSET)[0] if len(info) >= _INFO_BYTES else 0
    if rtt <= 0:
        return None
    return rtt / 1e6, (low or rtt) / 1e6


def connection_rtt(conn: Any) -> tuple[float, float, str]:
    """(RTT, minimum RTT, how) of one pooled connection (protocols/pool.py `Conn`)."""
    sock = getattr(conn.carrier, "sock", None)
    got = tcp_rtt(sock)
    if got is not None:
        return got[0], got[1], "the kernel's TCP_INFO for the SSH connection"
    samples = []
    for _ in range(SFTP_SAMPLES):
        t0 = time.perf_counter()
        conn.wire.realpath(".")
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2], samples[0], f"the quickest of {SFTP_SAMPLES} SFTP round trips"
