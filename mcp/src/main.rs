//! worlds-mcp: an MCP server for pg_worlds. Agents reach worlds through MCP as themselves: the server logs
//! in to Postgres as the agent (stdio: as libpq's environment or --dsn says; HTTP: as each request's
//! bearer), so Postgres refuses whatever the agent's rights and GRANTs don't allow, whatever the server is
//! told. See docs/mcp.md.
mod db;
mod handler;
mod http;
mod tools;
mod untrusted;

use rmcp::ServiceExt;

const USAGE: &str = "worlds-mcp: an MCP server for pg_worlds

usage: worlds-mcp [--dsn DSN] [--http ADDR] [--safe] [--statement-timeout MS] [--max-rows N]
                  [--max-bytes N] [--pool-size N] [--allowed-host HOST]...

  (default)              MCP over stdio, logged in as libpq's environment says (PGHOST, PGPORT,
                         PGDATABASE, PGUSER, PGPASSWORD, PGOPTIONS) or as --dsn says
  --dsn DSN              a libpq connection string or postgres:// URL (wins over the environment)
  --http ADDR            MCP over streamable HTTP at http://ADDR/mcp; each request logs in as its bearer,
                         Authorization: Bearer <agent>:<token> (user and password from the DSN are not used)
  --safe                 safe mode: only reads, DIFF, merge dry runs and the spec's SHOWs
  --statement-timeout MS each call's statement_timeout (default 30000; never above the role's own)
  --max-rows N           rows a query returns at most (default 200), then truncated: true
  --max-bytes N          bytes of rows a query returns at most (default 1048576)
  --pool-size N          connections to Postgres at most, over all logins (default 10)
  --allowed-host HOST    a Host header the HTTP server accepts besides loopback (repeatable)
";

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dsn = None;
    let mut http = None;
    let mut safe = false;
    let mut limits = db::Limits { statement_timeout_ms: 30_000, max_rows: 200, max_bytes: 1 << 20 };
    let mut pool_size = 10usize;
    let mut hosts = Vec::new();
    let fail = |m: String| -> ! {
        eprintln!("worlds-mcp: {m}\n\n{USAGE}");
        std::process::exit(2)
    };
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().unwrap_or_else(|| fail(format!("{name} needs a value")));
        let number = |name: &str, v: String| -> u64 { v.parse().unwrap_or_else(|_| fail(format!("{name}: not a number: {v}"))) };
        match a.as_str() {
            "--dsn" => dsn = Some(value("--dsn")),
            "--http" => http = Some(value("--http")),
            "--safe" => safe = true,
            "--statement-timeout" => limits.statement_timeout_ms = number(&a, value(&a)).max(1),
            "--max-rows" => limits.max_rows = number(&a, value(&a)).max(1) as usize,
            "--max-bytes" => limits.max_bytes = number(&a, value(&a)).max(256) as usize,
            "--pool-size" => pool_size = number(&a, value(&a)).max(1) as usize,
            "--allowed-host" => hosts.push(value(&a)),
            "-h" | "--help" => {
                print!("{USAGE}");
                return;
            }
            "-V" | "--version" => {
                println!("worlds-mcp {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            other => fail(format!("unknown argument {other}")),
        }
    }
    let target = db::Target::from_env(dsn.as_deref()).unwrap_or_else(|m| fail(m));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let code = runtime.block_on(async move {
        let pool = db::Pool::new(target, pool_size);
        let worlds = tools::Worlds::new(pool, limits, safe, http.is_some());
        match http {
            Some(addr) => match http::serve(&addr, worlds, hosts).await {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worlds-mcp: --http {addr}: {e}");
                    1
                }
            },
            None => match worlds.serve(rmcp::transport::stdio()).await {
                Ok(service) => {
                    let _ = service.waiting().await;
                    0
                }
                Err(e) => {
                    eprintln!("worlds-mcp: {e}");
                    1
                }
            },
        }
    });
    std::process::exit(code);
}
