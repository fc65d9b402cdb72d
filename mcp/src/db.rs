//! Postgres for the MCP server: where it is, a bounded pool of connections per login, and one call run in
//! a world with its limits (timeout, rows, bytes). The server logs in as the agent; everything the agent
//! may or may not do is Postgres's decision.
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Row, Statement};

/// How long an idle connection may be reused: a token revoked (DROP AGENT, a new password) stops working
/// for new connections at once, and for pooled ones within this.
const IDLE_LIFETIME: Duration = Duration::from_secs(30);
/// How long a call waits for a free connection before it fails.
const CHECKOUT_WAIT: Duration = Duration::from_secs(10);

/// A call's failure, as the tool reports it: Postgres's own fields when Postgres refused.
#[derive(Debug, Clone)]
pub struct CallError {
    pub sqlstate: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub position: Option<u32>,
}

impl CallError {
    pub fn new(sqlstate: &str, message: impl Into<String>) -> Self {
        CallError { sqlstate: sqlstate.into(), message: message.into(), detail: None, hint: None, position: None }
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// Authentication failed (a wrong token, a role that can't log in): over HTTP, a 401.
    pub fn is_auth(&self) -> bool {
        self.sqlstate.starts_with("28")
    }
    pub fn from_pg(e: tokio_postgres::Error, server: &str) -> Self {
        if let Some(db) = e.as_db_error() {
            let position = match db.position() {
                Some(tokio_postgres::error::ErrorPosition::Original(p)) => Some(*p),
                _ => None,
            };
            return CallError {
                sqlstate: db.code().code().to_string(),
                message: db.message().to_string(),
                detail: db.detail().map(str::to_string),
                hint: db.hint().map(str::to_string),
                position,
            };
        }
        if e.is_closed() || e.to_string().contains("connect") || e.to_string().contains("error communicating") {
            return CallError::new("08006", format!("cannot reach Postgres at {server}: {e}"))
                .with_hint("Postgres is away or refuses connections; try again when it is up");
        }
        CallError::new("08000", format!("Postgres at {server}: {e}"))
    }
}

/// Where Postgres is, and who the server logs in as when it isn't told (stdio).
#[derive(Clone)]
pub struct Target {
    pub config: Config,
    /// host:port for messages
    pub shown: String,
}

impl Target {
    /// From `--dsn` (a libpq key=value string or a postgres:// URL) and libpq's environment (PGHOST,
    /// PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGOPTIONS, PGAPPNAME), the DSN winning.
    pub fn from_env(dsn: Option<&str>) -> Result<Target, String> {
        let mut config = match dsn {
            Some(d) => d.parse::<Config>().map_err(|e| format!("--dsn: {e}"))?,
            None => Config::new(),
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if config.get_hosts().is_empty() {
            let hosts = env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into());
            for h in hosts.split(',') {
                config.host(h);
            }
        }
        if config.get_ports().is_empty() {
            if let Some(p) = env("PGPORT") {
                config.port(p.parse().map_err(|_| format!("PGPORT: not a port: {p}"))?);
            }
        }
        if config.get_dbname().is_none() {
            if let Some(d) = env("PGDATABASE") {
                config.dbname(d);
            }
        }
        if config.get_user().is_none() {
            let user = env("PGUSER").or_else(|| env("USER")).unwrap_or_else(|| "postgres".into());
            config.user(user);
        }
        if config.get_password().is_none() {
            if let Some(p) = env("PGPASSWORD") {
                config.password(p);
            }
        }
        if config.get_options().is_none() {
            if let Some(o) = env("PGOPTIONS") {
                config.options(o);
            }
        }
        config.application_name(env("PGAPPNAME").unwrap_or_else(|| "worlds-mcp".into()));
        config.connect_timeout(Duration::from_secs(5));
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "?".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        Ok(Target { config, shown: format!("{host}:{port}") })
    }

    /// The same server and database, logging in as `user` with `password` (an agent's bearer over HTTP).
    pub fn as_login(&self, user: &str, password: &str) -> Config {
        let mut c = self.config.clone();
        c.user(user);
        c.password(password);
        c
    }
}

/// One login's identity in the pool: its user and a hash of its secret (kept in this process only), so
/// a wrong token never reuses a right one's connection.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Login {
    pub user: String,
    secret: u64,
}

