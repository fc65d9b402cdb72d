"""Drives worlds-mcp with the official MCP Python SDK (the `mcp` package from PyPI), over stdio and over
streamable HTTP, logged in as agents with their tokens: the whole agent loop, a policy that queues a merge,
rights enforced by Postgres, safe mode, and a hostile suite. Called by tests/sessions/33_mcp.sh, which
makes the database, the agents and the policy and passes them in the environment:
  MCP_BIN, PGPORT, DB, BOT, BOT_TOKEN, PEER, PEER_TOKEN, HTTP_PORT (and ADMIN_DSN for checks as a superuser)
Prints one line per check; exits non-zero when any failed."""
import asyncio
import json
import os
import subprocess
import sys
import time

import httpx2 as httpx
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

E = os.environ
BIN, PORT, DB = E["MCP_BIN"], E["PGPORT"], E["DB"]
BOT, BOT_TOKEN, PEER, PEER_TOKEN = E["BOT"], E["BOT_TOKEN"], E["PEER"], E["PEER_TOKEN"]
HTTP_PORT = int(E["HTTP_PORT"])
failures = 0
attempts = 0
escapes = 0


def ok(what, cond, got=None):
    global failures
    if cond:
        print(f"  ok   {what}")
    else:
        failures += 1
        print(f"FAIL: {what}: got {json.dumps(got, default=str)[:600]}")


def admin(sql):
    """A superuser's answer, through psql (the test's own view of the database)."""
    out = subprocess.run(["psql", E["ADMIN_DSN"], "-XqAt", "-c", sql], capture_output=True, text=True)
    return out.stdout.strip()


def stdio_params(user, token, *args, port=None):
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(port or PORT), PGDATABASE=DB, PGUSER=user, PGPASSWORD=token)
    return StdioServerParameters(command=BIN, args=list(args), env=env)


class Tools:
    """One MCP session: call a tool, get (is_error, structured content)."""

    def __init__(self, session):
        self.s = session

    async def __call__(self, tool, **args):
        r = await self.s.call_tool(tool, args)
        return bool(r.is_error), r.structured_content, r

    async def names(self):
        return sorted(t.name for t in (await self.s.list_tools()).tools)

    async def listing(self):
        return {t.name: t for t in (await self.s.list_tools()).tools}


async def over_stdio(user, token, body, *args, port=None):
    async with stdio_client(stdio_params(user, token, *args, port=port)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            return await body(Tools(s))


async def over_http(bearer, body, port=HTTP_PORT, safe=None):
    headers = {"Authorization": f"Bearer {bearer}"}
    if safe is not None:
        headers["X-Worlds-Safe"] = safe
    async with create_mcp_http_client(headers=headers) as hc:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=hc) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                return await body(Tools(s))


def state(e):
    return (e or {}).get("sqlstate")


ALL_TOOLS = sorted([
    "list_worlds", "fork_world", "drop_world", "query", "describe", "diff", "merge", "rebase", "check_reads",
    "merge_checks", "check_merge_policy", "reviews", "history", "statement", "prepare_migration", "complete_migration",
])
SAFE_TOOLS = sorted([
    "list_worlds", "query", "describe", "diff", "merge", "check_reads", "merge_checks", "check_merge_policy",
    "reviews", "history", "statement",
])


