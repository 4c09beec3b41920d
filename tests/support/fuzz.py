"""Hypothesis strategies and checks shared by the bad-input suites (tests/test_fuzz_*.py).

Hosts that look reachable are loopback with port 1 (nothing listens there: refused at
once) or names under .invalid (RFC 2606: never resolves), so no example waits on a
network timeout or reaches a real server.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Reproducible in CI: the same examples every run, no per-example deadline (the first
# call imports pyarrow/paramiko), bounded so each suite stays within a few seconds.
_BASE = settings(
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)


def fuzz(max_examples: int) -> settings:
    return settings(_BASE, max_examples=max_examples)


ODD_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24)
ANY_TEXT = st.text(max_size=24)  # NUL, surrogates, control characters included

SCHEMES = st.sampled_from(
    ["sftp", "SFTP", "file", "ftp", "http", "https", "any", "memory", "gopher", "sftp+x", "", "s f", "1sftp"]
)
USERINFO = st.one_of(
    st.just(""),
    st.sampled_from(["user@", "u%40x@", "@", "user:@", "user:secret@", ":pw@", "us er@", "%ff@", "a@b@"]),
    ODD_TEXT.map(lambda t: t + "@"),
)
HOSTS = st.one_of(
    st.sampled_from(
        [
            "127.0.0.1",
            "[::1]",
            "localhost",
            "host.invalid",
            "",
            "[::1",
            "::1",
            "[fe80::1%25lo]",
            "[zz]",
            "%41.invalid",
            "h_st.invalid",
            "xn--.invalid",
            "999.999.999.999",
            "[::ffff:127.0.0.1]",
            "localhost.",
        ]
    ),
    ODD_TEXT.map(lambda t: t.replace("/", "") + ".invalid"),
)
PORTS = st.one_of(
    st.just(""),
    st.sampled_from([":1", ":0", ":65536", ":-1", ":abc", ":", ":99999999999", ":1:2", ": 1", ":+1", ":1.5"]),
)
PATHS = st.one_of(
    st.sampled_from(
        [
            "",
            "/",
            "/tmp/x",
            "/~/",
            "/~",
            "/%00x",
            "/%2e%2e/etc",
            "/a%2Fb",
            "/a b",
            "/../../etc",
            "//double",
            "/%",
            "/%zz",
            "/\n",
            "?q=1",
            "#frag",
            "/x?prefer=ftp,nope",
            "/x?sftp=abc",
            "/x?sftp=70000",
        ]
    ),
    ODD_TEXT.map(lambda t: "/" + t),
)


@st.composite
def urls(draw) -> str:
    """Endpoint strings: well-formed and broken URLs, plain paths and odd text."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(ANY_TEXT)
    if kind == 1:
        return draw(
            st.sampled_from(
                [
                    "",
                    "://",
                    "sftp://",
                    "sftp:///x",
                    "file://host/x",
                    "any://",
                    "~",
                    "-",
                    "--",
                    "sftp://[::1]:1/x",
                    "sftp://user@[::1]/x",
                    ".",
                    "..",
                    "s3",
                    "memory://",
                    "any://host.invalid/x?prefer=",
                ]
            )
        )
    scheme, user, host, port, path = (draw(SCHEMES), draw(USERINFO), draw(HOSTS), draw(PORTS), draw(PATHS))
    if host in ("127.0.0.1", "[::1]", "localhost") and not port:
        port = ":1"  # never a real server's default port on this machine
    return f"{scheme}://{user}{host}{port}{path}"


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_main(argv: list[str]) -> Outcome:
    """`airflow-transfer ARGV` in this process. Any exception that escapes main() is
    what a user would see as a traceback, so it propagates and fails the test."""
    from airflow_transfer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
            code = exc.code if isinstance(exc.code, int) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_clear_cli_error(res: Outcome, argv: list[str]) -> None:
    """Non-zero exit with our one-line error (or argparse's usage + one error line)."""
    assert "Traceback" not in res.err, (argv, res.err)
    if res.code == 0:
        return
    assert res.code in (1, 2), (argv, res.code, res.err)
    if res.code == 1 and "INCOMPLETE: " in res.err:  # the copy ran; some files failed, each named
        return
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert lines, (argv, "error without a message")
    errors = [line for line in lines if line.startswith("airflow-transfer") and ": error: " in line]
    assert errors, (argv, res.err)
    if errors[0].startswith("airflow-transfer: error: "):
        assert res.err.count("airflow-transfer: error: ") == 1, (argv, res.err)
    else:  # argparse: "usage: ..." then "airflow-transfer copy: error: ..."
        assert res.code == 2, (argv, res.code, res.err)
