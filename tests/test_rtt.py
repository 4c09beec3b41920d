"""What the kernel says of a TCP connection (protocols/rtt.py), read from real sockets."""

from __future__ import annotations

import socket

from airflow_transfer.protocols.rtt import tcp_rtt, tcp_send_rate


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    return server, client, peer


def test_a_tcp_connection_reports_its_rtt_and_the_rate_its_window_carries():
    server, client, peer = _pair()
    try:
        client.sendall(b"x" * 65536)
        got = b""
        while len(got) < 65536:
            got += peer.recv(65536)
        rtt, low = tcp_rtt(client)
        assert 0 < low <= rtt < 1.0
        rate = tcp_send_rate(client)
        # At least the initial window (10 segments of loopback's MSS) per RTT of well under a second.
        assert rate is not None and rate > 10 * 1000 / 1.0
    finally:
        for s in (client, peer, server):
            s.close()


def test_no_figure_where_there_is_no_tcp_socket():
    a, b = socket.socketpair()
    try:
        assert tcp_send_rate(a) is None and tcp_rtt(a) is None
        assert tcp_send_rate(None) is None and tcp_rtt(object()) is None
    finally:
        a.close()
        b.close()
