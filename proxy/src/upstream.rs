//! The upstream server: its libpq `key=value` connection string (host, port, dbname, sslmode), and the
//! startup packet a client's becomes (the database name choosing the world).
use crate::wire::escape_option;

#[derive(Debug, Clone, PartialEq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// a host name or IP, or a Unix socket directory (starting with `/`)
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub sslmode: SslMode,
}

impl Upstream {
    /// The address to connect to: `host:port`, or the socket file in the directory.
    pub fn unix_path(&self) -> Option<String> {
        self.host.starts_with('/').then(|| format!("{}/.s.PGSQL.{}", self.host.trim_end_matches('/'), self.port))
    }
}

/// Parses `host=... port=... dbname=... [sslmode=...]` as libpq does (values may be 'quoted', with \'
/// and \\ inside). user and password are refused: each client logs in as itself.
pub fn parse_conninfo(s: &str) -> Result<Upstream, String> {
    let mut up = Upstream { host: "localhost".into(), port: 5432, dbname: String::new(), sslmode: SslMode::Disable };
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("missing \"=\" after \"{key}\" in the upstream connection string"));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted string in the upstream connection string".into()),
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        match key.as_str() {
            "host" | "hostaddr" => up.host = value,
            "port" => up.port = value.parse().map_err(|_| format!("invalid port \"{value}\" in the upstream connection string"))?,
            "dbname" => up.dbname = value,
            "sslmode" => {
                up.sslmode = match value.as_str() {
                    "disable" | "allow" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" | "verify-ca" | "verify-full" => SslMode::Require,
                    _ => return Err(format!("invalid sslmode \"{value}\"")),
                }
            }
            "user" | "password" => {
                return Err(format!("{key} is not taken from the upstream connection string: each client logs in as itself"))
            }
            "connect_timeout" | "application_name" => {}
            _ => return Err(format!("unknown key \"{key}\" in the upstream connection string")),
        }
    }
    if up.dbname.is_empty() {
        return Err("the upstream connection string needs dbname".into());
    }
    Ok(up)
}

/// What the client's database name asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// the upstream database's own name, or `main`: main (and whatever the client's options say)
    Main,
    /// a world, or a world's moment (`name@when`, read only)
    World(String),
}

pub fn target(database: &str, upstream_db: &str) -> Target {
    if database == upstream_db || database == "main" {
        Target::Main
    } else {
        Target::World(database.to_string())
    }
}

/// The client's startup parameters as the upstream gets them: its database replaced by the upstream's, and
/// for a world `-c worlds.world=<name>` after the client's own options.
pub fn upstream_params(client: &[(String, String)], upstream_db: &str, target: &Target) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(client.len() + 2);
    let mut have_db = false;
    let mut have_options = false;
    for (k, v) in client {
        match k.as_str() {
            "database" => {
                have_db = true;
                out.push((k.clone(), upstream_db.to_string()));
            }
            "options" => {
                have_options = true;
                let mut v = v.clone();
                if let Target::World(w) = target {
                    if !v.trim().is_empty() {
                        v.push(' ');
                    }
                    v.push_str(&world_option(w));
                }
                out.push((k.clone(), v));
            }
            _ => out.push((k.clone(), v.clone())),
        }
    }
    if !have_db {
        out.push(("database".into(), upstream_db.to_string()));
    }
    if let (false, Target::World(w)) = (have_options, target) {
        out.push(("options".into(), world_option(w)));
    }
    out
}

fn world_option(world: &str) -> String {
    format!("-c {}", escape_option(&format!("worlds.world={world}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn conninfo() {
        let u = parse_conninfo("host=127.0.0.1 port=5433 dbname=app").unwrap();
        assert_eq!(u, Upstream { host: "127.0.0.1".into(), port: 5433, dbname: "app".into(), sslmode: SslMode::Disable });
        let u = parse_conninfo(" host = '/tmp/my dir' dbname='it\\'s' sslmode=require").unwrap();
        assert_eq!((u.host.as_str(), u.dbname.as_str(), u.sslmode.clone(), u.port), ("/tmp/my dir", "it's", SslMode::Require, 5432));
        assert_eq!(u.unix_path().unwrap(), "/tmp/my dir/.s.PGSQL.5432");
        assert!(parse_conninfo("host=x").unwrap_err().contains("dbname"));
        assert!(parse_conninfo("dbname=app user=bob").unwrap_err().contains("logs in as itself"));
        assert!(parse_conninfo("dbname=app port=x").is_err());
        assert!(parse_conninfo("dbname").is_err());
        assert!(parse_conninfo("dbname='app").is_err());
    }

    #[test]
    fn the_database_name_chooses_the_world() {
        assert_eq!(target("app", "app"), Target::Main);
        assert_eq!(target("main", "app"), Target::Main);
        assert_eq!(target("agent_7", "app"), Target::World("agent_7".into()));
        assert_eq!(target("main@-1 hour", "app"), Target::World("main@-1 hour".into()));
    }

    #[test]
    fn startup_parameters_for_the_upstream() {
        let client = p(&[("user", "bob"), ("database", "agent_7"), ("application_name", "psql")]);
        assert_eq!(
            upstream_params(&client, "app", &target("agent_7", "app")),
            p(&[("user", "bob"), ("database", "app"), ("application_name", "psql"), ("options", "-c worlds.world=agent_7")])
        );
        // the client's own options are kept, the world's come after them (a later -c wins)
        let client = p(&[("user", "bob"), ("database", "main@-1 hour"), ("options", "-c work_mem=8MB")]);
        assert_eq!(
            upstream_params(&client, "app", &target("main@-1 hour", "app")),
            p(&[("user", "bob"), ("database", "app"), ("options", "-c work_mem=8MB -c worlds.world=main@-1\\ hour")])
        );
        // main: the client's options=-c worlds.world=... untouched
        let client = p(&[("user", "bob"), ("database", "app"), ("options", "-c worlds.world=w1")]);
        assert_eq!(upstream_params(&client, "app", &Target::Main), client);
        // no database given (libpq always gives one): the upstream's
        assert_eq!(upstream_params(&p(&[("user", "bob")]), "app", &Target::Main), p(&[("user", "bob"), ("database", "app")]));
    }
}
