"""Attribute-based transfers end to end: local, the real sshd, a real HTTP server with Range support.

Every result is compared with the same filter applied row by row in Python
to the whole table read locally, so the query path (pruning, projection,
pushdown, streaming, writing) is checked against an independent reference.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from airflow_transfer.errors import TransferError, UsageError
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh import SSHTarget
from airflow_transfer.query.run import QueryRequest, run_query
from tests.support.cli import run_cli, ssh_args
from tests.support.climate import climate_table
from tests.support.http_range import RangeServer, make_cert
from tests.support.sshd import chown_to_user

SELECT = ["temperature", "time"]


def write(table: pa.Table, path: Path, fmt: str, row_group: int = 65536) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=row_group)
    elif fmt == "csv":
        pcsv.write_csv(table, path)
    else:
        feather.write_feather(table, path, chunksize=row_group)
    return path


def reference(table: pa.Table, keep, cols: list[str]) -> list[dict]:
    """The expected rows: a Python predicate over every row of the full table."""
    return [{c: r[c] for c in cols} for r in table.to_pylist() if keep(r)]


def result_rows(path: str, fmt: str, schema: pa.Schema | None = None) -> list[dict]:
    if fmt == "csv":
        if schema is not None:  # pyarrow writes timestamp[s] with a ".000" fraction: read it back as ms
            schema = pa.schema(
                [pa.field(f.name, pa.timestamp("ms")) if pa.types.is_timestamp(f.type) else f for f in schema]
            )
        opts = pcsv.ConvertOptions(column_types=schema) if schema is not None else None
        return pcsv.read_csv(path, convert_options=opts).to_pylist()
    return pq.read_table(path).to_pylist()


def gt(col, v):
    return lambda r: r[col] is not None and r[col] > v


def sftp_ep(sshd, path) -> Endpoint:
    return Endpoint(
        "sftp",
        str(path),
        SSHTarget(
            host=sshd.host,
            port=sshd.port,
            username=sshd.user,
            key_filenames=[str(sshd.client_key)],
            known_hosts=[str(sshd.known_hosts)],
            look_for_keys=False,
        ),
    )


QUERIES = [
    ("humidity > 50", gt("humidity", 50)),
    ("humidity > 500", lambda r: False),  # empty result
    ("humidity is null or humidity >= 0", lambda r: True),  # every row
    (
        "temperature is null and humidity between 20 and 30",
        lambda r: r["temperature"] is None and r["humidity"] is not None and 20 <= r["humidity"] <= 30,
    ),
    (
        "time >= '2020-01-04T00:00:00' and not humidity < 90",
        lambda r: (
            r["time"] >= __import__("datetime").datetime(2020, 1, 4)
            and r["humidity"] is not None
            and not r["humidity"] < 90
        ),
    ),
]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "ipc"])
@pytest.mark.parametrize("where,keep", QUERIES, ids=[q[0] for q in QUERIES])
def test_local_results_equal_reference(local_dir, fmt, where, keep):
    table = climate_table(20_000, seed=3, nulls=True)
    src = write(table, local_dir / f"c.{ {'ipc': 'arrow'}.get(fmt, fmt) }", fmt, row_group=4096)
    out = local_dir / "out" / "r.parquet"
    s = run_query(QueryRequest(Endpoint("file", str(src)), Endpoint("file", str(out)), select=SELECT, where=where))
    got = result_rows(str(out), "parquet")
    assert got == reference(table, keep, SELECT)
    assert s["rows"] == len(got) and s["rows_scanned"] <= 20_000
    assert s["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest() and s["bytes_written"] == out.stat().st_size
    assert s["input_format"] == fmt and s["columns"] == SELECT
    assert pq.read_schema(out).names == SELECT  # even an empty result has the schema
    assert not [p for p in os.listdir(out.parent) if p.endswith(".atpart")]


def test_csv_output_and_all_columns(local_dir):
    table = climate_table(5_000, seed=4, nulls=True)
    src = write(table, local_dir / "c.parquet", "parquet", row_group=1000)
    out = local_dir / "r.csv"
    s = run_query(QueryRequest(Endpoint("file", str(src)), Endpoint("file", str(out)), where="humidity < 10"))
    assert s["format"] == "csv" and s["columns"] == table.column_names
    got = result_rows(str(out), "csv", table.schema)
    assert got == reference(table, lambda r: r["humidity"] is not None and r["humidity"] < 10, table.column_names)


@pytest.mark.parametrize("codec,ext", [("gzip", "gz"), ("bz2", "bz2"), ("zstd", "zst")])
def test_compressed_csv(local_dir, sshd, remote_dir, codec, ext):
    table = climate_table(30_000, seed=13, nulls=True)
    plain = write(table, local_dir / "c.csv", "csv")
    packed = remote_dir / f"c.csv.{ext}"
    with pa.CompressedOutputStream(str(packed), codec) as out:
        out.write(plain.read_bytes())
    chown_to_user(remote_dir, sshd.user)
    s = run_query(
        QueryRequest(
            sftp_ep(sshd, packed),
            Endpoint("file", str(local_dir / "outdir") + "/"),
            select=SELECT,
            where="humidity > 50",
        )
    )
    assert s["input_format"] == "csv" and s["destination"].endswith("/outdir/c.query.parquet")
    assert result_rows(s["destination"], "parquet") == reference(table, gt("humidity", 50), SELECT)
    assert s["bytes_read"] == packed.stat().st_size  # the compressed bytes, once


def test_directory_source_and_directory_destination(local_dir):
    parts = [climate_table(3000, seed=s, start=3000 * s) for s in range(3)]
    for i, t in enumerate(parts):
        write(t, local_dir / "ds" / f"sub{i % 2}" / f"part{i}.parquet", "parquet", row_group=1000)
    (local_dir / "ds" / ".hidden.parquet").write_bytes(b"not parquet")  # skipped
    outdir = local_dir / "outdir"
    outdir.mkdir()
    s = run_query(
        QueryRequest(
            Endpoint("file", str(local_dir / "ds")), Endpoint("file", str(outdir)), select=SELECT, where="humidity > 75"
        )
    )
    assert s["files"] == 3 and s["destination"] == str(outdir / "ds.query.parquet")
    ordered = [parts[0], parts[2], parts[1]]  # sub0/part0, sub0/part2, sub1/part1
    expected = [row for t in ordered for row in reference(t, gt("humidity", 75), SELECT)]
    assert result_rows(s["destination"], "parquet") == expected


def test_failure_leaves_no_output(local_dir):
    write(climate_table(1000, seed=1), local_dir / "ds" / "a.parquet", "parquet")
    write(climate_table(1000, seed=2).drop_columns(["humidity"]), local_dir / "ds" / "b.parquet", "parquet")
    out = local_dir / "o.parquet"
    with pytest.raises(TransferError, match="column 'humidity' is missing"):
        run_query(
            QueryRequest(
                Endpoint("file", str(local_dir / "ds")), Endpoint("file", str(out)), select=SELECT, where="humidity > 1"
            )
        )
    assert not out.exists() and not list(local_dir.glob(".*atpart"))


def test_sftp_source_and_destination(sshd, remote_dir):
    table = climate_table(30_000, seed=5, nulls=True)
    for fmt in ("parquet", "csv", "ipc"):
        src = write(table, remote_dir / "in" / f"c.{ {'ipc': 'arrow'}.get(fmt, fmt) }", fmt, row_group=8192)
        chown_to_user(remote_dir, sshd.user)
        dst = remote_dir / "out" / f"{fmt}.parquet"
        s = run_query(QueryRequest(sftp_ep(sshd, src), sftp_ep(sshd, dst), select=SELECT, where="humidity > 50"))
        assert result_rows(str(dst), "parquet") == reference(table, gt("humidity", 50), SELECT), fmt
        assert s["sha256"] == hashlib.sha256(dst.read_bytes()).hexdigest()
        assert s["destination"] == f"sftp://{sshd.user}@{sshd.host}:{sshd.port}{dst}"
        if fmt == "csv":  # CSV cannot be projected at the source: every byte, once
            assert s["bytes_source"] <= s["bytes_read"] <= s["bytes_source"] + 64 * 1024
    assert sorted(os.listdir(remote_dir / "out")) == ["csv.parquet", "ipc.parquet", "parquet.parquet"]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_sftp_directory_source(sshd, remote_dir, fmt):
    parts = [climate_table(2000 + 500 * i, seed=20 + i, nulls=True) for i in range(5)]
    for i, t in enumerate(parts):
        write(t, remote_dir / "ds" / f"p{i}.{fmt}", fmt, row_group=1000)
    (remote_dir / "ds" / "README.txt").write_text("not data: skipped")
    chown_to_user(remote_dir, sshd.user)
    (remote_dir / "res").mkdir()
    chown_to_user(remote_dir / "res", sshd.user)
    s = run_query(
        QueryRequest(
            sftp_ep(sshd, remote_dir / "ds"),
            sftp_ep(sshd, remote_dir / "res"),
            select=SELECT,
            where="humidity <= 20 or temperature is null",
        )
    )
    out = remote_dir / "res" / "ds.query.parquet"
    assert s["files"] == 5 and s["destination"].endswith(str(out))
    keep = lambda r: (r["humidity"] is not None and r["humidity"] <= 20) or r["temperature"] is None
    assert result_rows(str(out), "parquet") == [row for t in parts for row in reference(t, keep, SELECT)]
    assert s["bytes_source"] == sum((remote_dir / "ds" / f"p{i}.{fmt}").stat().st_size for i in range(5))


def test_parquet_reads_at_most_40_percent_over_sftp(sshd, remote_dir):
    """Row groups of 64k rows, 2 of 6 columns selected: the endpoint's accounting must say <= 40 %."""
    table = climate_table(400_000, seed=6)
    src = write(table, remote_dir / "c.parquet", "parquet", row_group=65536)
    chown_to_user(remote_dir, sshd.user)
    meta = pq.read_metadata(src)
    assert meta.num_columns == 6 and meta.row_group(0).num_rows == 65536
    out = remote_dir.parent / f"{remote_dir.name}-local" / "r.parquet"
    s = run_query(
        QueryRequest(
            sftp_ep(sshd, src), Endpoint("file", str(out)), select=["temperature", "humidity"], where="humidity > 50"
        )
    )
    size = src.stat().st_size
    assert s["bytes_source"] == size
    assert s["bytes_read"] <= 0.40 * size, (s["bytes_read"], size)
    # ... and what was read is what the two columns occupy, plus the footer.
    cols = sum(meta.row_group(i).column(j).total_compressed_size for i in range(meta.num_row_groups) for j in (3, 4))
    assert cols <= s["bytes_read"] <= cols + 2 * 65536
    assert result_rows(str(out), "parquet") == reference(table, gt("humidity", 50), ["temperature", "humidity"])


