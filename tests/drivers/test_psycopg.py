#!/usr/bin/env python3
"""psycopg 3 (from PyPI) against pg_worlds, through worlds-proxy or straight to Postgres.

Run by tests/drivers/run.sh, which sets:
  DRIVERS_VIA   proxy  -- HOST:PORT is worlds-proxy: the database name chooses the world, the spec's
                          statements are typed verbatim and come back with the spec's columns and types
                direct -- HOST:PORT is Postgres: the world is chosen with options=-c worlds.world=..., and
                          the spec's statements run through worlds.sql() (jsonb rows: names are checked,
                          not order or types)
  DRIVERS_HOST, DRIVERS_PORT, DRIVERS_DB (the upstream database), DRIVERS_USER
  DRIVERS_PAST  a moment (UTC, 'YYYY-MM-DD HH:MI:SS') at which orders 7 had status 'new' and main was
                changed after it (run.sh sets it up)

Each test_* function is one check; the run prints "psycopg: N passed, N failed" and exits 1 on any failure.
The tests run in the order written (later ones rely on the world the first ones made).
"""
import datetime
import decimal
import os
import sys
import threading
import time
import traceback

import psycopg
from psycopg import errors

VIA = os.environ.get("DRIVERS_VIA", "direct")
HOST = os.environ.get("DRIVERS_HOST", "127.0.0.1")
PORT = int(os.environ["DRIVERS_PORT"])
DB = os.environ["DRIVERS_DB"]
USER = os.environ.get("DRIVERS_USER", "postgres")
PAST = os.environ.get("DRIVERS_PAST")
PROXY = VIA == "proxy"

# The spec's result columns (../shared/spec/worlds-sql.txt) with their Postgres types. SHOW WORLDS also has
# scope (jsonb), the declared scope (spec: Declared scope).
SHOW_WORLDS = [("name", "text"), ("id", "text"), ("parent", "text"), ("depth", "int4"),
               ("created", "timestamptz"), ("version", "int8"), ("meta", "jsonb"), ("owner", "text"),
               ("expires", "timestamptz"), ("active", "timestamptz"), ("pinned", "bool"), ("scope", "jsonb")]
SHOW_BRANCHES = [("name", "text"), ("parent", "text"), ("changes", "int8")]
DIFF = [("table", "text"), ("id", "text"), ("change", "text"), ("before", "jsonb"), ("after", "jsonb"),
        ("columns", "jsonb")]
DRY_RUN = [("table", "text"), ("id", "text"), ("outcome", "text"), ("detail", "text"), ("base", "jsonb"),
           ("ours", "jsonb"), ("theirs", "jsonb"), ("result", "jsonb"), ("postgres", "jsonb")]


def connect(world=None, autocommit=True, **kw):
    """A session in WORLD (None: main by the database's own name; 'main': main by that name)."""
    if PROXY:
        return psycopg.connect(host=HOST, port=PORT, user=USER, dbname=world or DB, autocommit=autocommit, **kw)
    if world and world != "main":
        # a name with a space (a moment) is escaped as the server's option parser reads it
        kw["options"] = kw.get("options", "") + " -c worlds.world=" + world.replace(" ", "\\ ")
    return psycopg.connect(host=HOST, port=PORT, user=USER, dbname=DB, autocommit=autocommit, **kw)


class Result:
    def __init__(self, columns, rows, tag):
        self.columns, self.rows, self.tag = columns, rows, tag

    def names(self):
        return [c for c, _ in self.columns]


def spec(conn, statement, **execute_kw):
    """Runs one statement of the spec: verbatim through the proxy, through worlds.sql() straight to Postgres.
    Returns its columns [(name, type name)], rows (dicts) and command tag (direct: the {"tag": ...} row's)."""
    cur = conn.cursor()
    if PROXY:
        cur.execute(statement, **execute_kw)
        if cur.description is None:
            return Result([], [], cur.statusmessage)
        cols = [(d.name, conn.adapters.types.get(d.type_code).name) for d in cur.description]
        rows = [dict(zip([c for c, _ in cols], r)) for r in cur.fetchall()]
        return Result(cols, rows, cur.statusmessage)
    cur.execute("select * from worlds.sql(%s)", (statement,), **execute_kw)
    rows = [r[0] for r in cur.fetchall()]
    if len(rows) == 1 and list(rows[0]) == ["tag"]:
        return Result([], [], rows[0]["tag"])
    return Result([(k, None) for k in (rows[0] if rows else {})], rows, cur.statusmessage)


