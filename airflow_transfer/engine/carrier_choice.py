"""Which SSH client carries an upload's bundle stream: OpenSSH's `ssh`, or paramiko.

Both work everywhere; which is faster depends on the link. Over `ssh` the stream goes through
another process whose pipes the pump splices (no Python step per packet), and the first small
files move while the copy path still loads (engine/head_start.py); but each helper costs a login
of its own, about 0.8 s on a 50 ms path against the paramiko connection's exec channel that is
open 0.2-0.3 s sooner, and over `ssh` the body of the copy ran slower there. Uploads of `tiny`
(2000 x 64 KiB) from first contact, five interleaved runs per link, each carrier forced
(`python -m benchmarks.timeline --profile P --dataset tiny --reps 5 --base <checkout forcing
paramiko>`, 2026-12-07), medians of the whole copy:

    link (RTT, rate)       over ssh    over paramiko
    lan    (1 ms, 1 Gbit/s)   2.06 s    2.23 s
    wan5   (5 ms, 500 Mbit/s)  2.90 s    3.11 s
    wan10  (10 ms, 500 Mbit/s) 3.04 s    3.01 s
    wan50  (50 ms, 500 Mbit/s) 4.21 s    3.48 s

So the round trip decides, as the kernel measured it on the TCP handshake of the copy's first
connection (protocols/pool.py, first_round_trip). Downloads stay on `ssh` at every round trip:
on wan50 they took 4.25 s against 4.11 over paramiko (four runs, within each other's spread),
and on loopback paramiko's receive path costs this process a Python step per packet.
AIRFLOW_TRANSFER_BUNDLE_CARRIER (bundle_channel.CARRIER_ENV) forces either.
"""

from __future__ import annotations

import os
from typing import Any

from ..protocols.rtt import tcp_rtt
from .bundle_channel import CARRIER_ENV

# At and above this round trip an upload's sinks ride paramiko (the table above: a tie at 10 ms).
PARAMIKO_FROM_RTT_S = 0.010
# How long the command line waits for the first connection's TCP handshake before it starts
# the helpers (a LAN answers in a millisecond). A path that has not answered by then is a long
# one, or the name is slow to resolve: either way, paramiko.
HANDSHAKE_WAIT_S = 0.25


def upload_carrier(rtt: float | None, forced: str = "") -> str:
    """ "" where an upload's sinks ride `ssh`, else why they ride paramiko; `rtt` in seconds (None:
    not measured), `forced` the value of AIRFLOW_TRANSFER_BUNDLE_CARRIER."""
    if forced == "openssh":
        return ""
    if forced == "paramiko":
        return "forced by AIRFLOW_TRANSFER_BUNDLE_CARRIER"
    if rtt is None:
        return ""  # as before the round trip was looked at: a jump host, a proxy command, `ssh` for SFTP
    if rtt >= PARAMIKO_FROM_RTT_S:
        return f"round trip {rtt * 1000:.0f} ms, at or above {PARAMIKO_FROM_RTT_S * 1000:.0f} ms"
    return ""


def _forced() -> str:
    return os.environ.get(CARRIER_ENV, "")


def decide_for_pool(pool: Any, wait: float = HANDSHAKE_WAIT_S) -> str:
    """Decide (once) what the pool's upload sinks ride, from its first connection's round trip,
    waiting up to `wait` seconds for that connection's TCP handshake; "" for `ssh`, else why
    paramiko. Call after `pool.warm`."""
    if pool.upload_carrier_why is None:
        forced = _forced()
        if forced:
            pool.upload_carrier_why = upload_carrier(None, forced)
        else:
            rtt = pool.first_round_trip(wait)
            if rtt is None and not pool.handshake_seen():
                pool.upload_carrier_why = f"no TCP handshake with the server within {wait:g} s"
            else:
                pool.upload_carrier_why = upload_carrier(rtt)
    return pool.upload_carrier_why


def decide_for_connection(pool: Any, conn: Any) -> str:
    """What a chunk's upload sink rides on `conn` where the command line did not decide it (a
    copy run from Airflow, or by run_copy directly): its own TCP round trip decides, once per pool."""
    if pool.upload_carrier_why is None:
        got = tcp_rtt(getattr(conn.carrier, "sock", None))
        pool.upload_carrier_why = upload_carrier(got[1] if got is not None else None, _forced())
    return pool.upload_carrier_why
