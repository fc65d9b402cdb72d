//! REBASE WORLD (resolve → lock → gather → decide → write the world's rows → new fork point): the merge's
//! phases, applied to the world itself instead of its parent.
use super::*;

/// REBASE: the fork point moves up to main as it is now; the world's own rows stay on top, settled as a
/// merge would settle them (a row settled to main's value is dropped from the world's delta).
/// After a rebase, in the same transaction: a row the world added (or changed) whose unique value another
/// row now has in the rebased world — both sides added it — refuses the rebase (23505; the error undoes it).
fn refuse_duplicates_after_rebase(world: &World, layouts: &[std::rc::Rc<Layout>]) {
    let rebased = world_by_num(world.num);
    for l in layouts.iter().filter(|l| l.key_kind != b'r' && !l.uniques.is_empty() && world_touched(l, world)) {
        let kcols = l.key_columns.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
        for (name, cols) in &l.uniques {
            let on = |a: &str, b: &str| cols.iter().map(|c| format!("{a}.{c} = {b}.{c}", c = quote_ident(c))).collect::<Vec<_>>().join(" AND ");
            let sql = format!(
                "SELECT {ktext} FROM (SELECT DISTINCT ON ({kcols}) * FROM {delta} d WHERE d._w_world = $1 ORDER BY {kcols}, d._w_dseq DESC) d
                 WHERE NOT d._w_del AND {not_null}
                   AND EXISTS (SELECT 1 FROM {table} t WHERE {same} AND NOT ({same_key}))
                 LIMIT 1",
                ktext = key_text_expr(&l.key_columns, "d"),
                delta = l.delta_name,
                table = l.table_name,
                not_null = cols.iter().map(|c| format!("d.{} IS NOT NULL", quote_ident(c))).collect::<Vec<_>>().join(" AND "),
                same = on("t", "d"),
                same_key = key_match(&l.key_columns, "t", "d"),
            );
            let hit = with_world(rebased.clone(), || crate::spi_calls::get_one_with_args::<String>(&sql, &[world.num.into()]).ok().flatten());
            if let Some(key) = hit {
                raise(
                    "23505",
                    format!(
                        "rebasing {}: both sides added rows under one unique value of {} ({}, unique index {name}): row {key} of the world and another; nothing was changed",
                        world.name,
                        short_name(&l.table_name),
                        cols.join(", ")
                    ),
                );
            }
        }
    }
}

