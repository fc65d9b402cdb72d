//! pg_worlds: isolated, instantly forked worlds inside PostgreSQL.
//!
//! Layout (see docs/architecture.md):
//! - `guc`        the session's world (`worlds.world`) and other settings
//! - `route`      hooks that send an existing app's queries into the session's world
//! - `catalog`    the SQL objects the extension installs (catalog tables, lifecycle functions)
//! - `storage`    history capture on main, world deltas, the overlay read cache
//! - `merge`      DIFF, MERGE (and DRY RUN), REBASE: gather three sides, decide (worlds_core), apply
//! - `statements` `worlds.sql(text)`: the spec's statements, parsed by `worlds_core::grammar`
//! - `time`       RESTORE WORLD and UNDO MERGE (moments, AS OF, checkpoints, SHOW HISTORY are SQL)
//! - `governance` agents and their rights (and the other gates a merge submits to)
//! - `api`        small SQL-callable helpers shared by the above
//! - `metrics`    SHOW METRICS: pg_worlds' operations timed and its refusals counted, in shared memory
use pgrx::prelude::*;

pub mod api;
pub mod backend_local;
pub mod fast_ffi;
pub mod catalog;
pub mod datum;
pub mod governance;
pub mod guc;
pub mod merge;
pub mod metrics;
pub mod plan;
pub mod route;
mod shared_memory;
pub mod spi_calls;
pub mod sql_text;
pub mod subxact;
pub mod statements;
pub mod storage;
pub mod time;
pub mod world;

::pgrx::pg_module_magic!(name, version);

/// True when the library was loaded through `shared_preload_libraries`; only then are the hooks installed.
static PRELOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn preloaded() -> bool {
    PRELOADED.load(std::sync::atomic::Ordering::Relaxed)
}

#[allow(non_snake_case)]
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Postgres's own errors pass through pgrx's guards on their way out of our hooks; with RUST_BACKTRACE
    // set in the server's environment, pgrx would capture a Rust backtrace into their DETAIL. Errors in
    // main must read as stock Postgres's: no backtraces, whatever the environment (read once, before any
    // capture; backends inherit it from the postmaster)
    unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    guc::register();
    governance::read_only::register();
    // Loaded by a CREATE FUNCTION or a call in a server that did not preload us: define the settings
    // (so SHOW works) but install nothing; CREATE EXTENSION then refuses with a hint.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
        route::install_hooks();
        governance::read_only::install();
        storage::register_callbacks();
        // names resolve in the session's world's own namespaces first (storage/search_path.rs)
        storage::search_path::install();
        guc::on_world_change(storage::search_path::world_setting_changed);
        // the work of the rooms above storage that storage's callbacks run (storage/callbacks.rs)
        storage::callbacks::on_relcache_invalidation(route::scans::keys::on_relcache_invalidation);
        storage::callbacks::on_relcache_invalidation(governance::agents::on_relcache_invalidation);
        storage::callbacks::at_abort(time::past_schema::on_abort);
        storage::callbacks::at_abort(route::world_ddl::forget_deferred);
        // a cancelled or failed SIMULATE stops its workers
        storage::callbacks::at_abort(statements::simulate_on_abort);
        storage::callbacks::at_subxact_abort(route::world_ddl::forget_deferred);
        storage::callbacks::at_subxact_abort(route::routing_aborted);
        storage::callbacks::at_xact_end(route::on_xact_end);
        storage::callbacks::at_xact_end(governance::read_only::on_xact_end);
        // the database name choosing the world: `dbname=app/agent_7` (route/connect_name.rs)
        route::connect_name::install();
        storage::callbacks::at_xact_end(route::connect_name::on_xact_end);
        time::expiry::register_launcher();
        governance::reads::shmem::register();
        governance::readers::clients_shmem::register();
        shared_memory::register();
    }
}

