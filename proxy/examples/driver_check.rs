//! Checks through a running worlds-proxy with tokio-postgres, a driver that speaks only the extended
//! protocol (Parse/Bind/Describe/Execute, binary results) and pipelines concurrent queries:
//!   cargo run -p worlds-proxy --example driver_check -- 'host=127.0.0.1 port=6432 user=postgres dbname=app'
//! The database needs pg_worlds and a table orders (id int primary key, status text) with rows 1 and 2.
//! Prints each check; exits 1 if any failed.
use tokio_postgres::{Client, NoTls};

struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool, detail: impl std::fmt::Debug) {
        if ok {
            println!("  ok   {what}");
        } else {
            println!("  FAIL {what}: {detail:?}");
            self.failed += 1;
        }
    }
}

fn columns(stmt: &tokio_postgres::Statement) -> Vec<String> {
    stmt.columns().iter().map(|c| format!("{} {}", c.name(), c.type_().name())).collect()
}

async fn connect(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await.expect("connect through the proxy");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let conninfo = std::env::args().nth(1).expect("a connection string");
    let mut c = Checks { failed: 0 };
    let client = connect(&conninfo).await;
    let _ = client.execute("drop world if exists ext_a", &[]).await;

    // a spec statement's Describe gives the spec's columns and types; the rows come in binary
    let show = client.prepare("show worlds").await.expect("prepare show worlds");
    let cols = columns(&show);
    c.check("SHOW WORLDS described with types", cols[..6] == ["name text", "id text", "parent text", "depth int4", "created timestamptz", "version int8"], &cols);
    let rows = client.query(&show, &[]).await.expect("show worlds");
    let main = rows.iter().find(|r| r.get::<_, String>("name") == "main");
    c.check("SHOW WORLDS rows in binary: main at depth 0", main.is_some_and(|r| r.get::<_, i32>("depth") == 0 && !r.get::<_, bool>("pinned")), rows.len());
    // a prepared spec statement runs again
    let again = client.query(&show, &[]).await.map(|r| r.len());
    c.check("the prepared SHOW WORLDS runs again", again.as_ref().is_ok_and(|n| *n == rows.len()), &again);

    // a statement with a tag: no columns, the tag's count as rows affected
    let create = client.prepare("create world ext_a").await.expect("prepare create world");
    c.check("CREATE WORLD described with no columns", create.columns().is_empty(), columns(&create));
    let n = client.execute(&create, &[]).await;
    c.check("CREATE WORLD runs", n.is_ok(), &n);
    let n = client.execute("switch world ext_a", &[]).await;
    c.check("SWITCH WORLD runs", n.is_ok(), &n);
    let n = client.execute("update orders set status = 'ext' where id = 1", &[]).await;
    c.check("an UPDATE in the world", n.as_ref().is_ok_and(|n| *n == 1), &n);
    let diff = client.query("diff", &[]).await;
    let ok = diff.as_ref().is_ok_and(|rows| {
        rows.len() == 1 && rows[0].get::<_, String>("table") == "orders" && rows[0].get::<_, Option<String>>("id").as_deref() == Some("1")
    });
    c.check("DIFF means the world switched to, typed", ok, diff.as_ref().map(|r| r.len()));
    let n = client.execute("merge world ext_a", &[]).await;
    c.check("MERGE WORLD's tag MERGE 1 gives 1 row", n.as_ref().is_ok_and(|n| *n == 1), &n);

    // errors come back with their SQLSTATE
    let e = client.execute("merge world no_such_world", &[]).await.err().and_then(|e| e.code().map(|s| s.code().to_string()));
    c.check("MERGE of a missing world fails with 3D000", e.as_deref() == Some("3D000"), &e);
    let e = client.execute("create world task-1", &[]).await.err().and_then(|e| e.code().map(|s| s.code().to_string()));
    c.check("a grammar error is 42601", e.as_deref() == Some("42601"), &e);

    // AS OF reads the table's own columns, typed
    let asof = client.prepare("select * from orders as of 'now' order by id").await;
    let cols = asof.as_ref().map(columns);
    c.check("AS OF described with the table's columns", cols.as_ref().is_ok_and(|c| c == &["id int4", "status text"]), &cols);
    if let Ok(asof) = asof {
        let rows = client.query(&asof, &[]).await;
        let ok = rows.as_ref().is_ok_and(|r| r.len() == 2 && r[0].get::<_, i32>(0) == 1 && r[0].get::<_, String>(1) == "ext");
        c.check("AS OF rows", ok, rows.map(|r| r.len()));
    }

    // pipelined: a failing statement between spec statements; each answer goes to its own query
    let (a, b, d, e) = tokio::join!(
        client.query("show branches", &[]),
        client.query("select 1/0", &[]),
        client.execute("create world ext_b", &[]),
        client.query("select count(*)::int from orders", &[]),
    );
    c.check("pipelined SHOW BRANCHES", a.as_ref().is_ok_and(|r| !r.is_empty() && r[0].columns().len() == 3), a.as_ref().map(|r| r.len()));
    c.check("pipelined error", b.as_ref().err().and_then(|e| e.code()).map(|s| s.code()) == Some("22012"), b.as_ref().map(|r| r.len()));
    c.check("pipelined CREATE WORLD", d.is_ok(), &d);
    c.check("pipelined SELECT", e.as_ref().is_ok_and(|r| r[0].get::<_, i32>(0) == 2), e.as_ref().map(|r| r.len()));
    let _ = client.execute("drop world ext_b", &[]).await;

    // a cancel reaches the right backend
    let token = client.cancel_token();
    let sleeper = tokio::spawn(async move {
        let r = client.query("select pg_sleep(20)", &[]).await;
        r.err().and_then(|e| e.code().map(|s| s.code().to_string()))
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let sent = token.cancel_query(NoTls).await;
    c.check("cancel request sent", sent.is_ok(), &sent);
    let code = tokio::time::timeout(std::time::Duration::from_secs(10), sleeper).await;
    let code = code.ok().and_then(|j| j.ok()).flatten();
    c.check("the query was cancelled (57014)", code.as_deref() == Some("57014"), &code);

    if c.failed > 0 {
        println!("driver_check: {} check(s) failed", c.failed);
        std::process::exit(1);
    }
    println!("driver_check: ok");
}