def check_columns(res, expected, what):
    """Through the proxy: the exact names, order and types. Direct: the jsonb objects' keys (sorted there)."""
    if PROXY:
        assert res.columns == expected, f"{what}: columns {res.columns}, expected {expected}"
    elif res.rows:
        assert sorted(res.names()) == sorted(n for n, _ in expected), f"{what}: keys {res.names()}"


def expect_error(sqlstate, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except psycopg.Error as e:
        assert e.sqlstate == sqlstate, f"expected {sqlstate}, got {e.sqlstate}: {e}"
        assert e.diag.message_primary, f"{sqlstate} without a message"
        return e
    raise AssertionError(f"expected an error {sqlstate}, none came")


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


# ------------------------------------------------------------------------------------------------ tests

def test_create_world_and_show_worlds():
    with connect() as c:
        res = spec(c, "create world agent_7 with (task = 42);")
        assert res.tag == "CREATE WORLD", res.tag
        res = spec(c, "show worlds")
        check_columns(res, SHOW_WORLDS, "show worlds")
        by_name = {r["name"]: r for r in res.rows}
        assert set(by_name) >= {"main", "agent_7"}, by_name.keys()
        a = by_name["agent_7"]
        assert a["parent"] == "main" and a["depth"] == 1 and a["pinned"] is False, a
        assert a["meta"] == {"task": 42}, a["meta"]
        assert by_name["main"]["id"] == "main" and by_name["main"]["parent"] is None
        if PROXY:  # real types, decoded by psycopg
            assert isinstance(a["created"], datetime.datetime) and a["created"].tzinfo, a["created"]
            assert isinstance(a["version"], int)
            assert res.tag == "SHOW", res.tag


def test_spec_statements_extended_protocol():
    # server-side prepared (Parse with a name, Bind, Execute), binary results, and psycopg's own automatic
    # preparation after prepare_threshold (5) runs of the same text
    with connect() as c:
        for _ in range(7):
            res = spec(c, "show branches", prepare=None)
        check_columns(res, SHOW_BRANCHES, "show branches (auto-prepared)")
        res = spec(c, "show worlds", prepare=True)
        check_columns(res, SHOW_WORLDS, "show worlds (prepare=True)")
        res = spec(c, "show worlds", binary=True)
        check_columns(res, SHOW_WORLDS, "show worlds (binary)")
        assert "agent_7" in [r["name"] for r in res.rows]
        if PROXY:
            a = [r for r in res.rows if r["name"] == "agent_7"][0]
            assert a["depth"] == 1 and a["meta"] == {"task": 42} and isinstance(a["created"], datetime.datetime), a
        assert one(c, "select count(*) from pg_prepared_statements") >= 1


def test_database_name_chooses_world():
    with connect("agent_7") as w, connect() as m:
        assert one(w, "show worlds.world") == "agent_7"
        cur = w.execute("update orders set status = 'paid' where id = %s", (7,))
        assert cur.rowcount == 1
        assert one(w, "select status from orders where id = %s", (7,)) == "paid"
        assert one(m, "select status from orders where id = %s", (7,)) == "new", "main saw the world's write"
        assert one(m, "show worlds.world") == "main"
    with connect("main") as m:
        assert one(m, "show worlds.world") == "main"


def test_options_still_choose_world():
    # options=-c worlds.world=... on the database's own name (through the proxy too)
    with psycopg.connect(host=HOST, port=PORT, user=USER, dbname=DB, autocommit=True,
                         options="-c worlds.world=agent_7") as c:
        assert one(c, "show worlds.world") == "agent_7"
        assert one(c, "select status from orders where id = 7") == "paid"


def test_diff():
    with connect("agent_7") as w:
        for kw in ({}, {"prepare": True}, {"binary": True}):
            res = spec(w, "diff;", **kw)
            check_columns(res, DIFF, f"diff {kw}")
            assert len(res.rows) == 1, res.rows
            r = res.rows[0]
            assert (r["table"], r["id"], r["change"]) == ("orders", "7", "update"), r
            assert r["before"]["status"] == "new" and r["after"]["status"] == "paid", r
            assert r["columns"] == ["status"], r["columns"]
            if PROXY:
                assert res.tag == "SELECT 1", res.tag
    with connect() as m:
        res = spec(m, "diff world agent_7")
        assert [(r["table"], r["id"]) for r in res.rows] == [("orders", "7")], res.rows


def test_switch_world_moves_the_session():
    with connect() as c:
        assert spec(c, "create world b_switch").tag == "CREATE WORLD"
        assert spec(c, "switch world b_switch").tag == "SWITCH WORLD"
        assert one(c, "show worlds.world") == "b_switch"
        c.execute("insert into orders (id, status, amount) values (%s, %s, %s)", (100, "new", decimal.Decimal("1.50")))
        res = spec(c, "diff")  # now means b_switch
        assert [(r["table"], r["id"], r["change"]) for r in res.rows] == [("orders", "100", "insert")], res.rows
        assert spec(c, "switch world main").tag == "SWITCH WORLD"
        assert one(c, "select count(*) from orders where id = 100") == 0
        assert spec(c, "drop world b_switch").tag == "DROP WORLD"


def test_errors_keep_sqlstate_and_session():
    with connect() as c:
        expect_error("42710", spec, c, "create world agent_7")
        expect_error("3D000", spec, c, "merge world no_such_world")
        expect_error("0A000", spec, c, "drop world main")
        e = expect_error("42601", spec, c, "create world task-1")
        assert "dash" in e.diag.message_primary, e.diag.message_primary
        expect_error("22012", c.execute, "select 1 / 0")  # ordinary SQL's error, passed through
        # not inside a transaction: 25001, and the transaction is then aborted (25P02) until rollback
        with connect(autocommit=False) as t:
            t.execute("select 1")
            expect_error("25001", spec, t, "create world in_tx")
            expect_error("25P02", t.execute, "select 1")
            t.rollback()
            assert one(t, "select 2") == 2
        assert one(c, "select 1") == 1, "session unusable after errors"


def test_unknown_world_fails_the_connection():
    if PROXY:
        try:
            connect("no_such_world").close()
        except psycopg.OperationalError as e:
            # libpq gives psycopg no SQLSTATE for a failed connection: the message (node's test checks 3D000)
            assert "no_such_world" in str(e) and "does not exist" in str(e), str(e)
            return
        raise AssertionError("connecting to database no_such_world succeeded")
    with connect("no_such_world") as c:
        expect_error("3D000", c.execute, "select count(*) from orders")


def test_extended_protocol_prepared_and_binary():
    with connect("agent_7") as w:
        q = "select id, status, amount, placed, doc from orders where id = %s"
        for _ in range(3):
            row = w.execute(q, (7,), prepare=True).fetchone()
        assert row[:2] == (7, "paid"), row
        assert row[2] == decimal.Decimal("7.00") and isinstance(row[3], datetime.datetime) and row[4] == {"n": 7}, row
        stmts = w.execute("select statement from pg_prepared_statements").fetchall()
        assert any("where id = $1" in s for (s,) in stmts), stmts
        cur = w.cursor(binary=True)
        cur.execute(q, (7,))
        assert cur.pgresult.fformat(0) == 1, "results not in binary"
        assert cur.fetchone() == row
        # many statements pipelined (Parse/Bind/Execute sent without waiting)
        with w.pipeline():
            w.cursor().executemany("insert into orders (id, status, amount) values (%s, %s, %s)",
                                   [(200 + i, "piped", decimal.Decimal(i)) for i in range(50)])
        assert one(w, "select count(*) from orders where status = %s", ("piped",)) == 50
    with connect() as m:
        assert one(m, "select count(*) from orders where status = 'piped'") == 0


def test_copy_in_and_out():
    with connect("agent_7") as w:
        cur = w.cursor()
        with cur.copy("copy orders (id, status, amount) from stdin") as cp:
            for i in range(1000, 1100):
                cp.write_row((i, "copied", decimal.Decimal(i) / 100))
        assert one(w, "select count(*) from orders where status = 'copied'") == 100
        with cur.copy("copy orders (id, status, amount) from stdin (format binary)") as cp:
            cp.set_types(["int4", "text", "numeric"])
            for i in range(2000, 2050):
                cp.write_row((i, "copied binary", decimal.Decimal(i)))
        assert one(w, "select count(*) from orders where status = 'copied binary'") == 50
        with cur.copy("copy (select id, status from orders where id >= 1000 order by id) to stdout") as cp:
            out = list(cp.rows())
        assert len(out) == 150 and out[0] == ("1000", "copied") and out[-1] == ("2049", "copied binary"), out[:2]
        with cur.copy("copy (select id, amount from orders where id between 1000 and 1099 order by id) to stdout (format binary)") as cp:
            cp.set_types(["int4", "numeric"])
            out = list(cp.rows())
        assert out[0] == (1000, decimal.Decimal("10.00")) and len(out) == 100, out[:2]
    with connect() as m:
        assert one(m, "select count(*) from orders where id >= 1000") == 0, "main saw the world's COPY"


def test_listen_notify():
    with connect("agent_7") as listener, connect() as sender:
        listener.execute("listen drivers_channel")
        sender.execute("select pg_notify('drivers_channel', 'from main')")
        sender.execute("notify drivers_channel, 'second'")
        got = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=2)]
        assert got == [("drivers_channel", "from main"), ("drivers_channel", "second")], got


