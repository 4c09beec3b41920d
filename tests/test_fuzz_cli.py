"""`airflow-transfer` arguments (property-based): whatever a user types, the command
either works or exits 1/2 with one `airflow-transfer: error:` line (argparse's usage
line plus its error for unknown options); never a traceback.

main() runs in this process (stderr captured) so hundreds of invocations take seconds.
Endpoints are local temporary paths or hosts that refuse at once (tests/support/fuzz.py).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.fuzz import ANY_TEXT, ODD_TEXT, assert_clear_cli_error, fuzz, run_main, urls

# A thread that dies prints its traceback to the user's terminal: fail on those too.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(scope="module")
def area():
    """A source tree with two small files; each example writes under its own destination."""
    base = Path(tempfile.mkdtemp(prefix="at-fuzz-cli-"))
    (base / "src" / "sub").mkdir(parents=True)
    (base / "src" / "a.txt").write_text("hello")
    (base / "src" / "sub" / "b.bin").write_bytes(os.urandom(3000))
    old = os.getcwd()
    os.chdir(base)  # relative paths an example invents land here, not in the repository
    yield base
    os.chdir(old)


def _dst(area: Path) -> str:
    return str(area / "dst" / uuid.uuid4().hex[:8])


NUMBERS = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["0", "-1", "1e309", "nan", "inf", "-inf", "0x10", "", " 3", "1_000", "٣"]),
    ODD_TEXT,
)
INT_OPTS = [
    "--pp",
    "--parallelism",
    "-p",
    "--concurrency",
    "-c",
    "--bdp",
    "--retries",
    "--switch-after",
    "--verify-block-size",
    "--verify-threads",
]
FLOAT_OPTS = ["--rtt-ms", "--bandwidth-mbit", "--progress-interval", "--probe-interval", "--deadline"]
TEXT_OPTS = [
    "--verify",
    "--verify-mode",
    "--algorithm",
    "--transfer-key",
    "--alt-protocols",
    "--store",
    "--identity",
    "--known-hosts",
    "--ssh-config",
    "--manifest",
    "--from-list",
]
UNKNOWN = st.sampled_from(["--nope", "-z", "--pp=", "--", "-", "--json=1", "--help-me", "---pp"])


@st.composite
def copy_options(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            argv += [draw(st.sampled_from(INT_OPTS)), draw(NUMBERS)]
        elif kind == 1:
            argv += [draw(st.sampled_from(FLOAT_OPTS)), draw(NUMBERS)]
        elif kind == 2:
            argv += [draw(st.sampled_from(TEXT_OPTS)), draw(st.one_of(ODD_TEXT, urls()))]
        else:
            argv.append(draw(UNKNOWN))
    return argv


def _safe(argv: list[str]) -> list[str]:
    # --store with a random value would open (and create) whatever SQLite path it names; keep
    # those inside the scratch area by making relative paths the only form left (cwd is there).
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--store" and out[i + 1].startswith(("sqlite:////", "/")):
            out[i + 1] = "sqlite:///fuzz.db"
    return out


@fuzz(120)
@given(opts=copy_options())
@example(opts=["--pp", "abc"])
@example(opts=["--rtt-ms", "nan", "--bandwidth-mbit", "100"])
@example(opts=["--rtt-ms", "inf", "--bandwidth-mbit", "inf"])
@example(opts=["--bdp", "-5"])
@example(opts=["--verify", "md6"])
@example(opts=["--verify-block-size", "-1", "--verify-mode", "block"])
@example(opts=["--retries", "0"])
@example(opts=["--deadline", "-1"])
@example(opts=["--switch-after", "0", "--alt-protocols", "gopher"])
@example(opts=["--store", "postgresql://nobody@127.0.0.1:1/x"])
@example(opts=["--store", "nonsense://x"])
@example(opts=["--manifest", "missing.parquet"])
@example(opts=["--identity", "no-such-key"])
@example(opts=["--progress-interval", "-1"])
@example(opts=["--progress-interval", "1e300"])
@example(opts=["--progress-interval", "nan"])
@example(opts=["--deadline", "nan"])
def test_copy_local_options(area, opts):
    argv = _safe(["copy", str(area / "src"), _dst(area), *opts])
    assert_clear_cli_error(run_main(argv), argv)


@fuzz(120)
@given(src=st.one_of(urls(), ANY_TEXT), to_remote=st.booleans())
@example(src="sftp://u@127.0.0.1:1/x", to_remote=False)
@example(src="sftp://[::1]:1/x", to_remote=True)
@example(src="any://host.invalid/x", to_remote=False)
@example(src="any://127.0.0.1/x?sftp=1&ftp=1&http=1&https=1", to_remote=True)
@example(src="ftp://127.0.0.1:1/x", to_remote=False)
@example(src="http://127.0.0.1:1/x", to_remote=False)
@example(src="memory://nothing/here", to_remote=False)
def test_copy_endpoints(area, src, to_remote):
    """SRC (or DST) any string; the other end a fresh local directory."""
    if to_remote:
        argv = ["copy", str(area / "src"), src]
    else:
        argv = ["copy", src, _dst(area)]
    if "://" not in src and src and not src.startswith("-"):
        argv[-1 if to_remote else 1] = str(area / "rel" / src.replace("\x00", "")) if src.strip() else src
    assert_clear_cli_error(run_main(argv), argv)


@fuzz(60)
@given(
    src=st.one_of(urls(), ANY_TEXT),
    opts=copy_options(),
    algo=st.sampled_from(["auto", "globus", "pcp", "mc", "adaptive-cc", "fixed", "x"]),
)
@example(src=".", opts=["--rtt-ms", "nan", "--bandwidth-mbit", "1"], algo="auto")
@example(src=".", opts=["--bdp", "1"], algo="globus")
def test_plan(area, src, opts, algo):
    opts = [o for o in opts if o not in ("--from-list", "--replica")]
    argv = _safe(["plan", src if "://" in src or not src else str(area / "src"), "--algorithm", algo, *opts])
    res = run_main(argv)
    assert_clear_cli_error(res, argv)


@fuzz(60)
@given(
    host=st.one_of(urls(), ANY_TEXT),
    host2=st.one_of(st.none(), urls()),
    opts=st.lists(
        st.sampled_from(
            ["--light", "--quick", "--json", "--via", "ssh", "--protocol", "ftp", "--protocol", "nope", "--nope"]
        ),
        max_size=3,
    ),
)
@example(host="sftp://u@127.0.0.1:1/x", host2=None, opts=["--quick"])
@example(host="sftp://u@[::1]:1/x", host2="sftp://u@127.0.0.1:1/y", opts=["--light"])
@example(host="ftp://127.0.0.1:1/x", host2=None, opts=[])
@example(host="localhost", host2="127.0.0.1", opts=[])
def test_profile(area, host, host2, opts):
    """No example names a reachable host, so nothing is profiled for real (that takes minutes)."""
    from airflow_transfer.profiling.hosts import _LOCAL_NAMES

    def unreachable(spec):
        # local names and local directories would start the real (slow) profilers
        return (
            spec is not None
            and spec.lower() not in _LOCAL_NAMES
            and "://" in spec
            and not spec.lower().startswith("file:")
        )

    if not unreachable(host) or (host2 is not None and not unreachable(host2)):
        host = "sftp://u@127.0.0.1:1/x" if not unreachable(host) else host
        host2 = None if host2 is None or not unreachable(host2) else host2
    argv = ["profile", host, *([host2] if host2 else []), *opts]
    assert_clear_cli_error(run_main(argv), argv)


@fuzz(80)
@given(
    select=st.one_of(st.none(), ODD_TEXT, st.sampled_from(["a,b", '"a b",c', ",", '"', "a,,b", "*"])),
    where=st.one_of(
        st.none(),
        ANY_TEXT,
        st.sampled_from(
            [
                "humidity > 50 and",
                "x in (",
                "'unterminated",
                "a == b == c",
                "not",
                "1 > 'x'",
                "a >= 1e999",
                "(((((",
                "a and or b",
            ]
        ),
    ),
    fmt=st.sampled_from([None, "csv", "parquet", "json"]),
    dst_kind=st.sampled_from(["file", "http", "url"]),
)
@example(select="temp", where="temp > 'x'", fmt=None, dst_kind="file")
def test_query(area, select, where, fmt, dst_kind):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = area / "table.parquet"
    if not table.exists():
        pq.write_table(pa.table({"temp": [1.0, 2.5, 40.0], "site": ["a", "b", "c"]}), table)
    dst = {
        "file": str(area / "q" / f"{uuid.uuid4().hex[:8]}.parquet"),
        "http": "http://127.0.0.1:1/x",
        "url": "sftp://u@127.0.0.1:1/out.parquet",
    }[dst_kind]
    argv = ["query", str(table), dst]
    if select is not None:
        argv += ["--select", select]
    if where is not None:
        argv += ["--where", where]
    if fmt is not None:
        argv += ["--format", fmt]
    res = run_main(argv)
    assert "Traceback" not in res.err, (argv, res.err)
    if res.code:
        assert res.code in (1, 2), (argv, res.code, res.err)
        assert "error: " in res.err, (argv, res.err)


@fuzz(40)
@given(
    argv=st.lists(
        st.one_of(ODD_TEXT, UNKNOWN, st.sampled_from(["copy", "plan", "list", "profile", "query", "--json", "-h"])),
        max_size=4,
    )
)
def test_any_argv(area, argv):
    """Free-form argument lists: usage errors (exit 2) or --help (exit 0); never a crash."""
    if argv and argv[0] in ("copy", "plan", "list", "profile", "query") and "-h" not in argv:
        argv = [
            a
            if "://" in a or a.startswith("-") or a in ("copy", "plan", "list", "profile", "query")
            else str(Path("rel") / a.replace("\x00", ""))
            for a in argv
        ]
        if argv[0] == "profile":
            argv = ["profile", "sftp://u@127.0.0.1:1/x", *[a for a in argv[1:] if a.startswith("-")]]
    assert_clear_cli_error(run_main(argv), argv)