def agent_loop(prefix):
    """The whole loop of an agent that keeps to policy m33_small (max_rows = 3, schema = false)."""

    async def body(t):
        names = await t.names()
        ok(f"{prefix}: every tool listed", names == ALL_TOOLS, names)
        tools = await t.listing()
        ann = tools["list_worlds"].annotations
        ok(f"{prefix}: list_worlds is readOnlyHint", ann.read_only_hint is True and ann.destructive_hint is False, str(ann))
        ok(f"{prefix}: drop_world is destructiveHint", tools["drop_world"].annotations.destructive_hint is True)
        ok(f"{prefix}: fork_world is neither read-only nor destructive",
           tools["fork_world"].annotations.read_only_hint is False and tools["fork_world"].annotations.destructive_hint is False)
        ok(f"{prefix}: descriptions say what a world is", "world" in tools["fork_world"].description and "merge" in tools["fork_world"].description)
        w = f"{prefix}_a"
        err, v, _ = await t("fork_world", name=w, may_change="acct", intent="move 10 from 1 to 2", run="test/1")
        ok(f"{prefix}: fork_world", not err and v["forked"]["owner"] == BOT, v)
        ok(f"{prefix}: the scope is kept", not err and "acct" in json.dumps(v["forked"]["scope"]["may_change"]), v)
        err, v, _ = await t("list_worlds")
        ok(f"{prefix}: list_worlds shows it", not err and w in [x["name"] for x in v["worlds"]], v)
        err, v, _ = await t("query", world=w, sql="update acct set bal = bal - $1 where id = $2", params=[10, 1])
        ok(f"{prefix}: a write in the world", not err and v["rows_affected"] == 1, v)
        err, v, _ = await t("query", world=w, sql="update acct set bal = bal + $1 where id = $2", params=["10", 2])
        ok(f"{prefix}: a value given as text reads as the column's type", not err and v["rows_affected"] == 1, v)
        err, v, _ = await t("query", world=w, sql="select id, bal::int from acct where id <= 2 order by id")
        ok(f"{prefix}: the world sees its writes", not err and v["rows"] == [[1, 990], [2, 1010]], v)
        ok(f"{prefix}: main doesn't", admin("select string_agg(bal::int::text, ',' order by id) from acct where id <= 2") == "1000,1000")
        err, v, _ = await t("query", world=w, sql="select sum(bal)::numeric(12,2) as total, now()::date as d, array[1,2] as a from acct")
        ok(f"{prefix}: numeric, date and arrays come as Postgres writes them",
           not err and v["rows"][0][0] == "10000.00" and len(v["rows"][0][1]) == 10 and v["rows"][0][2] == "{1,2}", v)
        err, v, _ = await t("describe", world=w)
        acct = [r for r in (v or {}).get("relations", []) if r["name"] == "acct"]
        ok(f"{prefix}: describe shows acct with its key", not err and acct and acct[0]["primary_key"] == ["id"], v)
        err, v, _ = await t("diff", world=w)
        ok(f"{prefix}: diff shows two updates", not err and sorted(c["change"] for c in v["changes"]) == ["update", "update"], v)
        err, v, _ = await t("diff", world=w, readers=True)
        ok(f"{prefix}: diff readers: the merge check reading acct.bal, coverage last",
           not err and any(r["kind"] == "merge check" and r["reader"] == "m33_no_negative" and r["columns"] == "bal" for r in v["readers"])
           and v["readers"][-1]["kind"] == "coverage", v)
        err, v, _ = await t("merge", world=w, dry_run=True)
        ok(f"{prefix}: dry run plans it", not err and v["dry_run"][0]["outcome"] == "summary", v)
        ok(f"{prefix}: dry run's notice (AT VERSION / TARGET) comes along", any("TARGET" in n for n in (v or {}).get("notices", [])), v)
        err, v, _ = await t("check_merge_policy", world=w, policy="m33_small")
        ok(f"{prefix}: check_merge_policy: no rule broken", not err and v["broken"] == [], v)
        err, v, _ = await t("merge", world=w)
        ok(f"{prefix}: merge (its policy lets 2 rows through)", not err and v["tag"] == "MERGE 2", v)
        ok(f"{prefix}: main has the merge, total kept",
           admin("select string_agg(bal::int::text, ',' order by id) || '/' || sum(bal)::int from acct where id <= 2") == "990,1010/2000")
        admin("update acct set bal = 1000 where id <= 2")
        # a merge its policy holds: more rows than max_rows
        w2 = f"{prefix}_big"
        await t("fork_world", name=w2)
        err, v, _ = await t("query", world=w2, sql="update acct set bal = bal + 1 where id <= 5")
        err, v, _ = await t("check_merge_policy", world=w2, policy="m33_small")
        ok(f"{prefix}: check_merge_policy names the rule", not err and v["broken"] and "max_rows" in json.dumps(v["broken"]), v)
        err, v, _ = await t("merge", world=w2)
        ok(f"{prefix}: a merge past the policy is refused (42501)", err and state(v) == "42501", v)
        for _ in range(50):  # (a background worker commits the queue row: it shows within a moment)
            err, v, _ = await t("reviews")
            if not err and w2 in [r["world"] for r in v["reviews"]]:
                break
            await asyncio.sleep(0.1)
        ok(f"{prefix}: ... and waits in reviews", not err and w2 in [r["world"] for r in v["reviews"]], v)
        ok(f"{prefix}: main untouched", admin("select sum(bal)::int from acct") == "10000")
        # the migration pair: the policy (schema = false) queues it for a person
        w3 = f"{prefix}_mig"
        err, v, _ = await t("prepare_migration", world=w3, sql="alter table notes add column memo text; update notes set memo = 'checked' where id = 1",
                            checks=["select 1 from notes where id = 1 and memo is null"])
        ok(f"{prefix}: prepare_migration runs the DDL in a world",
           not err and any(c["change"] == "alter table" for c in v["diff"]), v)
        ok(f"{prefix}: main's schema untouched", admin("select count(*) from pg_attribute where attrelid = 'notes'::regclass and attname = 'memo'") == "0")
        err, v, _ = await t("prepare_migration", world=f"{prefix}_bad", sql="update acct set bal = -1 where id = 3",
                            checks=["select id from acct where bal < 0"])
        ok(f"{prefix}: a failing check rolls the migration back (23514)", err and state(v) == "23514", v)
        err, v, _ = await t("complete_migration", world=w3)
        ok(f"{prefix}: complete_migration: the policy queues it for a person", not err and v["queued"] is True and v["merged"] is False, v)
        err, v, _ = await t("history", limit=5)
        ok(f"{prefix}: history", not err and len(v["history"]) >= 1, v)
        err, v, _ = await t("merge_checks")
        ok(f"{prefix}: merge_checks lists the check", not err and "m33_no_negative" in json.dumps(v), v)
        err, v, _ = await t("statement", sql="show worlds")
        ok(f"{prefix}: statement runs the spec's SHOW WORLDS", not err and any(r["name"] == w2 for r in v["rows"]), v)
        err, v, _ = await t("statement", sql=f"diff world {w2} as sql")
        ok(f"{prefix}: statement runs DIFF ... AS SQL", not err and "update" in json.dumps(v).lower(), v)
        # rights: no write to main without write_main, no dropping another agent's world
        err, v, _ = await t("query", world="main", sql="update acct set bal = 0")
        ok(f"{prefix}: can't write main without write_main (42501)", err and state(v) == "42501", v)
        err, v, _ = await t("drop_world", world="peer_w")
        ok(f"{prefix}: can't drop another agent's world (42501)", err and state(v) == "42501", v)
        err, v, _ = await t("query", world="main", sql="select * from secrets")
        ok(f"{prefix}: GRANTs hold (no SELECT on secrets: 42501)", err and state(v) == "42501", v)
        err, v, _ = await t("rebase", world=w2)
        ok(f"{prefix}: rebase", not err and v["tag"].startswith("REBASE"), v)
        err, v, _ = await t("drop_world", world=w2)
        ok(f"{prefix}: drop its own world", not err and v["tag"] == "DROP WORLD", v)
        return True

    return body