impl Login {
    pub fn of(config: &Config) -> Login {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        config.get_password().unwrap_or_default().hash(&mut h);
        Login { user: config.get_user().unwrap_or_default().to_string(), secret: h.finish() }
    }
}

pub struct Conn {
    pub client: Client,
    notices: Arc<Mutex<Vec<String>>>,
    login: Login,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    /// The NOTICEs and WARNINGs Postgres sent since the last call (a DRY RUN's "add AT VERSION n TARGET t").
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.notices.lock().unwrap())
    }
}

/// A bounded pool: at most `size` connections open at once over all logins; idle ones are kept per login
/// for a short while and given up to other logins when the pool is full.
pub struct Pool {
    pub target: Target,
    permits: Arc<Semaphore>,
    idle: Mutex<HashMap<Login, Vec<(Conn, Instant)>>>,
}

impl Pool {
    pub fn new(target: Target, size: usize) -> Arc<Pool> {
        Arc::new(Pool { target, permits: Arc::new(Semaphore::new(size.max(1))), idle: Mutex::new(HashMap::new()) })
    }

    fn evict_one_idle(&self) -> bool {
        let mut idle = self.idle.lock().unwrap();
        for conns in idle.values_mut() {
            if conns.pop().is_some() {
                return true;
            }
        }
        false
    }

    /// A connection logged in as `config`'s user (connecting when none is idle for that login).
    pub async fn checkout(&self, config: &Config) -> Result<Conn, CallError> {
        let login = Login::of(config);
        loop {
            let conn = self.idle.lock().unwrap().get_mut(&login).and_then(|v| v.pop());
            match conn {
                Some((c, since)) if since.elapsed() < IDLE_LIFETIME && !c.client.is_closed() => {
                    // still allowed to log in? (an agent disabled or dropped since)
                    match c.client.query_opt("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = current_user AND rolcanlogin", &[]).await {
                        Ok(Some(_)) => return Ok(c),
                        Ok(None) => return Err(CallError::new("28000", format!("role \"{}\" is not permitted to log in", login.user))),
                        Err(_) => continue,
                    }
                }
                Some(_) => continue, // too old or closed: dropped, its permit freed
                None => break,
            }
        }
        let permit = loop {
            match self.permits.clone().try_acquire_owned() {
                Ok(p) => break p,
                Err(_) if self.evict_one_idle() => continue,
                Err(_) => match tokio::time::timeout(CHECKOUT_WAIT, self.permits.clone().acquire_owned()).await {
                    Ok(Ok(p)) => break p,
                    _ => {
                        return Err(CallError::new("53300", "all of the MCP server's connections to Postgres are busy")
                            .with_hint("try again, or start worlds-mcp with a larger --pool-size"))
                    }
                },
            }
        };
        let (client, mut connection) = config.connect(NoTls).await.map_err(|e| CallError::from_pg(e, &self.target.shown))?;
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        tokio::spawn(async move {
            while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match m {
                    Ok(AsyncMessage::Notice(n)) => {
                        let mut v = sink.lock().unwrap();
                        if v.len() < 100 {
                            v.push(format!("{}: {}", n.severity(), n.message()));
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        Ok(Conn { client, notices, login, _permit: permit })
    }

    /// Gives back a connection no call used (the bearer's check): nothing to undo.
    pub fn put_back_unused(&self, conn: Conn) {
        if !conn.client.is_closed() {
            let login = conn.login.clone();
            self.idle.lock().unwrap().entry(login).or_default().push((conn, Instant::now()));
        }
    }

    /// Gives a connection back, with everything a call may have left on it undone; one that can't be
    /// cleaned is closed.
    pub async fn give_back(&self, conn: Conn) {
        if conn.client.is_closed() {
            return;
        }
        let clean = conn
            .client
            .batch_execute(
                "ROLLBACK; CLOSE ALL; RESET ROLE; RESET SESSION AUTHORIZATION; RESET ALL; \
                 SELECT pg_catalog.pg_advisory_unlock_all(); UNLISTEN *; DISCARD TEMP; DISCARD SEQUENCES",
            )
            .await;
        if clean.is_ok() {
            conn.take_notices();
            let login = conn.login.clone();
            self.idle.lock().unwrap().entry(login).or_default().push((conn, Instant::now()));
        }
    }
}

/// How a call runs.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub statement_timeout_ms: u64,
    pub max_rows: usize,
    pub max_bytes: usize,
}

/// A value given as text, for Postgres to read as the parameter's type (whatever it inferred).
#[derive(Debug)]
pub struct TextParam(pub Option<String>);

impl ToSql for TextParam {
    fn to_sql(&self, _ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Some(s) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }
    fn accepts(_ty: &Type) -> bool {
        true
    }
    fn encode_format(&self, _ty: &Type) -> tokio_postgres::types::Format {
        tokio_postgres::types::Format::Text
    }
    tokio_postgres::types::to_sql_checked!();
}

/// A value as Postgres sent it (binary), to be sent back for its text form.
#[derive(Debug)]
struct Raw(Option<Vec<u8>>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw.to_vec())))
    }
    fn from_sql_null(_ty: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_ty: &Type) -> bool {
        true
    }
}

