//! Unique indexes other than the primary key, inside a world: a row's values in each are locked (so two
//! sessions adding one value queue), then checked against what the world sees and against what other
//! writers committed since this backend's view of the world was read (23505, worded as Postgres words it).
use crate::sql_text::quote_ident;
use super::overlay::{with_cache, World};
use super::snapshot_spi::latest;
use super::{as_table_owner, snapshot_spi, world_locks, Layout};
use pgrx::prelude::*;

/// Locks the values a row has in the unique index on `columns` (NULLs clash with nothing: no lock).
pub(super) fn lock_unique_values(layout: &Layout, world: &World, columns: &[String], names: &[String], args: &[pgrx::datum::DatumWithOid]) {
    let Some(owned) = columns
        .iter()
        .map(|c| {
            let a = &args[names.iter().position(|n| n == c)?];
            a.datum().map(|_| unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) })
        })
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    world_locks::lock_key(world, world_locks::unique_id(world.num, layout.tabno, columns, &output_values(&owned)));
}

pub(super) fn primary_key_name(layout: &Layout) -> String {
    crate::spi_calls::get_one_with_args::<String>(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = $1 AND contype = 'p'",
        &[layout.relid.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| "primary key".into())
}

/// Unique constraints other than the primary key hold inside the world: another row the world sees with
/// the same (non-null) values is a 23505.
pub(super) fn check_unique(layout: &Layout, world: &World, names: &[String], args: &[pgrx::datum::DatumWithOid]) {
    // the values first: two sessions adding one value queue, and the second sees the first's row
    for (_, cols) in &layout.uniques {
        lock_unique_values(layout, world, cols, names, args);
    }
    for u in &layout.other_uniques {
        // (an index on expressions or partial: the index itself)
        world_locks::lock_key(world, world_locks::unique_id(world.num, layout.tabno, std::slice::from_ref(&u.name), &[]));
    }
    if let Some((index, cols)) = unique_clash(layout, world, names, args) {
        raise_duplicate(index, cols, names, args);
    }
    for u in &layout.other_uniques {
        other_unique_clash(layout, u, names, args);
    }
}

/// A unique index on expressions, partial, or NULLS NOT DISTINCT: another row the world sees whose index
/// keys equal this row's (both inside the index's WHERE) is a 23505, worded as Postgres words it. The row's
/// values are the query's parameters, named as its columns in a sub-select, so the index's own SQL reads
/// them there and the world's rows in the outer query.
pub(super) fn other_unique_clash(layout: &Layout, u: &super::OtherUnique, names: &[String], args: &[pgrx::datum::DatumWithOid]) {
    let new_row = names.iter().enumerate().map(|(i, n)| format!("${} AS {}", i + 1, quote_ident(n))).collect::<Vec<_>>().join(", ");
    let of_new = |e: &str| format!("(SELECT {e} FROM (SELECT {new_row}) n)");
    let mut conds: Vec<String> = u
        .keys
        .iter()
        .map(|e| if u.nulls_not_distinct { format!("({e}) IS NOT DISTINCT FROM {}", of_new(e)) } else { format!("({e}) = {}", of_new(e)) })
        .collect();
    if let Some(p) = &u.predicate {
        conds.push(format!("coalesce(({p}), false)"));
        conds.push(format!("coalesce({}, false)", of_new(p)));
    }
    let pos = |c: &String| names.iter().position(|n| n == c);
    let same_row: Vec<String> = layout.key_columns.iter().filter_map(|k| pos(k).map(|p| format!("v.{} = ${}", quote_ident(k), p + 1))).collect();
    if !same_row.is_empty() {
        conds.push(format!("NOT ({})", same_row.join(" AND ")));
    }
    let sql = format!("SELECT 1 FROM {} v WHERE {} LIMIT 1", layout.overlay_name, conds.join(" AND "));
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
    // (on a fresh snapshot, as the plain unique check)
    if as_table_owner(layout, || snapshot_spi::query_fresh(&sql, &types, &values, |r| r.get::<i64>(1)).is_empty()) {
        return;
    }
    let shown = format!(
        "SELECT concat_ws(', ', {})",
        u.keys.iter().map(|e| format!("coalesce({}::text, 'null')", of_new(e))).collect::<Vec<_>>().join(", ")
    );
    let values_text = as_table_owner(layout, || snapshot_spi::query_fresh(&shown, &types, &values, |r| r.get::<String>(1))).into_iter().next().flatten();
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{}\"", u.name),
        "pg_worlds",
    )
    .set_detail(format!("Key ({})=({}) already exists.", u.keys.join(", "), values_text.unwrap_or_default()))
    .report(PgLogLevel::ERROR);
}