def safe_checks(prefix):
    async def body(t):
        names = await t.names()
        ok(f"{prefix}: only read tools listed", names == SAFE_TOOLS, names)
        for tool, args in [
            ("fork_world", {"name": f"{prefix}_x"}),
            ("drop_world", {"world": "peer_w"}),
            ("rebase", {"world": "peer_w"}),
            ("prepare_migration", {"world": f"{prefix}_m", "sql": "select 1"}),
            ("complete_migration", {"world": "peer_w"}),
            ("merge", {"world": "peer_w"}),
            ("query", {"world": "main", "sql": "update acct set bal = 0"}),
            ("query", {"world": "peer_w", "sql": "insert into acct values (99, 1)"}),
            ("query", {"world": "main", "sql": "select pg_notify('ch', 'x')"}),
            ("query", {"world": "main", "sql": "notify ch"}),
            ("query", {"world": "main", "sql": "select lo_creat(-1)"}),
            ("query", {"world": "main", "sql": "select gin_clean_pending_list('acct_pkey')"}),
            ("query", {"world": "main", "sql": "select m33_notify()"}),
            ("query", {"world": "main", "sql": "do $$ begin perform pg_notify('a', 'b'); end $$"}),
            ("query", {"world": "main", "sql": "lock table acct"}),
            ("query", {"world": "main", "sql": "analyze acct"}),
            ("query", {"world": "main", "sql": "reset all"}),
            ("query", {"world": "main", "sql": "set local worlds.read_only = off"}),
            ("query", {"world": "main", "sql": "select set_config('worlds.read_only', 'off', true)"}),
            ("query", {"world": "main", "sql": "set transaction read write"}),
            ("query", {"world": "main", "sql": "commit; update acct set bal = 0"}),
            ("query", {"world": "main", "sql": "select nextval('m33_seq')"}),
            ("query", {"world": "main", "sql": "create table m33_evil (i int)"}),
            ("query", {"world": "main", "sql": "with d as (delete from acct returning *) select count(*) from d"}),
            ("query", {"world": "main", "sql": "copy acct to '/tmp/m33_out'"}),
            ("statement", {"sql": "merge world peer_w"}),
            ("statement", {"sql": "create world m33_sneak"}),
            ("statement", {"sql": "drop world peer_w"}),
            ("statement", {"sql": "checkpoint world peer_w as 'x'"}),
            ("statement", {"sql": "switch world peer_w"}),
            ("statement", {"sql": "insert into acct select * from acct as of '-1 second'"}),
        ]:
            global attempts, escapes
            attempts += 1
            err, v, _ = await t(tool, **args)
            if not err:
                escapes += 1
            ok(f"{prefix}: safe mode refuses {tool} {json.dumps(args)[:70]}", err, v)
        ok(f"{prefix}: nothing reached main", admin("select sum(bal)::int || '/' || count(*) from acct") == "10000/10")
        ok(f"{prefix}: no table made", admin("select count(*) from pg_class where relname = 'm33_evil'") == "0")
        ok(f"{prefix}: peer_w still there", admin("select count(*) from worlds.show_worlds() where name = 'peer_w'") == "1")
        err, v, _ = await t("query", world="main", sql="select count(*) from acct")
        ok(f"{prefix}: reads run", not err and v["rows"] == [[10]], v)
        err, v, _ = await t("merge", world="peer_w", dry_run=True)
        ok(f"{prefix}: merge dry_run runs", not err, v)
        for s in ["show worlds", "show reviews", "diff world peer_w", "merge world peer_w dry run", "select count(*) from acct as of '-1 second'"]:
            err, v, _ = await t("statement", sql=s)
            ok(f"{prefix}: statement {s!r} runs", not err, v)
        err, v, _ = await t("diff", world="peer_w")
        ok(f"{prefix}: diff runs", not err, v)
        err, v, _ = await t("describe", world="peer_w")
        ok(f"{prefix}: describe runs", not err, v)
        return True

    return body