impl ToSql for Raw {
    fn to_sql(&self, _ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Some(b) => {
                out.extend_from_slice(b);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }
    fn accepts(_ty: &Type) -> bool {
        true
    }
    tokio_postgres::types::to_sql_checked!();
}

/// Types whose values become JSON values directly; the others are shown as Postgres writes them as text.
fn native(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::BOOL | Type::INT2 | Type::INT4 | Type::INT8 | Type::OID | Type::FLOAT4 | Type::FLOAT8 | Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::JSONB | Type::UNKNOWN
    )
}

fn native_value(row: &Row, i: usize) -> Value {
    let ty = row.columns()[i].type_().clone();
    let r: Result<Value, _> = match ty {
        Type::BOOL => row.try_get::<_, Option<bool>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
        Type::INT2 => row.try_get::<_, Option<i16>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
        Type::INT4 => row.try_get::<_, Option<i32>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
        Type::INT8 => row.try_get::<_, Option<i64>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
        Type::OID => row.try_get::<_, Option<u32>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
        Type::FLOAT4 => row.try_get::<_, Option<f32>>(i).map(|v| v.map(|f| float(f as f64)).unwrap_or(Value::Null)),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map(|v| v.map(float).unwrap_or(Value::Null)),
        Type::JSON | Type::JSONB => row.try_get::<_, Option<Value>>(i).map(|v| v.unwrap_or(Value::Null)),
        _ => row.try_get::<_, Option<String>>(i).map(|v| v.map(Value::from).unwrap_or(Value::Null)),
    };
    r.unwrap_or(Value::Null)
}

fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f).map(Value::Number).unwrap_or_else(|| Value::String(f.to_string()))
}

/// Rows as JSON, each an array in column order; values not JSON-native (numeric, dates, arrays, a
/// domain...) are read back as Postgres's own text for them (one more round trip, values as parameters).
pub async fn rows_to_json(client: &impl tokio_postgres::GenericClient, rows: &[Row]) -> Result<(Vec<Value>, Vec<Vec<Value>>), tokio_postgres::Error> {
    let Some(first) = rows.first() else { return Ok((Vec::new(), Vec::new())) };
    let columns: Vec<Value> = first.columns().iter().map(|c| json!({"name": c.name(), "type": c.type_().name()})).collect();
    let mut out: Vec<Vec<Value>> = rows.iter().map(|r| vec![Value::Null; r.len()]).collect();
    let mut pending: Vec<(usize, usize, Type, Raw)> = Vec::new();
    for (ri, row) in rows.iter().enumerate() {
        for ci in 0..row.len() {
            let ty = row.columns()[ci].type_();
            if native(ty) {
                out[ri][ci] = native_value(row, ci);
            } else {
                let raw: Raw = row.try_get(ci).unwrap_or(Raw(None));
                if raw.0.is_some() {
                    pending.push((ri, ci, ty.clone(), raw));
                }
            }
        }
    }
    for chunk in pending.chunks(500) {
        let sql = (1..=chunk.len()).map(|i| format!("${i}::text")).collect::<Vec<_>>().join(", ");
        let types: Vec<Type> = chunk.iter().map(|p| p.2.clone()).collect();
        let stmt = client.prepare_typed(&format!("SELECT {sql}"), &types).await?;
        let params: Vec<&(dyn ToSql + Sync)> = chunk.iter().map(|p| &p.3 as &(dyn ToSql + Sync)).collect();
        let row = client.query_one(&stmt, &params).await?;
        for (k, p) in chunk.iter().enumerate() {
            out[p.0][p.1] = row.try_get::<_, Option<String>>(k)?.map(Value::from).unwrap_or(Value::Null);
        }
    }
    Ok((columns, out))
}

