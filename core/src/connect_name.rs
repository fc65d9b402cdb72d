//! The database name choosing the world, for clients that connect straight to Postgres:
//! `dbname=app/agent_7` is database `app` with `worlds.world = agent_7`, `dbname='app/main@-1 hour'` is
//! main as it was an hour ago (docs/architecture.md, "Choosing a world by database name").
//!
//! What is decided here, without a database: how a name the client sent splits into a database and a
//! world, given which databases exist. The server's side (src/route/connect_name.rs) asks pg_database.
//!
//! - A name that is a database is that database, '/' or not: a real `app/reports` is never split.
//! - Otherwise the name is cut at a '/', the last one that leaves a database before it (so a database
//!   whose own name has a '/' can choose worlds too, and a moment may be written with '/' in its date);
//!   neither side may be empty.
//! - A name Postgres may have cut (it keeps the first NAMEDATALEN - 1 = 63 bytes of a database name,
//!   silently) is not split: the world or the moment after the '/' might be another one than the client
//!   wrote.
//! - No database before any '/': the name is left alone, and Postgres fails it as it fails any unknown
//!   database.

/// The longest database name Postgres keeps (NAMEDATALEN - 1 bytes); a longer one arrives cut to this.
pub const MAX_NAME_BYTES: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice<'a> {
    /// The name is used as it is: a database of that name, or no split applies (then Postgres's own
    /// "database ... does not exist").
    AsIs,
    /// Database `database`, world (or moment) `world`.
    Split { database: &'a str, world: &'a str },
    /// A split would apply, but the name is as long as Postgres keeps: it may have been cut.
    MaybeCut { database: &'a str },
}

/// How `name` splits, asking `database_exists` about the whole name first, then about the part before
/// each '/' from the last one back.
pub fn choose<'a>(name: &'a str, mut database_exists: impl FnMut(&str) -> bool) -> Choice<'a> {
    if !name.contains('/') || database_exists(name) {
        return Choice::AsIs;
    }
    for (at, _) in name.rmatch_indices('/') {
        let (database, world) = (&name[..at], &name[at + 1..]);
        if database.is_empty() || world.is_empty() || !database_exists(database) {
            continue;
        }
        if name.len() >= MAX_NAME_BYTES {
            return Choice::MaybeCut { database };
        }
        return Choice::Split { database, world };
    }
    Choice::AsIs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with<'a>(dbs: &'a [&'a str]) -> impl FnMut(&str) -> bool + 'a {
        move |n| dbs.contains(&n)
    }

    #[test]
    fn a_database_is_itself() {
        assert_eq!(choose("app", with(&["app"])), Choice::AsIs);
        assert_eq!(choose("app/reports", with(&["app", "app/reports"])), Choice::AsIs, "a real name with '/' is never split");
        assert_eq!(choose("nosuch", with(&["app"])), Choice::AsIs);
    }

    #[test]
    fn database_slash_world() {
        assert_eq!(choose("app/agent_7", with(&["app"])), Choice::Split { database: "app", world: "agent_7" });
        assert_eq!(choose("app/main", with(&["app"])), Choice::Split { database: "app", world: "main" });
        assert_eq!(
            choose("app/main@-1 hour", with(&["app"])),
            Choice::Split { database: "app", world: "main@-1 hour" }
        );
    }

    #[test]
    fn the_last_slash_that_leaves_a_database() {
        // a moment written with '/' in its date: only "app" is a database
        assert_eq!(
            choose("app/main@2026/12/01", with(&["app"])),
            Choice::Split { database: "app", world: "main@2026/12/01" }
        );
        // a database with '/' in its own name chooses its worlds too
        assert_eq!(choose("a/b/w1", with(&["a", "a/b"])), Choice::Split { database: "a/b", world: "w1" });
        assert_eq!(choose("a/b/w1", with(&["a"])), Choice::Split { database: "a", world: "b/w1" });
    }

    #[test]
    fn nothing_to_split() {
        assert_eq!(choose("app2/x", with(&["app"])), Choice::AsIs, "no database before the '/': Postgres's own error");
        assert_eq!(choose("app/", with(&["app"])), Choice::AsIs, "an empty world");
        assert_eq!(choose("/w1", with(&["", "app"])), Choice::AsIs, "an empty database");
    }

    #[test]
    fn a_name_postgres_may_have_cut_is_not_split() {
        let long = format!("app/{}", "w".repeat(MAX_NAME_BYTES - 4));
        assert_eq!(long.len(), MAX_NAME_BYTES);
        assert_eq!(choose(&long, with(&["app"])), Choice::MaybeCut { database: "app" });
        let fits = format!("app/{}", "w".repeat(MAX_NAME_BYTES - 5));
        assert_eq!(choose(&fits, with(&["app"])), Choice::Split { database: "app", world: &fits[4..] });
        // a database of that long name is still itself
        assert_eq!(choose(&long, with(&["app", &long])), Choice::AsIs);
    }

    #[test]
    fn asks_pg_database_only_when_there_is_a_slash() {
        let mut asked = Vec::new();
        assert_eq!(choose("app", |n| { asked.push(n.to_string()); true }), Choice::AsIs);
        assert!(asked.is_empty());
        choose("x/y/z", |n| { asked.push(n.to_string()); false });
        assert_eq!(asked, ["x/y/z", "x/y", "x"]);
    }
}