def hostile(prefix):
    """Against a server with writes on: escapes from the world or the call, oversized results, bad input."""

    async def body(t):
        global attempts, escapes
        w = f"{prefix}_h"
        await t("fork_world", name=w)
        # several statements: the second never runs
        attempts += 1
        err, v, _ = await t("query", world=w, sql="select 1; update acct set bal = 0")
        escapes += 0 if err else 1
        ok(f"{prefix}: two statements in one query are refused", err, v)
        # a setting a call makes doesn't outlive it (the next call on the pooled connection)
        await t("query", world=w, sql="select set_config('worlds.world', 'main', false)")
        await t("query", world=w, sql="set statement_timeout = 0")
        err, v, _ = await t("query", world=w, sql="select current_setting('worlds.world')")
        ok(f"{prefix}: the world is the call's, not a previous call's", not err and v["rows"] == [[w]], v)
        err, v, _ = await t("query", world=w, sql="select pg_advisory_lock(4242)")
        held = admin("select count(*) from pg_locks where locktype = 'advisory' and objid = 4242")
        ok(f"{prefix}: a session advisory lock doesn't outlive the call", held == "0", held)
        # the world's writes stay in the world even when the SQL names main's table by schema
        err, v, _ = await t("query", world=w, sql="update public.acct set bal = bal + 1 where id = 10")
        ok(f"{prefix}: schema-qualified writes stay in the world", admin("select bal::int from acct where id = 10") == "1000", v)
        # another agent's world, with this agent's token
        attempts += 1
        err, v, _ = await t("query", world="peer_w", sql="update acct set bal = 0 where id = 1")
        escapes += 0 if err else 1
        ok(f"{prefix}: can't write another agent's world (42501)", err and state(v) == "42501", v)
        attempts += 1
        err, v, _ = await t("merge", world="peer_w")
        escapes += 0 if err else 1
        ok(f"{prefix}: can't merge another agent's world (42501)", err and state(v) == "42501", v)
        # oversized results: capped with truncated
        err, v, _ = await t("query", world=w, sql="select g from generate_series(1, 100000) g")
        ok(f"{prefix}: rows capped at 200 with truncated", not err and len(v["rows"]) == 200 and v["truncated"] is True, (err, v and len(v.get("rows", []))))
        err, v, _ = await t("query", world=w, sql="select repeat('x', 100000) from generate_series(1, 50)")
        size = len(json.dumps((v or {}).get("rows", [])))
        ok(f"{prefix}: bytes capped with truncated", not err and v["truncated"] is True and size <= (1 << 20) + 1000, (err, size))
        err, v, _ = await t("query", world=w, sql="select 1 where false")
        ok(f"{prefix}: no rows still names the columns", not err and v["rows"] == [] and v["columns"][0]["name"] == "?column?", v)
        # bad input
        err, v, _ = await t("query", world=w, sql="select $1::int", params=["not a number"])
        ok(f"{prefix}: a bad parameter is Postgres's 22P02", err and state(v) == "22P02", v)
        err, v, _ = await t("query", world=w, sql="select $1::int, $2::int", params=[1])
        ok(f"{prefix}: a missing parameter is an error", err, v)
        err, v, _ = await t("query", world=w, sql="selec 1")
        ok(f"{prefix}: a syntax error is 42601 with its position", err and state(v) == "42601" and v["position"] == 1, v)
        err, v, _ = await t("query", world="no_such_world", sql="select count(*) from acct")
        ok(f"{prefix}: a world that doesn't exist is 3D000", err and state(v) == "3D000", v)
        err, v, _ = await t("query", world=w, sql="select '" + "x" * 500000 + "'")
        ok(f"{prefix}: a 500 kB statement is fine", not err, (err, v and v.get("sqlstate")))
        err, v, _ = await t("query", world=w, sql="select $1::jsonb ->> 'a'", params=[{"a": "b"}])
        ok(f"{prefix}: a JSON parameter", not err and v["rows"] == [["b"]], v)
        err, v, _ = await t("query", world=w, sql="select pg_sleep(3)")
        ok(f"{prefix}: the call's statement timeout (57014)", err and state(v) == "57014", v)
        err, v, _ = await t("diff", world="it's \"odd\"")
        ok(f"{prefix}: an odd world name is a name, not SQL (3D000)", err and state(v) == "3D000", v)
        err, v, _ = await t("fork_world", name="x'); drop table acct; --")
        ok(f"{prefix}: a hostile name is refused or kept as a name", admin("select count(*) from acct") == "10", v)
        err, v, _ = await t("query", world=w, sql="select count(*) from acct")
        ok(f"{prefix}: the server still answers", not err and v["rows"] == [[10]], v)
        await t("drop_world", world=w)
        return True

    return body