def test_row_group_pruning_over_sftp(sshd, remote_dir):
    table = climate_table(300_000, seed=7)  # time grows with the row: row-group statistics prune
    src = write(table, remote_dir / "c.parquet", "parquet", row_group=65536)
    chown_to_user(remote_dir, sshd.user)
    out = remote_dir.parent / f"{remote_dir.name}-local" / "r.parquet"
    cut = table["time"][280_000].as_py()
    s = run_query(
        QueryRequest(
            sftp_ep(sshd, src), Endpoint("file", str(out)), select=SELECT, where=f"time >= '{cut.isoformat()}'"
        )
    )
    assert s["row_groups"] == {"total": 5, "read": 1}
    assert s["rows"] == 20_000 and s["rows_scanned"] == 300_000 - 4 * 65536
    assert s["bytes_read"] < 0.12 * src.stat().st_size


@pytest.fixture
def http_server(local_dir):
    root = local_dir / "www"
    root.mkdir()
    server = RangeServer(root).start()
    yield server
    server.stop()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "ipc"])
def test_http_source(http_server, local_dir, fmt):
    table = climate_table(200_000, seed=8, nulls=True)
    name = f"c.{ {'ipc': 'arrow'}.get(fmt, fmt) }"
    src = write(table, http_server.root / name, fmt, row_group=65536)
    out = local_dir / "r.parquet"
    s = run_query(
        QueryRequest(
            http_server.url(name), Endpoint("file", str(out)), select=["temperature", "humidity"], where="humidity > 50"
        )
    )
    assert result_rows(str(out), "parquet") == reference(table, gt("humidity", 50), ["temperature", "humidity"])
    assert s["bytes_source"] == src.stat().st_size
    assert s["bytes_read"] == http_server.bytes_sent  # our accounting agrees with the server's
    if fmt == "parquet":
        assert s["bytes_read"] <= 0.40 * s["bytes_source"]


