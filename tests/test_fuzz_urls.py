"""Endpoint strings (property-based): every URL, path or odd string either parses or is
refused with a UsageError; a password in a URL is never accepted and never echoed."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from airflow_transfer.errors import TransferError, UsageError
from airflow_transfer.protocols.endpoint import ParsedURL, parse_url
from tests.support.fuzz import ANY_TEXT, ODD_TEXT, fuzz, urls


def _has_password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return False


def _check_usage_error(exc: TransferError, url: str) -> None:
    assert exc.what, url
    assert "\n" not in exc.what, (url, exc.message)
    assert "Traceback" not in exc.message


@fuzz(400)
@given(urls())
@example("sftp://user:hunter2@host.invalid/x")
@example("sftp://[::1]:1/data")
@example("sftp://u@[fe80::1%25lo]:1/x")
@example("file:///a%00b")
def test_parse_url_parses_or_refuses(url):
    try:
        parsed = parse_url(url)
    except UsageError as exc:
        _check_usage_error(exc, url)
        assert "hunter2" not in exc.message
        return
    assert isinstance(parsed, ParsedURL)
    assert parsed.scheme and parsed.path
    if parsed.scheme not in ("file", "memory"):
        assert not _has_password(url), f"password accepted in {url!r}"
        assert parsed.host, url
        assert parsed.port is None or 0 <= parsed.port <= 65535, url


@fuzz(150)
@given(urls())
@example("sftp://user:hunter2@host.invalid/x")
def test_hook_endpoint_without_connection(url):
    """What the operators do with src/dst when no conn_id is given."""
    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    if url.lower().startswith("any://"):
        url = "sftp" + url[3:]  # resolving any:// probes the network: the CLI suite covers it
    try:
        ep = TransferEndpointHook(None).endpoint(url)
    except TransferError as exc:
        _check_usage_error(exc, url)
        return
    assert "hunter2" not in ep.display
    assert ep.scheme and ep.path is not None


@fuzz(150)
@given(st.one_of(urls(), ANY_TEXT))
@example("any://host.invalid/x?sftp=99999999")
@example("any://host.invalid/x?prefer=ftp,,SFTP")
def test_parse_any(url):
    from airflow_transfer.protocols.hostlib import parse_any

    try:
        a = parse_any(url)
    except UsageError as exc:
        _check_usage_error(exc, url)
        return
    assert a.host and a.prefer
    for proto, port in a.ports.items():
        assert 0 < port <= 65535, (url, proto, port)


@fuzz(150)
@given(st.one_of(urls(), ANY_TEXT))
def test_profile_host_spec(spec):
    from airflow_transfer.profiling.hosts import parse_host

    try:
        host = parse_host(spec)
    except UsageError as exc:
        _check_usage_error(exc, spec)
        return
    assert host.key


@fuzz(100)
@given(url=st.one_of(urls(), ODD_TEXT))
@example(url="sftp://other.invalid:1/x")
@example(url="/data/run42")
@example(url="file:///tmp/x")
@example(url="")
def test_hook_endpoint_with_connection(monkeypatch, url):
    """src/dst next to a conn_id: a remote path or URL on the connection's host, or a UsageError."""
    import json

    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_AT_FUZZ",
        json.dumps(
            {
                "conn_type": "sftp",
                "host": "conn-host.invalid",
                "port": 2222,
                "login": "lab",
                "password": "hunter2",
                "extra": {"known_hosts": "/nonexistent/known_hosts", "token": "hunter2"},
            }
        ),
    )
    if url.lower().startswith("any://"):
        url = "sftp" + url[3:]
    try:
        ep = TransferEndpointHook("at_fuzz").endpoint(url)
    except TransferError as exc:
        _check_usage_error(exc, url)
        assert "hunter2" not in exc.message
        return
    assert "hunter2" not in ep.display and "hunter2" not in repr(ep)
    assert ep.path.strip(), url
    if ep.scheme == "sftp":
        assert ep.target.check_host_key and ep.target.host


def test_a_connection_s_credentials_never_go_to_another_host(monkeypatch):
    """A URL naming another host next to a conn_id is refused; its own host (any case) or a bare path is fine."""
    import json

    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_AT_PINNED",
        json.dumps({"conn_type": "sftp", "host": "lab.example", "login": "lab", "password": "hunter2"}),
    )
    hook = TransferEndpointHook("at_pinned")
    with pytest.raises(TransferError) as err:
        hook.endpoint("sftp://elsewhere.example/data")
    assert "elsewhere.example is not the host of connection 'at_pinned' (lab.example)" in err.value.message
    assert "hunter2" not in str(err.value)
    assert hook.endpoint("sftp://LAB.example:2200/data").target.host.lower() == "lab.example"
    assert hook.endpoint("/data").target.host == "lab.example"
    monkeypatch.setenv("AIRFLOW_CONN_AT_PINNED", json.dumps({"conn_type": "sftp", "login": "lab", "password": "x"}))
    assert (
        TransferEndpointHook("at_pinned").endpoint("sftp://any.example/d").target.host == "any.example"
    )  # no host: credentials only
