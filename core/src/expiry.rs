//! The expiry worker's decisions (src/time/expiry.rs): which databases it visits, how long it stays in
//! one, and what it says in the server log.

/// `pg_database.datconnlimit` of a database a DROP DATABASE left half dropped (PostgreSQL 15.4 and later):
/// no one may connect to it any more.
pub const DATCONNLIMIT_INVALID_DB: i32 = -2;

/// Discards at most this many worlds in one database per round (each in a transaction of its own); the
/// rest wait for the next round.
pub const MAX_DISCARDS_PER_ROUND: usize = 100;

/// Rows per kind and table that one purge transaction deletes (`worlds.purge_history(batch_size)`).
pub const PURGE_BATCH: i32 = 1000;

/// Tracked tables one transaction of the worker's purge takes a batch of each of (four locks a table:
/// its history, its inserts and their indexes, so a step holds about as many as a transaction writing
/// 32 tables would).
pub const PURGE_TABLES: usize = 32;

/// How long a round's purges may go on, in all databases together: a database's discards, later in the
/// round, don't wait for more than this of other databases' purges, and a DROP DATABASE that waits for the
/// worker to leave doesn't wait longer (it is also seen between batches).
pub const PURGE_BUDGET_MS: u64 = 2000;

/// The least a database's purge is given in a round, whatever the databases before it used: the round's
/// time also goes to starting a worker in every database (tens of milliseconds each on a busy machine), so
/// in a cluster of dozens of databases the budget alone was spent before the last ones were reached, and
/// their history waited many rounds (tests/sessions/39 in the full suite's cluster).
pub const PURGE_MIN_MS: u64 = 250;

/// What a database's purge may take `round_elapsed_ms` into the round: what is left of the round's budget,
/// and never less than `PURGE_MIN_MS`. A round's purges so take at most the budget plus that minimum for
/// each database that has something to purge.
pub fn purge_budget_left(round_elapsed_ms: u64) -> u64 {
    PURGE_BUDGET_MS.saturating_sub(round_elapsed_ms).max(PURGE_MIN_MS)
}

/// The database (of `databases` visited) the `round`th round starts with: each round one further, so that
/// when the budget runs out before the last ones, every database is the first, with the whole budget, in
/// turn.
pub fn round_start(databases: usize, round: u64) -> usize {
    if databases == 0 { 0 } else { (round % databases as u64) as usize }
}

/// Where a purge round starts in its database's list of `groups` groups of tracked tables: at a place the
/// clock (`seconds`) moves on, so that when one round's budget reaches only some of the tables, the rounds
/// after it start elsewhere and every table's history is purged in turn.
pub fn purge_start(groups: usize, seconds: u64) -> usize {
    if groups == 0 { 0 } else { (seconds % groups as u64) as usize }
}

/// A database as pg_database lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Database {
    pub oid: u32,
    pub name: String,
    pub is_template: bool,
    pub allows_connections: bool,
    pub conn_limit: i32,
}

/// Is this database visited? Not a template (template0, template1 and any database marked a template: a
/// CREATE DATABASE copies it, and a session connected to it makes that CREATE DATABASE fail), not one that
/// refuses connections, not one left half dropped.
pub fn visits(db: &Database) -> bool {
    !db.is_template && db.allows_connections && db.conn_limit != DATCONNLIMIT_INVALID_DB
}

/// Does the purge of one database go on after a batch that deleted `deleted` rows (-1: it met a busy lock),
/// `elapsed_ms` into that database's purge, given `budget_ms` of the round's budget?
pub fn purge_goes_on(deleted: i64, elapsed_ms: u64, budget_ms: u64) -> bool {
    deleted > 0 && elapsed_ms < budget_ms
}

/// The server log's line for a world the worker discarded. `reason` as `worlds._due` gives it; `since`:
/// the TTL's end ('ttl') or the world's last activity ('idle'), as text.
pub fn discarded_message(world: &str, database: &str, reason: &str, since: Option<&str>) -> String {
    let why = match (reason, since) {
        ("ttl", Some(at)) => format!("its TTL ended at {at}"),
        ("ttl", None) => "its TTL ended".to_string(),
        ("idle", Some(at)) => format!("idle since {at}"),
        ("idle", None) => "idle".to_string(),
        ("simulate", _) => "left by a SIMULATE that didn't finish".to_string(),
        (other, _) => other.to_string(),
    };
    format!("pg_worlds: discarded world {} in database {} ({why})", quoted(world), quoted(database))
}