def test_https_source_checks_the_certificate(local_dir):
    table = climate_table(100_000, seed=12)
    root = local_dir / "www-tls"
    write(table, root / "c.parquet", "parquet", row_group=16384)
    cert, key = make_cert(local_dir)
    server = RangeServer(root, tls=(cert, key)).start()
    try:
        out = local_dir / "tls.parquet"
        with pytest.raises(TransferError, match="TLS failed"):  # self-signed: not trusted by default
            run_query(QueryRequest(server.url("c.parquet"), Endpoint("file", str(out))))
        assert not out.exists()
        # Trusted through a CA file; no select, no where: every row and column.
        r = run_cli("query", server.url("c.parquet") + "?token=s3cret", str(out), "--ca-file", str(cert), "--json")
        assert r.code == 0, r.err
        s = json.loads(r.out)
        assert pq.read_table(out).equals(pq.read_table(root / "c.parquet"))
        assert s["source"] == f"https://127.0.0.1:{server.port}/c.parquet"  # no query string in reports
        assert "s3cret" not in r.err + r.out
        assert s["bytes_read"] == server.bytes_sent
    finally:
        server.stop()


def test_http_without_range_support(local_dir):
    root = local_dir / "www2"
    write(climate_table(1000), root / "c.parquet", "parquet")
    write(climate_table(1000), root / "c.csv", "csv")
    server = RangeServer(root, ranges=False).start()
    try:
        with pytest.raises(TransferError, match="ignores Range requests"):
            run_query(
                QueryRequest(
                    server.url("c.parquet"), Endpoint("file", str(local_dir / "a.parquet")), where="humidity > 1"
                )
            )
        # CSV is read front to back: a server without ranges still serves it.
        s = run_query(
            QueryRequest(server.url("c.csv"), Endpoint("file", str(local_dir / "b.parquet")), where="humidity > 1")
        )
        assert s["rows"] == sum(1 for r in climate_table(1000).to_pylist() if r["humidity"] > 1)
        with pytest.raises(TransferError, match="404"):
            run_query(QueryRequest(server.url("nope.parquet"), Endpoint("file", str(local_dir / "c.parquet"))))
    finally:
        server.stop()
    assert not (local_dir / "a.parquet").exists()