def _cancel_after(conn, how, delay=1.0):
    def run():
        time.sleep(delay)
        conn.cancel_safe() if how == "cancel_safe" else conn.cancel()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_cancel():
    # a cancel request on a new connection (through the proxy: mapped to the right backend) stops pg_sleep;
    # both libpq's PQcancel (cancel()) and the newer PQcancelConn (cancel_safe())
    with connect("agent_7") as w, connect() as watcher:
        pid = one(w, "select pg_backend_pid()")
        for how in ("cancel", "cancel_safe"):
            t0 = time.monotonic()
            t = _cancel_after(w, how)
            expect_error("57014", w.execute, "select pg_sleep(60)")
            t.join()
            took = time.monotonic() - t0
            assert took < 15, f"{how}: pg_sleep(60) ran {took:.1f}s"
            state = one(watcher, "select state from pg_stat_activity where pid = %s", (pid,))
            assert state == "idle", f"{how}: backend {pid} is {state!r}, not idle"
            assert one(w, "select status from orders where id = 7") == "paid"
        # statement_timeout, the server's own cancel
        w.execute("set statement_timeout = '300ms'")
        t0 = time.monotonic()
        expect_error("57014", w.execute, "select pg_sleep(60)")
        assert time.monotonic() - t0 < 15
        w.execute("reset statement_timeout")
        assert one(w, "select 1") == 1