pub fn rebase(req: RebaseRequest) -> Vec<Value> {
    crate::api::refuse_in_transaction("REBASE WORLD");
    let session_world = crate::guc::current_world_setting().to_string_lossy().into_owned();
    let _timer = crate::metrics::time(crate::metrics::Timed::Rebase);
    as_internal(|| {
        let name = req.world.clone().unwrap_or(session_world);
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "main has no parent to rebase on");
        }
        crate::governance::agents::require("rebase", Some(world.num));
        // a world that changed the shape of main's tables works on copies of them (merge/twins.rs): they take
        // in main's rows below; a world of a world can't have its parent's rows run through them yet
        let twins = super::twins::of_world(world.num);
        if let Some(t) = twins.first().filter(|_| world.parent.unwrap_or(0) != 0) {
            raise_with(
                "0A000",
                format!("REBASE WORLD {} is not supported yet: it is a world of a world, and it changed the shape of main's table {}", world.name, t.shown),
                None,
                Some("Merge it into its parent, or make the change again in a world of main.".into()),
            );
        }
        if (req.using_ours.is_some() || req.by_columns || !req.resolve.is_empty()) && !twins.is_empty() {
            raise("0A000", format!("REBASE WORLD {} ... USING / BY COLUMNS / RESOLVE: not supported yet for a world that changed the shape of main's tables", world.name));
        }
        // its write lock and its parent's (a world parent doesn't move while this reads it), then its row
        // (no fork of it made meanwhile), then main's rows it changed (lock.rs: the order of all locks)
        lock::worlds(&[world.num, world.parent.unwrap_or(0)]);
        // main's tables its copies take rows of: no writer of main's between the rows read and the new fork
        // point (SHARE, relid order, before any of main's rows is locked)
        let mut twin_tables: Vec<pg_sys::Oid> = twins.iter().map(|t| t.relid).collect();
        twin_tables.sort_by_key(|r| r.to_u32());
        for r in twin_tables {
            unsafe { pg_sys::LockRelationOid(r, pg_sys::ShareLock as pg_sys::LOCKMODE) };
        }
        Spi::connect_mut(|c| {
            crate::spi_calls::written(c.update("SELECT num FROM worlds.world WHERE num = $1 FOR UPDATE", None, &[world.num.into()]), "the world's row lock");
        });
        let has_forks = crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM worlds.world WHERE parent = $1 AND dropped IS NULL)",
            &[world.num.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if has_forks {
            raise("0A000", format!("world {} has live forks; rebasing it would move the ground under them", world.name));
        }
        let world = resolve_again(&world);
        // a world that checks its reads: a row it read that changed since the fork (40001): the decision
        // made on it needs making again (governance/reads)
        if let Some(s) = super::stale_reads::stale(world.num) {
            let r = crate::governance::judge::stale_refusal(&world, &s, "rebasing");
            crate::metrics::count(crate::metrics::Counter::RefusedStaleRead);
            raise_with(r.code, r.message, None, r.hint);
        }
        if let Some(v) = req.at_version {
            if v != world.version {
                raise("55000", format!("world {} is at version {}, not {v}; nothing was rebased", world.name, world.version));
            }
        }
        let resolve: HashMap<(pg_sys::Oid, String), Pick> =
            req.resolve.iter().map(|(r, p)| (parse_row_ref(r), p.clone())).collect();
        for ((relid, key), pick) in &resolve {
            if let Pick::Row(row) = pick {
                check_resolve_row(*relid, key, row);
            }
        }
        // the schema the world made: an object main (or its parent world) made since under the same name is
        // a conflict, as for MERGE (merge/schema.rs); the world's objects stay its own
        let objects = super::schema::objects(world.num);
        let parent_world = world.parent.filter(|&p| p != 0).and_then(world_by_num);
        let both = super::schema::conflicts(&objects, parent_world.as_ref());
        if !both.is_empty() {
            crate::metrics::count(crate::metrics::Counter::Conflicts);
            raise_with(
                "40001",
                format!("rebasing {} conflicts: both sides made {} since the fork; nothing was rebased", world.name, both.join(", ")),
                None,
                Some("Rename or drop one of them, then rebase again.".into()),
            );
        }
        // (the tables it wrote, locked; not every tracked table: gather.rs)
        let layouts = touched_layouts(&world);
        if world.parent == Some(0) {
            // main can't change the rows the world changed until the new fork point is set (FOR SHARE):
            // what the rebase takes in of them is what main has at that point
            let touched: Vec<std::rc::Rc<Layout>> = layouts.iter().filter(|l| world_touched(l, &world)).cloned().collect();
            lock::main_rows(&touched, world.num, lock::Hold::Read);
        }
        // keys of the world's rows that main didn't have when read: main may add one before the new fork
        // point is taken (no row to lock), which is checked after it
        let mut absent: Vec<(std::rc::Rc<Layout>, String)> = Vec::new();
        let mut writes: Vec<(std::rc::Rc<Layout>, Value, bool)> = Vec::new();
        let mut conflicts = Vec::new();
        // a world of a world: its base is the parent as of the fork, theirs the parent now (the planner's
        // three sides, as a merge into that parent reads them; main's when the parent is main)
        let parent_world = world.parent.filter(|&p| p != 0).and_then(world_by_num);
        // (main's tables it changed the shape of: their rows are its copies', taken in below)
        let touched: Vec<std::rc::Rc<Layout>> =
            layouts.iter().filter(|l| world_touched(l, &world) && !twins.iter().any(|t| t.tabno == l.tabno)).cloned().collect();
        let settle = MergeRequest { by_columns: req.by_columns, using_ours: req.using_ours, ..Default::default() };
        let mut overwrites: i64 = 0;
        for p in plan_rows(&touched, &world, parent_world.as_ref(), &settle, &resolve, None, HashMap::new()) {
            let (l, row) = (&p.layout, &p.row);
            if parent_world.is_none() && l.key_kind != b'r' && row.theirs.is_none() {
                absent.push((l.clone(), row.key.clone()));
            }
            if l.key_kind == b'r' {
                // a table without a key: the world's rows stay as they are; a row of main it removed
                // that main changed since is a conflict, however it would be settled
                if row.base.is_some() && row.theirs != row.base {
                    conflicts.push(format!("{}/{}", short_name(&p.table), row.key));
                }
                continue;
            }
            // its own row kept over one its parent changed since the fork (USING OURS, RESOLVE ... = ours)
            if matches!(p.decision.outcome, Outcome::KeptOurs | Outcome::PickedOurs) && row.theirs != row.base {
                overwrites += 1;
            }
            match p.decision.outcome {
                Outcome::Conflict(_) => conflicts.push(format!("{}/{}", short_name(&p.table), row.key)),
                _ if p.decision.result != row.ours => {
                    // the world now holds the settled row (or main's, as a version of its own)
                    let (v, del) = match p.decision.result.clone() {
                        Some(v) => (v, false),
                        None => (row.ours.clone().or(row.theirs.clone()).unwrap_or(Value::Null), true),
                    };
                    writes.push((l.clone(), v, del));
                }
                _ => {}
            }
        }
        // an agent keeping to a policy with overwrite = false can't keep its rows over its parent's changes
        // by rebasing either (a merge would queue it; a rebase has no queue: 42501)
        if overwrites > 0 {
            if let Some(why) = crate::governance::policies::refuses_overwrite(overwrites) {
                crate::metrics::count(crate::metrics::Counter::RefusedPolicy);
                raise_with("42501", format!("rebasing {} {why}; nothing was changed", world.name), None, Some("Rebase with USING THEIRS (or settle those rows so), or let a person rebase it.".into()));
            }
        }
        if !conflicts.is_empty() {
            crate::metrics::count(crate::metrics::Counter::Conflicts);
            let shown = conflicts.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            raise_with(
                "40001",
                format!("rebasing {} conflicts: rows changed on both sides: {shown}; nothing was changed", world.name),
                None,
                Some("Settle them with RESOLVE, BY COLUMNS or USING OURS | THEIRS.".into()),
            );
        }
        // rows it takes in: the parent world's own changes since the old fork, or main's
        // (counted over every tracked table, each one's locks released once counted: gather.rs; a table
        // with nothing since the fork, as its indexes say, passed over at once: storage/index_probe.rs)
        let mut taken: i64 = 0;
        let fork_xmin = world.fork_snapshot.as_deref().and_then(worlds_core::snapshot::Snapshot::parse).map(|s| s.xmin);
        let parent_num = world.parent.unwrap_or(0);
        let may_have = |t: &TableOids| {
            use crate::storage::index_probe::world_has_rows;
            match (parent_world.is_some(), fork_xmin) {
                (true, _) => t.delta.is_none_or(|d| world_has_rows(d, parent_num).unwrap_or(true)),
                (false, Some(x)) => t.main_wrote_since(x),
                (false, None) => true,
            }
        };
        layouts_where(may_have, |l| {
            let (sql, args): (String, Vec<DatumWithOid>) = if parent_world.is_some() {
                (
                    format!(
                        "SELECT count(DISTINCT {}) FROM {} d WHERE d._w_world = $1 AND CASE WHEN $2 LIKE '@%' THEN d._w_at > substr($2, 2)::timestamptz
                         ELSE NOT pg_visible_in_snapshot(d._w_xid, $2::pg_snapshot) END",
                        key_text_expr(&l.key_columns, "d"),
                        l.delta_name
                    ),
                    vec![world.parent.unwrap_or(0).into(), world.fork_snapshot.clone().into()],
                )
            } else {
                (
                    format!(
                        "SELECT count(DISTINCT coalesce(_w_new_tid, _w_old_tid)) FROM {} h WHERE CASE WHEN $1 LIKE '@%' THEN h._w_at > substr($1, 2)::timestamptz
                         ELSE h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot) END",
                        l.history_name
                    ),
                    vec![world.fork_snapshot.clone().into()],
                )
            };
            taken += crate::spi_calls::get_one_with_args::<i64>(&sql, &args).ok().flatten().unwrap_or(0);
            false
        });
        for (l, v, del) in &writes {
            let cols = table_columns(l.relid, true);
            let delta = &l.delta_name;
            let table = &l.table_name;
            let col_list = crate::sql_text::column_list(&cols);
            let sql = format!(
                "INSERT INTO {delta} (_w_world, _w_dseq, _w_del, {col_list}) SELECT $1, $2::int8, $3, {col_list} FROM jsonb_populate_record(NULL::{table}, $4)"
            );
            let write = || {
                Spi::connect_mut(|c| {
                    c.update(&sql, None, &[world.num.into(), crate::storage::capture::next_hseq().into(), (*del).into(), JsonB(v.clone()).into()])
                        .map(|_| ())
                })
            };
            // the table's CHECK constraints hold on the world's rows (copied onto the delta): say them as the table's
            let as_table = |e: pgrx::pg_sys::panic::CaughtError| match &e {
                pgrx::pg_sys::panic::CaughtError::PostgresError(r) => {
                    let rel_name = |oid| unsafe {
                        let n = pg_sys::get_rel_name(oid);
                        if n.is_null() { String::new() } else { std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned() }
                    };
                    let (delta_rel, table_rel) = (rel_name(l.delta), rel_name(l.relid));
                    raise("23514", format!("rebasing {}: {}", world.name, r.message().replace(&format!("\"{delta_rel}\""), &format!("\"{table_rel}\""))))
                }
                _ => e.rethrow(),
            };
            pgrx::PgTryBuilder::new(write)
                .catch_when(PgSqlErrorCode::ERRCODE_CHECK_VIOLATION, as_table)
                .execute()
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        }
        // its copies of main's tables take in main's rows since the fork (merge/twins.rs)
        super::twins::rebase(&world, &twins);
        Spi::connect_mut(|c| {
            crate::spi_calls::written(
                c.update(
                    "UPDATE worlds.world SET fork_snapshot = pg_current_snapshot(), fork_at = NULL, version = version + 1, rebased = clock_timestamp() WHERE num = $1",
                    None,
                    &[world.num.into()],
                ),
                "the world's new fork point",
            );
        });
        for (l, key) in &absent {
            // (a fresh snapshot, after the new fork point's: it sees every row that point sees)
            let added = crate::spi_calls::get_one_with_args::<bool>(
                &format!("SELECT EXISTS (SELECT 1 FROM {} t WHERE {} = $1)", l.table_name, key_text_expr(&l.key_columns, "t")),
                &[key.as_str().into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if added {
                crate::metrics::count(crate::metrics::Counter::Conflicts);
                raise_with(
                    "40001",
                    format!("rebasing {}: main added {}/{key} while the rebase ran; nothing was changed", world.name, short_name(&l.table_name)),
                    None,
                    Some("Run REBASE WORLD again.".into()),
                );
            }
        }
        crate::storage::overlay::forget_all();
        refuse_duplicates_after_rebase(&world, &layouts);
        crate::governance::agents::audit("rebase", &world.name, Some(taken as i64));
        vec![serde_json::json!({ "tag": format!("REBASE {taken}") })]
    })
}
