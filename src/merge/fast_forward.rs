//! A fast-forward merge: every table the world changed is one main hasn't touched since the fork, so
//! each row's base is main's row as it stands (theirs), nothing can conflict, and the decision for a row
//! is the world's own version of it (ours) unless ours is theirs already. No plan of rows is needed:
//! each table is changed by typed set-based statements straight from the world's delta (its latest
//! version of each key), which is what `decide` would have planned row by row through JSON (bench P4/P5).
//!
//! Taken only when nothing reads the plan's row values: a merge into main of a world forked from main,
//! whole (no ONLY, RESOLVE, CONFIRM DELETES, TARGET), by a person (no agent) with no merge policy over the
//! world, no declared scope, and a role that may read the delta (the table's owner or a superuser). Any
//! other merge goes the planned way. Merge checks run on the result as applied, as the planned way runs
//! them (governance/checks.rs), for the tables the apply changed. The rows main had are locked
//! first (lock.rs); the keys main lacked then are the ones inserted, so a key main inserts meanwhile fails
//! the merge with 23505, as the planned way's INSERT does, and is never updated over.
use super::*;

/// The merge's tables, if every one of them can be merged fast-forward.
pub(super) fn tables(layouts: &[std::rc::Rc<Layout>], world: &World, req: &MergeRequest) -> bool {
    if req.dry_run
        || req.into.is_some()
        || req.only_tables.is_some()
        || req.only_keys.is_some()
        || !req.resolve.is_empty()
        || req.confirm_deletes.is_some()
        || req.target.is_some()
        || world.parent.unwrap_or(0) != 0
        || layouts.is_empty()
        || layouts.iter().any(|l| l.key_kind == b'r')
    {
        return false;
    }
    // (the test that fails most, first: main's writers touched the table since the fork)
    if layouts.iter().any(|l| main_changed(l, world)) {
        return false;
    }
    // (the judge reads the plan's rows: an agent merging, a policy, a declared scope)
    if crate::governance::judge::needs_rows(world) || world.merged_part {
        return false;
    }
    // (the delta is read as the session's user, who writes main)
    layouts.iter().all(|l| {
        crate::storage::as_session_user(|| unsafe {
            pg_sys::pg_class_aclcheck(l.delta, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode) == pg_sys::AclResult::ACLCHECK_OK
        })
    })
}

/// Applies the world's latest rows of these tables to main: deletes children first, then updates and
/// inserts parents first (as `apply` orders a plan). Returns the rows changed, the rows deleted and the
/// tables it changed.
pub(super) fn apply(layouts: &[std::rc::Rc<Layout>], world: &World, absent: &HashMap<pg_sys::Oid, Vec<String>>) -> (usize, i64, Vec<pg_sys::Oid>) {
    with_merge_source(Some(world.id.clone()), || apply_tables(layouts, world, absent))
}

fn apply_tables(layouts: &[std::rc::Rc<Layout>], world: &World, absent: &HashMap<pg_sys::Oid, Vec<String>>) -> (usize, i64, Vec<pg_sys::Oid>) {
    let mut changed: Vec<pg_sys::Oid> = Vec::new();
    let mut note = |relid: pg_sys::Oid, n: usize| {
        if n > 0 && !changed.contains(&relid) {
            changed.push(relid);
        }
    };
    let depth = fk_depth();
    let mut ordered: Vec<&std::rc::Rc<Layout>> = layouts.iter().collect();
    ordered.sort_by_key(|l| (depth.get(&l.relid).copied().unwrap_or(0), l.relid.to_u32()));
    let none: Vec<String> = Vec::new();
    let (mut applied, mut deletes) = (0usize, 0i64);
    for l in ordered.iter().rev() {
        // (a key main lacked when locked is none of main's rows to delete, even if main has it by now)
        let added = absent.get(&l.relid).unwrap_or(&none);
        let n = run_dml_args(
            &format!(
                "WITH d AS ({}) DELETE FROM {} t USING d WHERE d._w_del AND {} AND NOT ({} = ANY($2::text[]))",
                latest(l),
                l.table_name,
                key_match(&l.key_columns, "t", "d"),
                key_text_expr(&l.key_columns, "d")
            ),
            &[world.num.into(), added.clone().into()],
        );
        note(l.relid, n);
        applied += n;
        deletes += n as i64;
    }
    for l in ordered {
        let cols = table_columns(l.relid, true);
        let set_cols: Vec<&String> = cols.iter().filter(|c| !l.key_columns.contains(c)).collect();
        let col_list = crate::sql_text::column_list(&cols);
        let added = absent.get(&l.relid).unwrap_or(&none);
        let ktext = key_text_expr(&l.key_columns, "d");
        let live = live_columns(l.relid);
        // a row whose version in the world is main's as it stands changes nothing (decide: ours = theirs).
        // The two rows are compared by their values' bytes (record image inequality, `*<>`: no JSON is
        // built per row). Rows with equal bytes have equal JSON texts, which is how the planned way
        // compares them, so no change the planned way would apply is skipped; a row whose bytes differ
        // while its JSON text doesn't (a json value written with other spaces) is applied, and main gets
        // the world's exact value. Only the rows main had when they were locked are updated.
        let update = if set_cols.is_empty() {
            "SELECT 1 WHERE false".to_string()
        } else {
            format!(
                "UPDATE {table} t SET ({}) = ROW({}) FROM d
                  WHERE NOT d._w_del AND {} AND NOT ({ktext} = ANY($2::text[]))
                    AND ROW({})::record *<> ROW({})::record RETURNING 1",
                crate::sql_text::column_list(&set_cols),
                set_cols.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
                key_match(&l.key_columns, "t", "d"),
                live.iter().map(|c| format!("t.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
                live.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
                table = l.table_name,
            )
        };
        // the updates first (a unique value moved from an updated row to a new one), then the inserts:
        // the keys main lacked when they were locked
        let sql = format!(
            "WITH d AS ({latest}), _w_u AS ({update}),
                  _w_i AS (INSERT INTO {table} ({col_list}) OVERRIDING SYSTEM VALUE
                           SELECT {d_cols} FROM d WHERE NOT d._w_del AND {ktext} = ANY($2::text[]) AND (SELECT count(*) FROM _w_u) >= 0 RETURNING 1)
             SELECT (SELECT count(*) FROM _w_u) + (SELECT count(*) FROM _w_i)",
            latest = latest(l),
            table = l.table_name,
            d_cols = cols.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
        );
        let n = crate::storage::as_session_user(|| {
            Spi::connect_mut(|c| {
                c.update(&sql, None, &[world.num.into(), added.clone().into()])
                    .and_then(|t| t.first().get::<i64>(1))
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                    .unwrap_or(0) as usize
            })
        });
        note(l.relid, n);
        applied += n;
    }
    (applied, deletes, changed)
}

/// The world's latest version of each key of the table ($1: the world).
fn latest(l: &Layout) -> String {
    let dk = l.key_columns.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
    format!("SELECT DISTINCT ON ({dk}) * FROM {} d WHERE d._w_world = $1 ORDER BY {dk}, d._w_dseq DESC", l.delta_name)
}