def test_cli_query_over_sftp_json(sshd, remote_dir, local_dir):
    table = climate_table(10_000, seed=9)
    src = write(table, remote_dir / "c.csv", "csv")
    chown_to_user(remote_dir, sshd.user)
    out = local_dir / "cli.csv"
    r = run_cli(
        "query",
        f"sftp://{sshd.user}@{sshd.host}:{sshd.port}{src}",
        str(out),
        "--select",
        "temperature,time",
        "--where",
        "humidity > 50",
        "--json",
        *ssh_args(sshd),
    )
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert len(r.out.strip().splitlines()) == 1
    assert {"rows", "bytes_read", "bytes_written", "sha256", "seconds", "bytes_source"} <= set(s)
    assert s["format"] == "csv" and "done:" in r.err
    got = result_rows(str(out), "csv", pa.schema([("temperature", pa.float64()), ("time", pa.timestamp("s"))]))
    assert got == reference(table, gt("humidity", 50), SELECT)


@pytest.mark.parametrize(
    "args,text",
    [
        (["--where", "humidity >> 50"], "at character 11: expected a column name or a value"),
        (["--where", "humdity > 50"], "at character 1: unknown column 'humdity'"),
        (["--where", "humidity > 'wet'"], "cannot compare column 'humidity' (double) with a string"),
        (["--select", "temperature,nope"], "--select names unknown column 'nope'"),
        (["--format", "xml"], "invalid choice"),
    ],
)
def test_cli_bad_query_exit_2(local_dir, args, text):
    src = write(climate_table(100), local_dir / "c.parquet", "parquet")
    r = run_cli("query", str(src), str(local_dir / "o.parquet"), *args)
    assert r.code == 2, r.err
    assert text in r.err and "Traceback" not in r.err
    if "--where" in args:
        lines = r.err.strip().splitlines()
        assert lines[-2].strip() == args[1] and lines[-1].strip() == "^"
    assert not (local_dir / "o.parquet").exists()


def test_usage_errors():
    with pytest.raises(UsageError, match="unknown output format"):
        run_query(QueryRequest(Endpoint("file", "/nonexistent"), Endpoint("file", "/tmp/x"), format="xml"))
    with pytest.raises(TransferError, match="no such file"):
        run_query(QueryRequest(Endpoint("file", "/nonexistent/x.parquet"), Endpoint("file", "/tmp/x.parquet")))


def test_sftp_errors_are_one_line(sshd, remote_dir, local_dir):
    with pytest.raises(TransferError, match="cannot read the source: no such file") as info:
        run_query(
            QueryRequest(sftp_ep(sshd, remote_dir / "missing.parquet"), Endpoint("file", str(local_dir / "m.parquet")))
        )
    assert "\n" not in info.value.message
    write(climate_table(100), local_dir / "c.parquet", "parquet")
    if os.geteuid() != 0:
        pytest.fail("needs root to make a directory the sshd's user cannot write", pytrace=False)
    locked = remote_dir.parent / f"{remote_dir.name}-locked"
    locked.mkdir()
    os.chmod(locked, 0o755)  # owned by root: the sshd's user cannot write there
    with pytest.raises(TransferError, match="cannot create the output file: permission denied"):
        run_query(QueryRequest(Endpoint("file", str(local_dir / "c.parquet")), sftp_ep(sshd, locked / "o.parquet")))
    assert os.listdir(locked) == []


def test_unknown_destination_host_key_is_refused(sshd, local_dir):
    from airflow_transfer.errors import HostKeyError

    write(climate_table(100), local_dir / "c.parquet", "parquet")
    dst = sftp_ep(sshd, local_dir / "never.parquet")
    dst.target.known_hosts = [str(local_dir / "empty_known_hosts")]
    with pytest.raises(HostKeyError, match="is not known"):
        run_query(QueryRequest(Endpoint("file", str(local_dir / "c.parquet")), dst, where="humidity > 1"))
    assert not (local_dir / "never.parquet").exists()
