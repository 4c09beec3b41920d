"""Fidelity of the emulated WAN (benchmarks/wan/): RTT, window-limited and
parallel TCP throughput, link-rate single streams, run-time changes, sshd in
dst reached from src, and nothing left behind. Needs root; fails (does not
skip) otherwise. Rates are measured on a shared 2-core machine, so the
bounds leave room for noise while still catching a broken emulator."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator

import paramiko
import pytest

from benchmarks.wan.link import EmulatedLink, cleanup, leftovers
from benchmarks.wan.measure import iperf_json, iperf_mbit, ping_ms
from tests.support.wan import REPO_ROOT, WanTestbed, require_wan, wan_testbed  # noqa: F401  (fixture)

# wan_alone: these compare measured rates and round trips with the link's setting, which only
# holds when nothing else competes for the two cores (scripts/run-tests.sh runs them last, alone).
pytestmark = [pytest.mark.wan, pytest.mark.wan_alone]

KIB = 1024


def best_of_two(measure: Callable[[], float], good_enough: Callable[[float], bool]) -> float:
    """A second run only when the first falls short: CPU contention from other
    work on this shared machine can starve an endpoint for a whole run, while a
    broken emulator falls short both times."""
    first = measure()
    return first if good_enough(first) else max(first, measure())


def settled_rtt(link: EmulatedLink, rtt_ms: float, count: int = 10) -> tuple[float, float, float]:
    """ping_ms, and a second, longer measurement when the median is off by more than 2 ms: a few
    pings on 2 shared cores can all wake late (a median of 14.7 ms for 10 in one CI run), and
    30 tell that scheduling noise from an emulator that adds delay."""
    lo, med, hi = ping_ms(link, count=count)
    if abs(med - rtt_ms) > 2.0:
        lo, med, hi = ping_ms(link, count=30)
    return lo, med, hi


def assert_link_delay(link: EmulatedLink, rtt_ms: float, count: int = 10, when: str = "") -> None:
    """The emulator adds the link's delay, no less and no more: the fastest ping shows it
    (scheduling on a loaded machine only ever adds to a ping; a CI run's parallel phase put the
    median of 30 at 105 ms on a 100 ms link, fastest 100.0), and most pings are not held back
    (a queue or a timer kept from before would hold every one of them). The median's slack is
    mostly absolute: late wake-ups add milliseconds whatever the link's delay (a CI run with the
    main suite beside it put the median at 16.05 ms on a 10 ms link)."""
    lo, med, hi = settled_rtt(link, rtt_ms, count=count)
    report = f"RTT{when} min {lo} / median {med} / max {hi} ms for a {rtt_ms} ms link"
    assert lo >= rtt_ms - 0.5, f"a ping beat the link's delay: {report}"
    assert lo <= rtt_ms + 2.0, f"even the fastest ping was held back: {report}"
    assert med <= rtt_ms * 1.2 + 8.0, f"most pings were held back: {report}"


@pytest.fixture(scope="module")
def link() -> Iterator[EmulatedLink]:
    require_wan()
    with EmulatedLink(rtt_ms=50, rate_mbit=500) as lk:
        yield lk


@pytest.mark.parametrize("rtt_ms", [50, 100])
def test_ping_rtt_matches_target(link: EmulatedLink, rtt_ms: int) -> None:
    link.set(rtt_ms=rtt_ms, rate_mbit=500)
    assert_link_delay(link, rtt_ms)


@pytest.mark.parametrize("rtt_ms", [50, 100])
def test_one_stream_is_window_limited(link: EmulatedLink, rtt_ms: int) -> None:
    # -w 256K: Linux doubles the request and advertises about 1.25 x 256 KiB,
    # so one stream carries window / RTT (Grossman, Gu et al., Computer Networks
    # 2004: a single TCP stream is bounded by window / RTT on a high-BDP path).
    link.set(rtt_ms=rtt_ms, rate_mbit=500)
    expected = 1.25 * 256 * KIB * 8 / (rtt_ms / 1000) / 1e6
    got = iperf_mbit(link, "-w", "256K")
    assert abs(got - expected) <= 0.25 * expected, f"{got:.1f} Mbit/s at {rtt_ms} ms, expected ~{expected:.1f}"


def test_four_streams_scale_with_their_windows(link: EmulatedLink) -> None:
    link.set(rtt_ms=50, rate_mbit=500)
    one = iperf_mbit(link, "-w", "256K")
    four = best_of_two(lambda: iperf_mbit(link, "-w", "256K", "-P", "4"), lambda v: v >= 3.3 * one)
    assert four >= 3.3 * one, f"4 streams {four:.1f} Mbit/s vs one {one:.1f}"


def test_one_stream_with_large_buffers_fills_the_link(link: EmulatedLink) -> None:
    link.set(rtt_ms=50, rate_mbit=500)
    got = best_of_two(lambda: iperf_mbit(link, seconds=5, omit=2), lambda v: v >= 0.85 * 500)
    # TCP/IP headers cap goodput at 1448/1500 of the rate (~482.7 Mbit/s).
    assert got >= 0.85 * 500, f"one large-buffer stream reached only {got:.1f} of 500 Mbit/s"
    assert got <= 500 * 1448 / 1500 * 1.02, f"{got:.1f} Mbit/s is faster than a 500 Mbit/s link can carry"
    drops = link.stats()["fwd"]
    assert drops["drop_ring"] == 0, drops


def test_rate_changes_while_running(link: EmulatedLink) -> None:
    link.set(rtt_ms=10, rate_mbit=100)
    # The upper bound is the point: the new rate governs at once. The lower one only shows the
    # link is not stuck below it; one loss-based stream on the rate limiter's queue saws between
    # about 80 and 96 Mbit/s here (84.5 in a clean-clone CI run), so it sits at 75.
    got = best_of_two(lambda: iperf_mbit(link, seconds=4, omit=1), lambda v: v >= 85)
    assert 75 <= got <= 100, f"{got:.1f} Mbit/s on a link set to 100 Mbit/s"
    assert link.stats()["fwd"]["rate_bps"] == 100_000_000


def test_blackhole_drops_everything_then_recovers(link: EmulatedLink) -> None:
    link.set(rtt_ms=10, rate_mbit=500)
    before = link.stats()["fwd"]["drop_blackhole"]
    link.blackhole(1.0)
    lost = link.run("src", ["ping", "-q", "-n", "-c", "3", "-i", "0.2", "-W", "0.5", link.dst_addr], check=False)
    assert lost.returncode != 0 and " 0 received" in lost.stdout, lost.stdout
    assert link.stats()["fwd"]["drop_blackhole"] >= before + 3
    time.sleep(1.0)
    assert_link_delay(link, 10, count=3, when=" after the blackhole")  # no backlog or delay kept from it


@pytest.fixture(scope="module")
def lossy() -> Iterator[EmulatedLink]:
    # one packet per read, so a loss is one packet (with offload a whole TSO frame goes)
    require_wan()
    with EmulatedLink(rtt_ms=20, rate_mbit=100, queue_bytes=4 << 20, offload=False) as lk:
        yield lk


def test_random_loss_matches_the_setting_over_1e5_packets(lossy: EmulatedLink) -> None:
    lossy.set(rtt_ms=20, rate_mbit=100, loss=0.01)
    before = lossy.stats()["fwd"]
    # 20 Mbit/s of 100-byte datagrams for 5 s: about 125,000 packets, a fifth of the rate, so
    # the queue drops none; 1 % of 1e5 is 1,000 losses, and 10 % of that is over 3 sigma
    udp = iperf_json(lossy, "-u", "-b", "20M", "-l", "100", seconds=5, omit=0)["end"]["sum"]
    after = lossy.stats()["fwd"]
    sent = after["rx_pkts"] - before["rx_pkts"]
    assert sent >= 100_000 and udp["packets"] >= 100_000, (sent, udp)
    assert after["drop_queue"] == before["drop_queue"], after
    emulated = (after["drop_loss"] - before["drop_loss"]) / sent
    assert abs(emulated - 0.01) <= 0.001, f"emulator lost {emulated:.4%} of {sent} packets for 1 %"
    # What the receiver missed: the loss is real, at least what the emulator dropped. A loaded
    # host adds drops of its own in the receiving socket (0.19 % and 2 % more in two CI runs on
    # 2026-11-27), so only the emulator's own count above is held to 0.1 %.
    delivered = udp["lost_packets"] / udp["packets"]
    assert delivered >= emulated - 0.001, (
        f"receiver missed {delivered:.4%} of {udp['packets']} datagrams; the emulator dropped {emulated:.4%}"
    )


def test_one_stream_under_random_loss_stays_within_the_mathis_bound(lossy: EmulatedLink) -> None:
    # Mathis, Semke, Mahdavi, Ott 1997: rate ~ MSS / RTT x sqrt(3/2) / sqrt(p); 20 ms and p = 2e-3
    # give 15.8 Mbit/s, far below the 100 Mbit/s link, with about 30 loss events in 10 s
    lossy.set(rtt_ms=20, rate_mbit=100, loss=0.002)
    try:
        mathis = 1448 * 8 / 0.02 * math.sqrt(1.5) / math.sqrt(0.002) / 1e6
        got = iperf_mbit(lossy, seconds=10, omit=2)
    finally:
        lossy.set(loss=0.0)
    assert 0.5 * mathis <= got <= 2.0 * mathis, f"{got:.1f} Mbit/s under 0.2 % loss; Mathis: {mathis:.1f}"
    assert lossy.stats()["fwd"]["drop_queue"] == 0


def test_sshd_in_dst_is_reached_from_src_across_the_link(wan_testbed) -> None:
    tb = wan_testbed(rtt_ms=40, rate_mbit=100)
    assert tb.sshd is not None
    kw = tb.sshd.connect_kwargs()

    # src has no way out but the emulated link.
    route = tb.run_in_src(["ip", "route", "get", kw["host"]]).stdout
    assert f"dev {tb.link.device}" in route, route
    crossed = tb.link.stats()["fwd"]["rx_pkts"]

    def ssh_echo() -> tuple[str, float]:
        client = paramiko.SSHClient()
        client.load_host_keys(kw["known_hosts"])
        started = time.monotonic()
        client.connect(
            kw["host"],
            port=kw["port"],
            username=kw["username"],
            key_filename=kw["key_filename"],
            look_for_keys=False,
            allow_agent=False,
        )
        try:
            _, out, _ = client.exec_command("echo over-the-wan")
            return out.read().decode().strip(), time.monotonic() - started
        finally:
            client.close()

    text, seconds = tb.call_in_src(ssh_echo)
    assert text == "over-the-wan"
    # TCP handshake, SSH version + kex + auth + channel + exec: at least 5 round trips of 40 ms.
    assert seconds >= 5 * 0.040, f"SSH session took {seconds:.3f} s: did it bypass the emulated link?"
    assert tb.link.stats()["fwd"]["rx_pkts"] >= crossed + 10

    # Out of process: the venv's Python inside src reaches the same sshd.
    code = f"import socket; s = socket.create_connection(({kw['host']!r}, {kw['port']}), 5); print(s.recv(64))"
    assert "SSH-2.0" in tb.python_in_src(["-c", code]).stdout


def test_nothing_left_after_teardown() -> None:
    tb = WanTestbed.start(rtt_ms=5, rate_mbit=100, name=f"t{uuid.uuid4().hex[:8]}")
    assert tb.sshd is not None
    name, sshd_marker, base = tb.link.name, str(tb.sshd.config_file), tb.base
    sleeper = tb.link.run_in("dst", ["sleep", "300"])
    assert {f"{name}-src", f"{name}-dst"} <= set(leftovers()["namespaces"])
    tb.close()
    assert sleeper.wait(timeout=5) is not None
    left = leftovers()
    assert not [ns for ns in left["namespaces"] if ns.startswith(name + "-")], left
    assert not [e for e in left["emulators"] if e[1] == name], left
    assert not [f for f in left["state_files"] if f.startswith(name + ".")], left
    assert not processes_mentioning(sshd_marker)
    assert not base.exists()


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_links_of_a_crashed_process_are_cleaned_up() -> None:
    require_wan()
    name = f"at-crash{uuid.uuid4().hex[:8]}"
    # A process that brings a link up and is then SIGKILLed: no atexit, no handlers.
    crash = textwrap.dedent(
        f"""
        import os, signal
        from benchmarks.wan.link import EmulatedLink
        EmulatedLink(rtt_ms=5, rate_mbit=100, name={name!r}).up()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", crash], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert {f"{name}-src", f"{name}-dst"} <= set(leftovers()["namespaces"])
    # The emulator saw its owner's pipe close and exited by itself.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and [e for e in leftovers()["emulators"] if e[1] == name]:
        time.sleep(0.05)
    assert not [e for e in leftovers()["emulators"] if e[1] == name]
    assert name in cleanup(everything=False)
    left = leftovers()
    assert not [ns for ns in left["namespaces"] if ns.startswith(name + "-")], left
    assert not [e for e in left["emulators"] if e[1] == name], left


def test_shell_up_and_down() -> None:
    require_wan()
    name = f"cli{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "benchmarks.wan.link"]
    up = subprocess.run(
        [*cli, "up", "--profile", "lan", "--name", name], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
    )
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        assert (info["rtt_ms"], info["rate_mbit"]) == (1.0, 1000.0)
        # The link outlived the `up` process.
        rtt = subprocess.run(
            ["ip", "netns", "exec", info["src_ns"], "ping", "-q", "-n", "-c", "3", "-i", "0.1", info["dst_addr"]],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert rtt.returncode == 0, rtt.stdout + rtt.stderr
    finally:
        down = subprocess.run([*cli, "down", "--name", name], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert down.returncode == 0, down.stderr
    assert not [ns for ns in leftovers()["namespaces"] if ns.startswith(info["name"] + "-")]