/// The server log's line for a purge that deleted `rows` history rows (none when it deleted nothing).
pub fn purged_message(rows: i64, database: &str) -> Option<String> {
    (rows > 0).then(|| format!("pg_worlds: purged {rows} history row{} older than history_retention in database {}", if rows == 1 { "" } else { "s" }, quoted(database)))
}

/// A name in a log line, as Postgres quotes names in its messages.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(name: &str, is_template: bool, allows_connections: bool, conn_limit: i32) -> Database {
        Database { oid: 1, name: name.into(), is_template, allows_connections, conn_limit }
    }

    #[test]
    fn visits_ordinary_databases_only() {
        assert!(visits(&db("app", false, true, -1)));
        assert!(visits(&db("app", false, true, 5)));
        assert!(!visits(&db("template1", true, true, -1)));
        assert!(!visits(&db("template0", true, false, -1)));
        assert!(!visits(&db("closed", false, false, -1)));
        assert!(!visits(&db("half_dropped", false, true, DATCONNLIMIT_INVALID_DB)));
    }

    #[test]
    fn purge_stops_when_done_busy_or_out_of_time() {
        assert!(purge_goes_on(1000, 0, PURGE_BUDGET_MS));
        assert!(!purge_goes_on(0, 0, PURGE_BUDGET_MS));
        assert!(!purge_goes_on(-1, 0, PURGE_BUDGET_MS));
        assert!(!purge_goes_on(1000, PURGE_BUDGET_MS, PURGE_BUDGET_MS));
        assert!(!purge_goes_on(1000, 300, 300));
    }

    #[test]
    fn one_budget_for_a_whole_round() {
        assert_eq!(purge_budget_left(0), PURGE_BUDGET_MS);
        assert_eq!(purge_budget_left(500), PURGE_BUDGET_MS - 500);
        // past the budget, the databases left in the round still get the minimum
        assert_eq!(purge_budget_left(PURGE_BUDGET_MS - 100), PURGE_MIN_MS);
        assert_eq!(purge_budget_left(PURGE_BUDGET_MS), PURGE_MIN_MS);
        assert_eq!(purge_budget_left(PURGE_BUDGET_MS * 10), PURGE_MIN_MS);
    }

    #[test]
    fn every_database_starts_a_round_in_turn() {
        assert_eq!(round_start(0, 7), 0);
        let firsts: std::collections::BTreeSet<usize> = (40..45).map(|r| round_start(5, r)).collect();
        assert_eq!(firsts.len(), 5);
        assert!((0..1000).all(|r| round_start(13, r) < 13));
    }

    #[test]
    fn purge_rounds_start_everywhere_in_turn() {
        assert_eq!(purge_start(0, 12345), 0);
        assert_eq!(purge_start(1, 12345), 0);
        // over as many seconds as there are groups, every group is a round's first
        let starts: std::collections::BTreeSet<usize> = (1000..1007).map(|s| purge_start(7, s)).collect();
        assert_eq!(starts.len(), 7);
        assert!((0..10_000).all(|s| purge_start(3000, s) < 3000));
    }

    #[test]
    fn messages_say_what_and_why() {
        assert_eq!(
            discarded_message("w1", "app", "idle", Some("2026-01-01 10:00:00+00")),
            "pg_worlds: discarded world \"w1\" in database \"app\" (idle since 2026-01-01 10:00:00+00)"
        );
        assert_eq!(
            discarded_message("w\"x", "my db", "ttl", Some("2026-01-01 10:00:00+00")),
            "pg_worlds: discarded world \"w\"\"x\" in database \"my db\" (its TTL ended at 2026-01-01 10:00:00+00)"
        );
        assert!(discarded_message("s_1", "app", "simulate", None).ends_with("(left by a SIMULATE that didn't finish)"));
        assert_eq!(purged_message(0, "app"), None);
        assert_eq!(purged_message(1, "app").unwrap(), "pg_worlds: purged 1 history row older than history_retention in database \"app\"");
        assert!(purged_message(2000, "app").unwrap().contains("2000 history rows"));
    }
}