/// Rust-level tests inside a real cluster (`cargo pgrx test pg15`; see scripts/test.sh). Each runs in a
/// transaction that is rolled back. What a user types is tested by pg_regress (sql/, expected/).
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// A world row made directly (CREATE WORLD refuses to run inside the test's transaction), named
    /// `w<num>`. `sees_this_transaction`: forked as if this transaction's writes so far were committed.
    fn make_test_world(num: i32, sees_this_transaction: bool) {
        // (as CREATE WORLD does first: the tracked tables get their deltas)
        Spi::run("SELECT worlds._ensure_world_storage()").unwrap();
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world (num, id, name, parent, depth, created, fork_snapshot)
             SELECT $1, 'w' || $1, 'w' || $1, 0, 1, now(),
                    CASE WHEN $2 THEN format('%s:%s:', x, x)::pg_snapshot ELSE pg_current_snapshot() END
             FROM (SELECT pg_current_xact_id()::text::int8 + 1 AS x) s",
            &[num.into(), sees_this_transaction.into()],
        )
        .unwrap();
    }

    /// sql_text's names and literals read back as what they quote, under either standard_conforming_strings.
    #[pg_test]
    fn quoted_names_and_literals_read_back() {
        use crate::sql_text::{QuotedName, SqlLiteral};
        assert_eq!(QuotedName::ident("orders").as_str(), "orders");
        assert_eq!(QuotedName::ident("Orders").as_str(), "\"Orders\"");
        assert_eq!(QuotedName::ident("a\"b").as_str(), "\"a\"\"b\"");
        assert_eq!(QuotedName::qualified("app", "it's").as_str(), "app.\"it's\"");
        assert_eq!(SqlLiteral::text("it's").as_str(), "'it''s'");
        assert_eq!(SqlLiteral::text("a\\b").as_str(), "E'a\\\\b'");
        for scs in ["on", "off"] {
            Spi::run(&format!("SET LOCAL standard_conforming_strings = {scs}")).unwrap();
            for text in ["it's", "a\\b", "\\x01", "ünï", "\"quoted\"", "'';--"] {
                let back = Spi::get_one::<String>(&format!("SELECT {}", SqlLiteral::text(text))).unwrap();
                assert_eq!(back.as_deref(), Some(text), "literal of {text:?} with standard_conforming_strings = {scs}");
                let q = QuotedName::ident(text);
                let named = Spi::get_one::<String>(&format!("SELECT t.{q} FROM (SELECT 'x'::text AS {q}) t")).unwrap();
                assert_eq!(named.as_deref(), Some("x"), "{text:?} as a name");
            }
        }
        // (a NUL can't be in a name or a text value: cut there)
        assert_eq!(SqlLiteral::text("a\0b").as_str(), "'a'");
    }

    #[pg_test]
    fn active_snapshot_text_is_pg_current_snapshot() {
        // one snapshot, read both ways: Postgres's function through a read-only query on it, and ours
        Spi::run("SELECT pg_current_xact_id()").unwrap();
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
        let theirs = crate::storage::snapshot_spi::query("SELECT pg_current_snapshot()::text", &[], &[], |r| r.get::<String>(1));
        let ours = crate::storage::overlay::active_snapshot_text();
        unsafe { pg_sys::PopActiveSnapshot() };
        let theirs = theirs.into_iter().next().flatten();
        assert!(theirs.is_some());
        assert_eq!(ours, theirs);
    }

    /// `worlds::world_row` remembers its last read by what the snapshot sees: a later read must still see
    /// this transaction's own change of the row, and no longer see one a rolled-back subtransaction made.
    #[pg_test]
    fn world_row_sees_own_changes_and_rollbacks() {
        make_test_world(901, false);
        let version = || unsafe {
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            let row = crate::storage::overlay::world_row(901, pg_sys::GetActiveSnapshot());
            pg_sys::PopActiveSnapshot();
            row.and_then(|r| r.1)
        };
        assert_eq!(version(), Some(0));
        assert_eq!(version(), Some(0), "read twice on the same view of the row");
        crate::spi_calls::run("UPDATE worlds.world SET version = 7 WHERE num = 901").unwrap();
        assert_eq!(version(), Some(7), "this transaction's own change");
        unsafe { pg_sys::BeginInternalSubTransaction(std::ptr::null()) };
        crate::spi_calls::run("UPDATE worlds.world SET version = 9 WHERE num = 901").unwrap();
        assert_eq!(version(), Some(9), "the subtransaction's change, inside it");
        unsafe { pg_sys::RollbackAndReleaseCurrentSubTransaction() };
        assert_eq!(version(), Some(7), "the rolled-back subtransaction's change is gone");
        crate::spi_calls::run("UPDATE worlds.world SET dropped = now() WHERE num = 901").unwrap();
        assert_eq!(version(), Some(7));
        let dropped = unsafe {
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            let row = crate::storage::overlay::world_row(901, pg_sys::GetActiveSnapshot());
            pg_sys::PopActiveSnapshot();
            row.map(|r| r.0)
        };
        assert_eq!(dropped, Some(true), "the drop is seen");
    }

    #[pg_test]
    fn library_is_preloaded_and_hooks_installed() {
        assert!(crate::preloaded());
        assert!(unsafe { (*std::ptr::addr_of!(pg_sys::post_parse_analyze_hook)).is_some() });
        assert!(unsafe { (*std::ptr::addr_of!(pg_sys::ExecutorStart_hook)).is_some() });
        assert!(unsafe { (*std::ptr::addr_of!(pg_sys::ProcessUtility_hook)).is_some() });
    }

    /// route/connect_name.rs reads PostgreSQL 15's `Port` by offset: in this backend its database, user
    /// and pg_hba.conf line read as Postgres has them.
    #[pg_test]
    fn port_fields_read_as_postgres_has_them() {
        let (database, user, line) = crate::route::connect_name::port_fields().expect("a client backend has a Port");
        assert_eq!(Some(database), Spi::get_one::<String>("SELECT current_database()::text").unwrap());
        assert_eq!(Some(user), Spi::get_one::<String>("SELECT session_user::text").unwrap());
        assert!(line > 0, "the pg_hba.conf line that matched: {line}");
    }

    #[pg_test]
    fn world_setting_defaults_to_main_and_follows_set() {
        assert_eq!(crate::guc::current_world_setting().to_str().unwrap(), "main");
        assert!(crate::guc::in_main());
        let before = crate::guc::world_generation();
        crate::spi_calls::run("SET LOCAL worlds.world = 'agent_7'").unwrap();
        assert_eq!(crate::guc::current_world_setting().to_str().unwrap(), "agent_7");
        assert!(!crate::guc::in_main());
        assert!(crate::guc::world_generation() > before, "changing the world bumps the generation");
        crate::spi_calls::run("SET LOCAL worlds.world = 'main'").unwrap();
    }

    #[pg_test]
    fn sqlstates_map_to_error_codes() {
        assert_eq!(crate::api::code_of("40001"), PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE);
        assert_eq!(crate::api::code_of("3D000"), PgSqlErrorCode::ERRCODE_INVALID_CATALOG_NAME);
        assert_eq!(crate::api::code_of("0A000"), PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED);
        assert_eq!(crate::api::code_of("25001"), PgSqlErrorCode::ERRCODE_ACTIVE_SQL_TRANSACTION);
    }

    #[pg_test]
    fn tables_are_tracked_with_their_key() {
        // with worlds.lazy_storage off: the storage made by CREATE TABLE
        crate::spi_calls::run("SET LOCAL worlds.lazy_storage = off").unwrap();
        crate::spi_calls::run("CREATE TABLE t_tracked (a int, b text, PRIMARY KEY (a, b))").unwrap();
        let stored = crate::spi_calls::get_one::<bool>("SELECT history IS NOT NULL FROM worlds.tables WHERE relid = 't_tracked'::regclass").unwrap();
        assert_eq!(stored, Some(true));
        // by default (worlds.lazy_storage on): tracked at once, its storage (and the key it is read by) made at its first write
        crate::spi_calls::run("RESET worlds.lazy_storage").unwrap();
        crate::spi_calls::run("CREATE TABLE t_lazy (a int PRIMARY KEY)").unwrap();
        let lazy = crate::spi_calls::get_one::<bool>("SELECT history IS NULL AND key_kind IS NULL FROM worlds.tables WHERE relid = 't_lazy'::regclass").unwrap();
        assert_eq!(lazy, Some(true));
        crate::spi_calls::run("INSERT INTO t_lazy VALUES (1)").unwrap();
        let made = crate::spi_calls::get_one::<String>("SELECT key_kind::text FROM worlds.tables WHERE relid = 't_lazy'::regclass AND history IS NOT NULL").unwrap();
        assert_eq!(made.as_deref(), Some("i"));
        let kind = crate::spi_calls::get_one::<String>("SELECT key_kind::text FROM worlds.tables WHERE relid = 't_tracked'::regclass").unwrap();
        assert_eq!(kind.as_deref(), Some("t"));
        let cols = crate::spi_calls::get_one::<Vec<String>>("SELECT key_columns FROM worlds.tables WHERE relid = 't_tracked'::regclass").unwrap();
        assert_eq!(cols, Some(vec!["a".to_string(), "b".to_string()]));
    }

    #[pg_test]
    fn history_captures_before_images_natively() {
        crate::spi_calls::run("CREATE TABLE t_hist (id int PRIMARY KEY, v text)").unwrap();
        crate::spi_calls::run("INSERT INTO t_hist VALUES (1, 'a'), (2, 'b')").unwrap();
        crate::spi_calls::run("UPDATE t_hist SET v = 'z' WHERE id = 1").unwrap();
        crate::spi_calls::run("UPDATE t_hist SET id = 3 WHERE id = 2").unwrap();
        let history = crate::spi_calls::get_one::<String>("SELECT changes::text FROM worlds.tables WHERE relid = 't_hist'::regclass")
            .unwrap()
            .unwrap();
        // inserts keep only the key; an update keeps the before-image; a key change is a delete and an insert
        let ops = crate::spi_calls::get_one::<String>(&format!(
            "SELECT string_agg(_w_op::text || ':' || id || ':' || coalesce(v, '-'), ',' ORDER BY _w_hseq) FROM {history}"
        ))
        .unwrap();
        assert_eq!(ops.as_deref(), Some("I:1:-,I:2:-,U:1:a,D:2:b,I:3:-"));
    }

    #[pg_test(error = "CREATE WORLD cannot run inside a transaction block")]
    fn lifecycle_refuses_transaction_blocks() {
        // the test itself runs inside a transaction block
        crate::spi_calls::run("SELECT worlds.create_world('in_block')").unwrap();
    }

    #[pg_test(error = "world names with a dash need quotes")]
    fn grammar_errors_carry_their_sqlstate() {
        crate::spi_calls::run("SELECT * FROM worlds.sql('create world task-1')").unwrap();
    }

    #[pg_test]
    fn a_world_and_main_do_not_see_each_others_writes() {
        crate::spi_calls::run("CREATE TABLE t_route (id int PRIMARY KEY, v text)").unwrap();
        // main's rows come after the world's fork, so the world must not see them
        make_test_world(900, false);
        crate::spi_calls::run("INSERT INTO t_route VALUES (1, 'main'), (2, 'main')").unwrap();
        crate::spi_calls::run("SET LOCAL worlds.world = 'w900'").unwrap();
        crate::spi_calls::run("INSERT INTO t_route VALUES (3, 'world')").unwrap();
        crate::spi_calls::run("UPDATE t_route SET v = 'world!' WHERE id = 3").unwrap();
        let seen = crate::spi_calls::get_one::<String>("SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM t_route").unwrap();
        assert_eq!(seen.as_deref(), Some("3=world!"));
        crate::spi_calls::run("SET LOCAL worlds.world = 'main'").unwrap();
        let main = crate::spi_calls::get_one::<String>("SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM t_route").unwrap();
        assert_eq!(main.as_deref(), Some("1=main,2=main"));
    }

    #[pg_test]
    fn a_select_in_a_world_reads_through_the_world_scan() {
        crate::spi_calls::run("CREATE TABLE t_scan (id int PRIMARY KEY, v text)").unwrap();
        crate::spi_calls::run("INSERT INTO t_scan SELECT g, 'main' FROM generate_series(1, 100) g").unwrap();
        make_test_world(901, true);
        crate::spi_calls::run("SET LOCAL worlds.world = 'w901'").unwrap();
        crate::spi_calls::run("UPDATE t_scan SET v = 'world' WHERE id IN (5, 50)").unwrap();
        crate::spi_calls::run("DELETE FROM t_scan WHERE id = 6").unwrap();
        let plan = crate::spi_calls::get_one::<String>("EXPLAIN (COSTS OFF) SELECT v FROM t_scan WHERE id = 5").unwrap().unwrap_or_default();
        assert!(plan.contains("WorldScan"), "a point read in a world goes through the world scan: {plan}");
        let seen = crate::spi_calls::get_one::<String>("SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM t_scan WHERE id BETWEEN 4 AND 7").unwrap();
        assert_eq!(seen.as_deref(), Some("4=main,5=world,7=main"));
        let ordered = crate::spi_calls::get_one::<String>("SELECT string_agg(id::text, ',') FROM (SELECT id FROM t_scan WHERE id > 45 ORDER BY id LIMIT 6) s").unwrap();
        assert_eq!(ordered.as_deref(), Some("46,47,48,49,50,51"), "the world's rows are merged in key order");
        let count = crate::spi_calls::get_one::<i64>("SELECT count(*) FROM t_scan").unwrap();
        assert_eq!(count, Some(99));
    }

    #[pg_test]
    fn key_bits_hold_exactly_the_keys_set() {
        use crate::storage::overlay::{Key, KeyBits};
        let keys =
            [100i64, 163, 164, 1000].into_iter().map(|k| (Key::I(k), (k, false))).collect::<crate::storage::overlay::FastMap<_, _>>();
        let mut bits = KeyBits::of(&keys).expect("a small span makes a bitmap");
        for k in [100, 163, 164, 1000] {
            assert!(bits.contains(k));
        }
        for k in [99, 101, 162, 165, 999, 1001, i64::MIN, i64::MAX] {
            assert!(!bits.contains(k), "{k} is not set");
        }
        assert!(bits.any_in(101, 163) && bits.any_in(1000, 5000) && bits.any_in(i64::MIN, 100));
        assert!(!bits.any_in(101, 162) && !bits.any_in(165, 999) && !bits.any_in(1001, i64::MAX) && !bits.any_in(50, 20));
        assert!(bits.insert(999) && bits.contains(999));
        assert!(!bits.insert(1 << 40), "a key far outside the range is refused (the caller drops the bitmap)");
        let sparse = [1i64, 1 << 40].into_iter().map(|k| (Key::I(k), (k, false))).collect::<crate::storage::overlay::FastMap<_, _>>();
        assert!(KeyBits::of(&sparse).is_none(), "keys spread too far keep the hash set");
    }

    #[pg_test]
    fn upsert_in_a_world_updates_the_worlds_row_from_excluded() {
        crate::spi_calls::run("CREATE TABLE t_upsert (id int PRIMARY KEY, n int NOT NULL)").unwrap();
        crate::spi_calls::run("INSERT INTO t_upsert VALUES (1, 10)").unwrap();
        make_test_world(901, false);
        crate::spi_calls::run("SET LOCAL worlds.world = 'w901'").unwrap();
        // the world sees main's row 1 as of its fork (the insert above is this transaction's own)
        crate::spi_calls::run("INSERT INTO t_upsert VALUES (2, 5), (3, 7) ON CONFLICT (id) DO UPDATE SET n = t_upsert.n + excluded.n").unwrap();
        let returned = crate::spi_calls::get_one::<i32>("INSERT INTO t_upsert AS t VALUES (2, 1) ON CONFLICT (id) DO UPDATE SET n = t.n * 100 + excluded.n RETURNING n").unwrap();
        assert_eq!(returned, Some(501));
        let seen = crate::spi_calls::get_one::<String>("SELECT string_agg(id || '=' || n, ',' ORDER BY id) FROM t_upsert").unwrap();
        assert_eq!(seen.as_deref(), Some("2=501,3=7"));
        crate::spi_calls::run("SET LOCAL worlds.world = 'main'").unwrap();
        let main = crate::spi_calls::get_one::<String>("SELECT string_agg(id || '=' || n, ',' ORDER BY id) FROM t_upsert").unwrap();
        assert_eq!(main.as_deref(), Some("1=10"));
    }

    #[pg_test]
    fn a_dropped_columns_value_is_read_from_the_unchanged_row() {
        crate::spi_calls::run("CREATE TABLE t_dropped (id int PRIMARY KEY, old_note text, n int)").unwrap();
        crate::spi_calls::run("INSERT INTO t_dropped VALUES (1, 'kept in the heap', 3)").unwrap();
        let attnum = crate::spi_calls::get_one::<i16>("SELECT attnum FROM pg_attribute WHERE attrelid = 't_dropped'::regclass AND attname = 'old_note'")
            .unwrap()
            .unwrap();
        crate::spi_calls::run("ALTER TABLE t_dropped DROP COLUMN old_note").unwrap();
        let value = crate::spi_calls::get_one::<String>(&format!(
            "SELECT worlds._dropped_value('t_dropped'::regclass::oid, ctid, {attnum}::int2, NULL::text) FROM t_dropped"
        ))
        .unwrap();
        assert_eq!(value.as_deref(), Some("kept in the heap"));
        let logged = crate::spi_calls::get_one::<bool>(
            "SELECT dropped IS NOT NULL FROM worlds.column_log WHERE tabno = (SELECT tabno FROM worlds.tables WHERE relid = 't_dropped'::regclass) AND attname = 'old_note'",
        )
        .unwrap();
        assert_eq!(logged, Some(true));
    }

    #[pg_test]
    fn rows_created_since_a_moment_are_found_by_tid() {
        crate::spi_calls::run("CREATE TABLE t_since (id int PRIMARY KEY, v int)").unwrap();
        crate::spi_calls::run("INSERT INTO t_since VALUES (1, 1)").unwrap();
        crate::spi_calls::run("CREATE TEMP TABLE t_since_at AS SELECT clock_timestamp() - interval '1 second' AS at").unwrap();
        // history records the statement's time: entries of this transaction are at its statements' starts
        let created = crate::spi_calls::get_one::<bool>(
            "SELECT worlds._created_since('t_since'::regclass::oid, (SELECT at FROM t_since_at), ctid) FROM t_since WHERE id = 1",
        )
        .unwrap();
        assert_eq!(created, Some(true), "the insert is in history after the moment");
        let before = crate::spi_calls::get_one::<bool>(
            "SELECT worlds._created_since('t_since'::regclass::oid, now() + interval '1 hour', ctid) FROM t_since WHERE id = 1",
        )
        .unwrap();
        assert_eq!(before, Some(false));
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_worlds'"]
    }
}