/// The first unique index (other than the primary key) on which another row the world sees has this
/// row's (non-null) values.
pub(super) fn unique_clash<'l>(layout: &'l Layout, world: &World, names: &[String], args: &[pgrx::datum::DatumWithOid]) -> Option<(&'l String, &'l Vec<String>)> {
    let pos = |c: &String| names.iter().position(|n| n == c);
    let overlay = &layout.overlay_name;
    for (index, cols) in &layout.uniques {
        let Some(positions) = cols.iter().map(pos).collect::<Option<Vec<usize>>>() else { continue };
        if positions.iter().any(|&p| args[p].datum().is_none()) {
            continue; // NULLs are distinct
        }
        let mut conds: Vec<String> = cols.iter().zip(&positions).map(|(c, p)| format!("v.{} = ${}", quote_ident(c), p + 1)).collect();
        if !layout.key_columns.is_empty() {
            let same_row = layout
                .key_columns
                .iter()
                .filter_map(|k| pos(k).map(|p| format!("v.{} = ${}", quote_ident(k), p + 1)))
                .collect::<Vec<_>>()
                .join(" AND ");
            conds.push(format!("NOT ({same_row})"));
        }
        let sql = format!("SELECT 1 FROM {overlay} v WHERE {} LIMIT 1", conds.join(" AND "));
        // on a fresh snapshot, seeing this statement's own earlier rows too (two rows of one INSERT with
        // one value clash, as in Postgres), and what committed since (the world's writers are serialized)
        let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
        let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
        if as_table_owner(layout, || !snapshot_spi::query_fresh_generic(&sql, &types, &values, |r| r.get::<i64>(1)).is_empty()) {
            return Some((index, cols));
        }
        if committed_since_with(layout, world, cols, &positions, names, args) {
            return Some((index, cols));
        }
    }
    None
}

/// Did another writer of the world commit, after this backend's view of the world was read, a row with
/// these values in `cols` under another key (its latest version, not removed)? The overlay reads the world
/// through that view, which doesn't have it yet; the value's lock (taken first) made the check wait for it.
pub(super) fn committed_since_with(layout: &Layout, world: &World, cols: &[String], positions: &[usize], names: &[String], args: &[pgrx::datum::DatumWithOid]) -> bool {
    if layout.key_columns.is_empty() {
        return false;
    }
    let frontier = with_cache(layout.tabno, |c| c.world_frontier.clone());
    if frontier.is_empty() {
        return false;
    }
    let n = args.len();
    let mut conds: Vec<String> = cols.iter().zip(positions).map(|(c, p)| format!("d.{} = ${}", quote_ident(c), p + 1)).collect();
    let pos = |c: &String| names.iter().position(|x| x == c);
    let same_key: Vec<String> = layout.key_columns.iter().filter_map(|k| pos(k).map(|p| format!("d.{} = ${}", quote_ident(k), p + 1))).collect();
    if !same_key.is_empty() {
        conds.push(format!("NOT ({})", same_key.join(" AND ")));
    }
    let later: Vec<String> = layout.key_columns.iter().map(|k| format!("l.{k} = d.{k}", k = quote_ident(k))).collect();
    let sql = format!(
        "SELECT 1 FROM {delta} d WHERE d._w_world = ${w} AND d._w_xid >= pg_snapshot_xmin(${f}::pg_snapshot)
           AND NOT pg_visible_in_snapshot(d._w_xid, ${f}::pg_snapshot) AND NOT d._w_del AND {conds}
           AND NOT EXISTS (SELECT 1 FROM {delta} l WHERE l._w_world = d._w_world AND {later} AND l._w_dseq > d._w_dseq) LIMIT 1",
        delta = layout.delta_name,
        w = n + 1,
        f = n + 2,
        conds = conds.join(" AND "),
        later = later.join(" AND ")
    );
    let mut all: Vec<pgrx::datum::DatumWithOid> = args.iter().map(|a| unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }).collect();
    all.push(world.num.into());
    all.push(frontier.into());
    as_table_owner(layout, || !latest(&sql, &all, |_| ()).is_empty())
}

pub(super) fn raise_duplicate(constraint: &str, cols: &[String], names: &[String], args: &[pgrx::datum::DatumWithOid]) -> ! {
    let detail = duplicate_detail(cols, names, args);
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{constraint}\""),
        "pg_worlds",
    )
    .set_detail(detail)
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Values as Postgres prints them in an error's DETAIL ("null" for NULL).
pub(super) fn output_values(args: &[pgrx::datum::DatumWithOid]) -> Vec<String> {
    args.iter()
        .map(|a| match a.datum() {
            None => "null".to_string(),
            Some(d) => unsafe {
                let mut out_fn = pg_sys::Oid::INVALID;
                let mut varlena = false;
                pg_sys::getTypeOutputInfo(a.oid(), &mut out_fn, &mut varlena);
                let s = pg_sys::OidOutputFunctionCall(out_fn, d.sans_lifetime());
                std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned()
            },
        })
        .collect()
}

/// Postgres's wording of a duplicate key's detail: "Key (id)=(7) already exists."
pub(super) fn duplicate_detail(cols: &[String], names: &[String], args: &[pgrx::datum::DatumWithOid]) -> String {
    let key_args: Vec<pgrx::datum::DatumWithOid> = cols
        .iter()
        .map(|k| {
            let a = &args[names.iter().position(|n| n == k).unwrap()];
            unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }
        })
        .collect();
    let vals = output_values(&key_args);
    format!("Key ({})=({}) already exists.", cols.join(", "), vals.join(", "))
}
