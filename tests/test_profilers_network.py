"""The network profiler: kernel limits, RTT, the bandwidth probe against its own
`--serve` sink on 127.0.0.1, hop tracing - as `python3 -m` and as a piped file."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Real output of traceroute 2.1.2 and tracepath (iputils 20221126) on this VM,
# with a silent hop and annotations added the way the tools print them.
TRACEROUTE_OUT = """traceroute to 1.1.1.1 (1.1.1.1), 6 hops max, 60 byte packets
 1  192.0.2.1  0.546 ms  0.500 ms  0.490 ms
 2  * * *
 3  21.4.9.19  12.436 ms *  11.438 ms
 4  10.0.0.1  40.100 ms !H  39.000 ms !H *
"""
TRACEPATH_OUT = """ 1?: [LOCALHOST]                      pmtu 1400
 1:  192.0.2.1                                             0.149ms
 1:  192.0.2.1                                             0.090ms
 2:  no reply
 3:  21.4.9.19                                            25.288ms reached
     Resume: pmtu 1400 hops 3 back 2
"""


def profiler_cmd(how: str, args: list[str]) -> tuple[list[str], dict]:
    if how == "module":
        return [sys.executable, "-m", "profilers.network", *args], {"cwd": REPO, "stdin": subprocess.DEVNULL}
    # -I -S: standard library only, as on a bare remote host
    return [sys.executable, "-I", "-S", "-", *args], {
        "cwd": "/",
        "stdin": open(REPO / "profilers" / "network.py", "rb"),
    }


def run_profiler(how: str, args: list[str], timeout: float = 30, env: dict | None = None) -> tuple[int, dict]:
    cmd, kwargs = profiler_cmd(how, args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one JSON line on stdout, got {proc.stdout!r} / {proc.stderr!r}"
    return proc.returncode, json.loads(lines[0])


class SinkProcess:
    """`--serve 0` in a subprocess; the port comes from its READY line on stderr."""

    def __init__(self, how: str, *extra: str) -> None:
        cmd, kwargs = profiler_cmd(how, ["--serve", "0", "--idle-timeout", "20", *extra])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        ready = self.proc.stderr.readline().split()
        assert ready[:2] == ["READY", "127.0.0.1"], ready
        self.port = int(ready[2])

    def result(self, timeout: float = 15) -> dict:
        stdout, _ = self.proc.communicate(timeout=timeout)
        return json.loads(stdout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def listening_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.mark.parametrize("how", ["module", "piped"])
def test_kernel_limits_without_a_host(how):
    code, out = run_profiler(how, [])
    assert code == 0 and out["ok"] is True
    kernel = out["kernel"]
    assert kernel["available"] is True
    assert len(kernel["tcp_rmem"]) == 3 and kernel["tcp_rmem"][2] >= kernel["tcp_rmem"][0] > 0
    assert len(kernel["tcp_wmem"]) == 3 and kernel["tcp_wmem"][2] > 0
    assert kernel["rmem_max"] > 0 and kernel["wmem_max"] > 0
    assert kernel["congestion_control"] in kernel["available_congestion_control"]
    assert isinstance(kernel["window_scaling"], bool)
    assert out["rtt"]["available"] is False and "--host" in out["rtt"]["reason"]
    assert out["bandwidth"]["send"]["available"] is False


@pytest.mark.parametrize("how", ["module", "piped"])
def test_rtt_to_a_local_listening_socket(how, listening_port):
    code, out = run_profiler(
        how, ["--rtt-host", "127.0.0.1", "--rtt-port", str(listening_port), "--rtt-count", "5", "--no-hops"]
    )
    assert code == 0
    rtt = out["rtt"]
    assert rtt["available"] is True and rtt["failures"] == 0 and len(rtt["samples_ms"]) == 5
    assert 0 < rtt["min_ms"] <= rtt["median_ms"] <= rtt["max_ms"] < 50
    assert out["summary"]["rtt_ms"] == rtt["median_ms"]


def test_rtt_to_a_closed_port_is_unavailable_with_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    code, out = run_profiler(
        "module", ["--rtt-host", "127.0.0.1", "--rtt-port", str(closed), "--rtt-count", "2", "--no-hops"]
    )
    assert code == 0
    assert out["rtt"]["available"] is False and out["rtt"]["failures"] == 2
    assert "refused" in out["rtt"]["reason"].lower()


@pytest.mark.parametrize("sink_how, client_how", [("module", "piped"), ("piped", "module")])
def test_bandwidth_probe_against_its_own_sink(sink_how, client_how):
    sink = SinkProcess(sink_how)
    try:
        code, out = run_profiler(
            client_how,
            [
                "--host",
                "127.0.0.1",
                "--port",
                str(sink.port),
                "--seconds",
                "0.5",
                "--streams",
                "2",
                "--direction",
                "both",
                "--rtt-count",
                "3",
                "--no-hops",
                "--stop-sink",
            ],
        )
        served = sink.result()
    finally:
        sink.close()
    assert code == 0 and out["ok"] is True
    for direction in ("send", "recv"):
        probe = out["bandwidth"][direction]
        assert probe["available"] is True, probe
        assert probe["mbit"] > 0 and probe["bytes"] > 0
        assert len(probe["per_stream_mbit"]) == 2 and all(m > 0 for m in probe["per_stream_mbit"])
        assert 0.4 <= probe["elapsed_s"] < 5  # recv starts timing at GO, a hair after the sink starts
    assert 0 < out["rtt"]["median_ms"] < 50
    assert out["sink_stopped"] is True
    stats = served["serve"]
    assert stats["stopped_by"] == "quit"
    # the sink counted exactly what the client says it delivered, both ways
    assert stats["bytes_received"] == out["bandwidth"]["send"]["bytes"]
    assert stats["bytes_sent"] == out["bandwidth"]["recv"]["bytes"]
    assert stats["bare_connects"] == 3  # the RTT probes


def test_light_mode_is_short_and_skips_hops():
    sink = SinkProcess("module")
    try:
        code, out = run_profiler("piped", ["--light", "--host", "127.0.0.1", "--port", str(sink.port), "--stop-sink"])
    finally:
        sink.close()
    assert code == 0
    assert out["mode"] == "light"
    assert out["bandwidth"]["send"]["seconds"] == 1.0 and out["bandwidth"]["send"]["mbit"] > 0
    assert out["rtt"]["count"] == 5
    assert out["hops"]["available"] is False and "light" in out["hops"]["reason"]
    assert out["seconds"] < 5


def test_sink_with_a_token_refuses_strangers():
    sink = SinkProcess("module", "--token", "s3cret")
    try:
        code, out = run_profiler(
            "module",
            [
                "--host",
                "127.0.0.1",
                "--port",
                str(sink.port),
                "--seconds",
                "0.2",
                "--streams",
                "1",
                "--rtt-count",
                "1",
                "--no-hops",
            ],
        )
        assert code == 0
        assert out["bandwidth"]["send"]["available"] is False
        assert "token" in out["bandwidth"]["send"]["reason"]
        code, out = run_profiler(
            "module",
            [
                "--host",
                "127.0.0.1",
                "--port",
                str(sink.port),
                "--seconds",
                "0.2",
                "--streams",
                "1",
                "--rtt-count",
                "1",
                "--no-hops",
                "--token",
                "s3cret",
                "--stop-sink",
            ],
        )
        assert out["bandwidth"]["send"]["mbit"] > 0
        served = sink.result()
    finally:
        sink.close()
    assert served["serve"]["rejected"] == 1


def test_idle_sink_exits_by_itself():
    from profilers import network

    out = network.serve(port=0, idle_timeout=0.3, max_seconds=10)
    assert out["ok"] is True and out["serve"]["stopped_by"] == "idle"
    assert out["serve"]["seconds"] < 3


def test_in_process_sink_and_probe():
    from profilers import network

    sink = network.Sink(idle_timeout=10).start()
    try:
        probe = network.measure_bandwidth("127.0.0.1", sink.port, seconds=0.3, streams=3, direction="recv")
    finally:
        sink.stop()
    assert probe["available"] is True and probe["mbit"] > 0 and len(probe["per_stream_mbit"]) == 3
    assert sink.summary()["bytes_sent"] == probe["bytes"]


def test_hops_on_loopback_or_the_reason_they_are_missing(listening_port):
    code, out = run_profiler(
        "module",
        ["--rtt-host", "127.0.0.1", "--rtt-port", str(listening_port), "--rtt-count", "1", "--hop-timeout", "10"],
    )
    assert code == 0
    hops = out["hops"]
    if shutil.which("traceroute") or shutil.which("tracepath"):
        assert hops["available"] is True, hops
        assert hops["reached"] is True and hops["hop_count"] == 1
        assert hops["hops"][0]["address"] == "127.0.0.1"
        assert 0 <= hops["hops"][0]["latency_ms"] < 10
        assert out["summary"]["hop_count"] == 1
    else:
        assert hops["available"] is False and "install" in hops["reason"]


def test_without_traceroute_or_tracepath_hops_are_unavailable(tmp_path, listening_port):
    env = {"PATH": str(tmp_path)}  # an empty directory: neither tool can be found
    code, out = run_profiler(
        "piped", ["--rtt-host", "127.0.0.1", "--rtt-port", str(listening_port), "--rtt-count", "1"], env=env
    )
    assert code == 0
    assert out["hops"] == {"available": False, "reason": out["hops"]["reason"]}
    assert "traceroute" in out["hops"]["reason"] and "tracepath" in out["hops"]["reason"]
    assert out["summary"]["hop_latencies_ms"] is None


def test_traceroute_and_tracepath_parsers():
    from profilers.network import hop_latencies, parse_tracepath, parse_traceroute

    hops = hop_latencies(parse_traceroute(TRACEROUTE_OUT))
    assert [h["hop"] for h in hops] == [1, 2, 3, 4]
    assert [h["address"] for h in hops] == ["192.0.2.1", None, "21.4.9.19", "10.0.0.1"]
    assert [h["rtt_ms"] for h in hops] == [0.49, None, 11.438, 39.0]
    # latency is the RTT increase over the previous answering hop
    assert hops[1]["latency_ms"] is None
    assert hops[2]["latency_ms"] == pytest.approx(11.438 - 0.49)
    assert hops[3]["latency_ms"] == pytest.approx(39.0 - 11.438)

    hops = hop_latencies(parse_tracepath(TRACEPATH_OUT))
    assert [(h["hop"], h["address"], h["rtt_ms"]) for h in hops] == [
        (1, "192.0.2.1", 0.09),
        (2, None, None),
        (3, "21.4.9.19", 25.288),
    ]
    assert hops[2]["latency_ms"] == pytest.approx(25.288 - 0.09)


def test_profile_feeds_the_tuner(listening_port):
    """The profiler's JSON is what the tuner reads (airflow_transfer/tuning/stork_tuner.py)."""
    from airflow_transfer.tuning.stork_rules import DEFAULT_MAX_STREAMS, kernel_buffer_limit
    from airflow_transfer.tuning.stork_tuner import host_facts, path_facts, protocol_traits, tune_direction

    def even_up(n: int) -> int:
        return n + 1 if n > 1 and n % 2 else n

    from profilers import network

    sink = network.Sink(idle_timeout=10).start()
    try:
        out = network.run(host="127.0.0.1", port=sink.port, seconds=0.3, streams=2, hops=False, rtt_count=3)
    finally:
        sink.stop()
    path = path_facts(out, "send")
    assert path.rtt_ms > 0 and path.bandwidth_mbit > 0
    local = host_facts("local", network=out)
    assert local.tcp_rmem_max == out["kernel"]["tcp_rmem"][2]
    tuned = tune_direction(local, local, path, protocol="sftp")
    assert tuned.bdp_bytes > 0 and tuned.tcp_buffer >= 64 * 1024
    # The stream count follows the kernel-limit rule for whatever BDP this loopback measured:
    # one stream where one buffer holds it; under a loaded machine the probe's RTT (and so the
    # BDP) grows, and then enough streams that their buffers add up to it.
    traits = protocol_traits("sftp")
    limit, _ = kernel_buffer_limit(local, local, traits.client_sets_buffers, traits.client_sets_buffers)
    assert limit
    if tuned.bdp_bytes <= limit:
        assert tuned.streams == 1
    else:
        assert tuned.streams == min(DEFAULT_MAX_STREAMS, even_up(-(-tuned.bdp_bytes // limit)))