def test_past_moment_is_read_only():
    if not PAST:
        raise AssertionError("DRIVERS_PAST not set")
    with connect(f"main@{PAST}") as p:
        assert one(p, "show worlds.world") == f"main@{PAST}"
        assert one(p, "select status from orders where id = 3") == "new"
        expect_error("25006", p.execute, "update orders set status = 'x' where id = 3")
    with connect() as m:
        assert one(m, "select status from orders where id = 3") == "changed after"


def test_merge_world():
    with connect() as m:
        res = spec(m, "merge world agent_7 dry run")
        check_columns(res, DRY_RUN, "merge dry run")
        # a summary row per table first, then a row per row merged
        assert (res.rows[0]["outcome"], res.rows[0]["detail"]) == ("summary", "0 deleted, 1 updated, 200 inserted"), res.rows[0]
        assert sorted(r["outcome"] for r in res.rows[1:]) == ["apply"] * 201, {r["outcome"] for r in res.rows}
        r7 = [r for r in res.rows if r["id"] == "7"][0]
        assert (r7["base"]["status"], r7["ours"]["status"], r7["result"]["status"]) == ("new", "paid", "paid"), r7
        res = spec(m, "merge world agent_7;")
        assert res.tag == "MERGE 201", res.tag
        assert one(m, "select status from orders where id = 7") == "paid"
        assert one(m, "select count(*) from orders where id >= 1000") == 150
        names = [r["name"] for r in spec(m, "show worlds").rows]
        assert "agent_7" not in names, names


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    print(f"psycopg {psycopg.__version__} (libpq {psycopg.pq.version()}, {psycopg.pq.__impl__}) via {VIA} {HOST}:{PORT}")
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print(f"ok   {name} ({time.monotonic() - t0:.2f}s)")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)
    print(f"psycopg: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