async def raw_http(port, headers, body):
    async with httpx.AsyncClient() as c:
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
        h.update(headers)
        return await c.post(f"http://127.0.0.1:{port}/mcp", headers=h, content=body)


async def http_hostile(port):
    global attempts, escapes
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "query", "arguments": {"world": "main", "sql": "select current_user"}}})
    for what, headers in [
        ("no token", {}),
        ("a wrong token", {"Authorization": f"Bearer {BOT}:wrong-{BOT_TOKEN}"}),
        ("another agent's token under this agent's name", {"Authorization": f"Bearer {BOT}:{PEER_TOKEN}"}),
        ("a token without its agent's name", {"Authorization": f"Bearer {BOT_TOKEN}"}),
        ("Basic instead of Bearer", {"Authorization": "Basic Ym90OnB3"}),
        ("a role that doesn't exist", {"Authorization": f"Bearer nobody:{BOT_TOKEN}"}),
    ]:
        attempts += 1
        r = await raw_http(port, headers, call)
        escapes += 0 if r.status_code == 401 else 1
        ok(f"http: {what}: 401", r.status_code == 401 and "www-authenticate" in r.headers, (r.status_code, r.text[:200]))
    auth = {"Authorization": f"Bearer {BOT}:{BOT_TOKEN}"}
    r = await raw_http(port, auth, call)
    ok("http: the right token: the call runs as the agent", r.status_code == 200 and BOT in r.text, (r.status_code, r.text[:300]))
    for what, body in [
        ("a world that isn't a string", {"name": "query", "arguments": {"world": 5, "sql": "select 1"}}),
        ("no sql", {"name": "query", "arguments": {"world": "main"}}),
        ("params not a list", {"name": "query", "arguments": {"world": "main", "sql": "select 1", "params": "x"}}),
        ("an unknown tool", {"name": "drop_database", "arguments": {}}),
    ]:
        r = await raw_http(port, auth, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": body}))
        j = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        refused = "error" in j or j.get("result", {}).get("isError") is True
        ok(f"http: malformed arguments ({what}) are an error", r.status_code in (200, 400) and refused, (r.status_code, r.text[:200]))
    r = await raw_http(port, auth, b"{not json")
    ok("http: a body that isn't JSON is refused", r.status_code in (400, 415, 422), (r.status_code, r.text[:200]))
    r = await raw_http(port, auth, b"x" * (2 << 20))
    ok("http: a 2 MB body is refused", r.status_code in (400, 413), r.status_code)
    r = await raw_http(port, auth, call)
    ok("http: the server still answers", r.status_code == 200, r.status_code)


def start_http(*args):
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=PORT, PGDATABASE=DB)
    env.pop("PGUSER", None)
    env.pop("PGPASSWORD", None)
    p = subprocess.Popen([BIN, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = int(args[args.index("--http") + 1].rsplit(":", 1)[1])
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=0.5)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return p


async def main():
    print("check: the agent loop over stdio (logged in from PGUSER/PGPASSWORD)")
    await over_stdio(BOT, BOT_TOKEN, agent_loop("stdio"), "--statement-timeout", "1000")
    admin(f"select worlds.drop_world(name) from worlds.show_worlds() where name like 'stdio%'")
    admin("update acct set bal = 1000")

    p = start_http("--http", f"127.0.0.1:{HTTP_PORT}", "--statement-timeout", "1000")
    p_safe = start_http("--http", f"127.0.0.1:{HTTP_PORT + 1}", "--safe")
    try:
        print("check: the agent loop over HTTP (the bearer names the agent)")
        await over_http(f"{BOT}:{BOT_TOKEN}", agent_loop("http"))
        admin("update acct set bal = 1000")
        print("check: safe mode over stdio (--safe)")
        await over_stdio(BOT, BOT_TOKEN, safe_checks("stdio-safe"), "--safe")
        print("check: safe mode over HTTP, asked per request (X-Worlds-Safe: on)")
        await over_http(f"{BOT}:{BOT_TOKEN}", safe_checks("http-safe"), safe="on")
        print("check: a --safe server stays safe whatever a request asks (X-Worlds-Safe: off)")
        await over_http(f"{BOT}:{BOT_TOKEN}", safe_checks("http-forced-safe"), port=HTTP_PORT + 1, safe="off")
        print("check: safe mode holds for a superuser too (the database refuses, not only the server)")
        await over_stdio("postgres", "", safe_checks("superuser-safe"), "--safe")
        print("check: hostile calls over stdio and over HTTP")
        await over_stdio(BOT, BOT_TOKEN, hostile("stdio-h"), "--statement-timeout", "1000")
        await over_http(f"{BOT}:{BOT_TOKEN}", hostile("http-h"))
        print("check: tokens and malformed requests over HTTP")
        await http_hostile(HTTP_PORT)
        print("check: the peer agent's token reaches only what the peer may")

        async def peer(t):
            err, v, _ = await t("query", world="main", sql="select current_user")
            ok("peer: logged in as itself", not err and v["rows"] == [[PEER]], v)
            err, v, _ = await t("drop_world", world="bot_keep")
            ok("peer: can't drop the bot's world (42501)", err and state(v) == "42501", v)
            err, v, _ = await t("merge", world="bot_keep")
            ok("peer: can't merge the bot's world (42501)", err and state(v) == "42501", v)
            return True

        await over_http(f"{PEER}:{PEER_TOKEN}", peer)
    finally:
        p.terminate()
        p_safe.terminate()
    print("check: Postgres away: a clear error, and the server carries on")

    async def away(t):
        err, v, _ = await t("list_worlds")
        ok("away: list_worlds is an 08xxx error naming where Postgres was", err and state(v).startswith("08") and "cannot reach Postgres" in v["message"], v)
        err, v, _ = await t("query", world="main", sql="select 1")
        ok("away: the server still answers", err and state(v).startswith("08"), v)
        return True

    await over_stdio(BOT, BOT_TOKEN, away, port=1)
    print(f"hostile: {attempts} attempts, {escapes} escapes")
    ok("no escapes", escapes == 0, escapes)


asyncio.run(main())
print(f"mcp: {failures} failure(s)")
sys.exit(1 if failures else 0)
