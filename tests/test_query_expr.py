"""The `where` language: what it accepts, what it means (against a Python reference), how it fails."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from airflow_transfer.query.expr import QueryError, Where, parse_select

T0 = dt.datetime(2020, 1, 1)
ROWS = [
    {"h": 10.5, "t": 1.0, "name": "oslo", "n": 1, "ok": True, "ts": T0, "d": dt.date(2020, 1, 1)},
    {
        "h": 55.0,
        "t": None,
        "name": "rome",
        "n": 2,
        "ok": False,
        "ts": T0 + dt.timedelta(days=40),
        "d": dt.date(2020, 2, 10),
    },
    {"h": None, "t": 3.5, "name": None, "n": 3, "ok": None, "ts": None, "d": None},
    {
        "h": 80.0,
        "t": -2.0,
        "name": "it's",
        "n": None,
        "ok": True,
        "ts": T0 + dt.timedelta(days=400),
        "d": dt.date(2021, 2, 4),
    },
    {
        "h": 50.0,
        "t": 0.0,
        "name": "lima",
        "n": 5,
        "ok": False,
        "ts": T0 + dt.timedelta(hours=1),
        "d": dt.date(2020, 1, 1),
    },
]
SCHEMA = pa.schema(
    [
        ("h", pa.float64()),
        ("t", pa.float32()),
        ("name", pa.string()),
        ("n", pa.int32()),
        ("ok", pa.bool_()),
        ("ts", pa.timestamp("ms")),
        ("d", pa.date32()),
    ]
)
TABLE = pa.Table.from_pylist(ROWS, schema=SCHEMA)


def _sel(expr: str) -> list[int]:
    """Row indexes the compiled expression selects."""
    t = TABLE.append_column("i", pa.array(range(len(ROWS))))
    return t.filter(Where.parse(expr).compile(SCHEMA))["i"].to_pylist()


def _ok(v) -> bool:
    return v is True


# SQL three-valued logic written out by hand: None is unknown, only True selects.
def _and(a, b):
    return False if a is False or b is False else (None if a is None or b is None else True)


def _or(a, b):
    return True if a is True or b is True else (None if a is None or b is None else False)


def _not(a):
    return None if a is None else not a


def _cmp(a, op, b):
    if a is None or b is None:
        return None
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


CASES = [
    ("h > 50", lambda r: _cmp(r["h"], ">", 50)),
    ("h >= 50 and t < 1", lambda r: _and(_cmp(r["h"], ">=", 50), _cmp(r["t"], "<", 1))),
    ("h < 20 or t > 3", lambda r: _or(_cmp(r["h"], "<", 20), _cmp(r["t"], ">", 3))),
    ("not h > 50", lambda r: _not(_cmp(r["h"], ">", 50))),
    ("NOT (h > 50 OR n = 1)", lambda r: _not(_or(_cmp(r["h"], ">", 50), _cmp(r["n"], "==", 1)))),
    ("name in ('oslo', 'it''s')", lambda r: None if r["name"] is None else r["name"] in ("oslo", "it's")),
    ("name not in ('oslo')", lambda r: None if r["name"] is None else r["name"] not in ("oslo",)),
    ("n between 2 and 4", lambda r: _and(_cmp(r["n"], ">=", 2), _cmp(r["n"], "<=", 4))),
    ("n not between 2 and 4", lambda r: _not(_and(_cmp(r["n"], ">=", 2), _cmp(r["n"], "<=", 4)))),
    ("h is null", lambda r: r["h"] is None),
    ("name is not null and n <> 2", lambda r: _and(r["name"] is not None, _cmp(r["n"], "!=", 2))),
    ("ok", lambda r: r["ok"]),
    ("ok = false", lambda r: _cmp(r["ok"], "==", False)),
    ("ts >= '2020-02-01'", lambda r: _cmp(r["ts"], ">=", dt.datetime(2020, 2, 1))),
    ("ts < timestamp '2020-01-01T00:30:00Z'", lambda r: _cmp(r["ts"], "<", dt.datetime(2020, 1, 1, 0, 30))),
    ("d = date '2020-01-01'", lambda r: _cmp(r["d"], "==", dt.date(2020, 1, 1))),
    (
        "d between '2020-01-02' and '2021-12-31'",
        lambda r: _and(_cmp(r["d"], ">=", dt.date(2020, 1, 2)), _cmp(r["d"], "<=", dt.date(2021, 12, 31))),
    ),
    ("n = 2.5 or n > 1e0", lambda r: _or(_cmp(r["n"], "==", 2.5), _cmp(r["n"], ">", 1.0))),
    ("h > -1e9 and \"name\" >= 'm'", lambda r: _and(_cmp(r["h"], ">", -1e9), _cmp(r["name"], ">=", "m"))),
    ("50 < h", lambda r: _cmp(50, "<", r["h"])),
    ("h > t", lambda r: _cmp(r["h"], ">", r["t"])),
    ("n = 99999999999", lambda r: _cmp(r["n"], "==", 99999999999)),
]


@pytest.mark.parametrize("expr,ref", CASES, ids=[c[0] for c in CASES])
def test_expression_matches_sql_reference(expr, ref):
    expected = [i for i, r in enumerate(ROWS) if _ok(ref(r))]
    assert _sel(expr) == expected


ERRORS = [
    ("", 0, "empty"),
    ("h >", 3, "expected a column name or a value"),
    ("h > 50 and", 10, "expected a column name or a value"),
    ("h > 50 50", 7, "expected 'and', 'or'"),
    ("(h > 50", 7, "')'"),
    ("hum > 50", 0, "unknown column 'hum'"),
    ("h > 1 and nme = 'x'", 10, "unknown column 'nme'"),
    ("name > 5", 7, "cannot compare column 'name' (string) with a number"),
    ("h = 'high'", 4, "cannot compare column 'h' (double) with a string"),
    ("name = 'oslo", 7, "string literal is not closed"),
    ("h > 5 ; drop", 6, "unexpected character ';'"),
    ("ts > timestamp 'yesterday'", 15, "not a valid timestamp"),
    ("ts > 'yesterday'", 5, "not a valid timestamp"),
    ("h is 5", 5, "expected 'null'"),
    ("h = null", 4, "'is null'"),
    ("n", 0, "is not a condition by itself"),
    ("h not > 5", 6, "expected 'in' or 'between'"),
    ("n in (1, 'a')", 9, "cannot compare column 'n' (int32) with a string"),
    ("__import__('os').system('id')", 16, "unexpected character '.'"),
    ("__import__ ('os')", 11, "expected 'and', 'or'"),
    ("h between 1 or 2", 12, "expected 'and' in 'between"),
]


@pytest.mark.parametrize("expr,pos,text", ERRORS, ids=[e[0] or "<empty>" for e in ERRORS])
def test_errors_point_at_the_position(expr, pos, text):
    with pytest.raises(QueryError) as info:
        Where.parse(expr).compile(SCHEMA)
    err = info.value
    assert text in err.message, err.message
    assert err.pos == pos, (err.message, err.pos)
    assert "\n" not in err.message  # one line; the caret is separate
    expr_line, caret_line = err.caret.split("\n")
    assert caret_line.index("^") - 2 == pos and expr_line[2:] == expr
    assert err.exit_code == 2


def test_columns_and_select_lists():
    assert Where.parse('b > 1 and (a = 2 or b < 0) and "c d" is null').columns == ["b", "a", "c d"]
    assert parse_select('temperature, time,"odd, name"') == ["temperature", "time", "odd, name"]
    assert parse_select("*") is None and parse_select(None) is None
    assert parse_select(["a", "b"]) == ["a", "b"]
    with pytest.raises(QueryError.__mro__[1]):
        parse_select("a,a")


def test_dictionary_strings_and_zoned_timestamps():
    utc = dt.UTC
    t = pa.table(
        {
            "s": pa.array(["a", "b", None, "a"]).dictionary_encode(),
            "ts": pa.array(
                [
                    dt.datetime(2020, 1, 1, tzinfo=utc),
                    dt.datetime(2020, 1, 1, 12, tzinfo=utc),
                    None,
                    dt.datetime(2020, 1, 2, tzinfo=utc),
                ],
                pa.timestamp("s", tz="UTC"),
            ),
        }
    )

    def sel(expr):
        return t.append_column("i", pa.array(range(4))).filter(Where.parse(expr).compile(t.schema))["i"].to_pylist()

    assert sel("s = 'a'") == [0, 3]
    assert sel("s in ('b', 'zz')") == [1]
    assert sel("s not in ('b')") == [0, 3]  # the null row is unknown, not selected
    assert sel("ts = '2020-01-01T01:00:00+01:00'") == [0]  # an offset literal is converted
    assert sel("ts > '2020-01-01T06:00:00'") == [1, 3]  # a naive literal means UTC