/// Rows of a query made of this server's own SQL (never the caller's text), as objects by column name.
pub fn objects(columns: &[Value], rows: Vec<Vec<Value>>) -> Vec<Value> {
    rows.into_iter()
        .map(|r| {
            let mut m = Map::new();
            for (c, v) in columns.iter().zip(r) {
                m.insert(c["name"].as_str().unwrap_or_default().to_string(), v);
            }
            Value::Object(m)
        })
        .collect()
}

/// Cuts rows to the row and byte caps: (rows kept, truncated).
pub fn capped(rows: Vec<Vec<Value>>, limits: &Limits) -> (Vec<Vec<Value>>, bool) {
    let mut kept = Vec::new();
    let mut bytes = 0usize;
    let total = rows.len();
    for r in rows {
        if kept.len() >= limits.max_rows {
            break;
        }
        let size = serde_json::to_string(&r).map(|s| s.len()).unwrap_or(0);
        if bytes + size > limits.max_bytes {
            break;
        }
        bytes += size;
        kept.push(r);
    }
    let truncated = kept.len() < total;
    (kept, truncated)
}

/// The statement's `$n` parameters, given as JSON values: strings, numbers and booleans as their text,
/// objects and arrays as JSON text, null as NULL.
pub fn params_of(stmt: &Statement, given: &[Value]) -> Result<Vec<TextParam>, CallError> {
    let want = stmt.params().len();
    if want != given.len() {
        return Err(CallError::new("08P01", format!("the statement has {want} parameter(s) ($1..${want}) but {} were given", given.len()))
            .with_hint("pass one value in params for each $n"));
    }
    Ok(given
        .iter()
        .map(|v| {
            TextParam(match v {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) => Some(n.to_string()),
                other => Some(other.to_string()),
            })
        })
        .collect())
}

/// Sets the call's statement timeout: the smaller of the server's and the role's own (an agent's
/// max_query_ms is its role's statement_timeout, which a call never widens). `local`: for the transaction.
pub async fn set_timeout(client: &impl tokio_postgres::GenericClient, ms: u64, local: bool) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "SELECT pg_catalog.set_config('statement_timeout',
                 (CASE WHEN s.setting::bigint = 0 THEN $1::bigint ELSE least(s.setting::bigint, $1::bigint) END)::text, $2)
             FROM pg_catalog.pg_settings s WHERE s.name = 'statement_timeout'",
            &[&(ms as i64), &local],
        )
        .await
        .map(|_| ())
}

/// Sets the session's world for the call (`local`: for the transaction).
pub async fn set_world(client: &impl tokio_postgres::GenericClient, world: &str, local: bool) -> Result<(), tokio_postgres::Error> {
    client.execute("SELECT pg_catalog.set_config('worlds.world', $1, $2)", &[&world, &local]).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_capped_by_count_and_bytes() {
        let limits = Limits { statement_timeout_ms: 1, max_rows: 3, max_bytes: 1000 };
        let rows: Vec<Vec<Value>> = (0..10).map(|i| vec![Value::from(i)]).collect();
        let (kept, truncated) = capped(rows, &limits);
        assert_eq!(kept.len(), 3);
        assert!(truncated);
        let big: Vec<Vec<Value>> = (0..3).map(|_| vec![Value::from("x".repeat(600))]).collect();
        let (kept, truncated) = capped(big, &limits);
        assert_eq!(kept.len(), 1);
        assert!(truncated);
        let (kept, truncated) = capped(vec![vec![Value::from(1)]], &limits);
        assert_eq!((kept.len(), truncated), (1, false));
    }

    #[test]
    fn environment_and_dsn() {
        let t = Target::from_env(Some("host=db.example port=6543 dbname=app user=bot password=s")).unwrap();
        assert_eq!(t.shown, "db.example:6543");
        assert_eq!(t.config.get_dbname(), Some("app"));
        let other = t.as_login("agent_7", "wt_x");
        assert_eq!(other.get_user(), Some("agent_7"));
        assert_ne!(Login::of(&other), Login::of(&t.as_login("agent_7", "wt_y")), "another token is another login");
        assert!(Target::from_env(Some("port=notaport")).is_err());
    }
}
