//! Main's tables a world changed the shape of (their twins: storage/world_twins.rs), as DIFF shows them
//! and MERGE brings them.
//!
//! DIFF: one `alter table` row per table (`id` null, `columns` what changed: `+email text`, `-age`,
//! `+constraint ...`, `+index ...`), then the rows the world wrote in it. AS SQL: the world's statements
//! as it ran them, then its rows.
//!
//! MERGE, in its one transaction, after the world's own objects moved and before its other rows:
//! 1. refused first (40001, nothing merged) when main changed the table's columns or constraints since the
//!    world copied it, or changed a row the world changed too since the fork;
//! 2. the world's statements run again on main's table, in order, each as the role that ran it and with
//!    its search_path (Postgres rewrites main's rows: a USING, a default, exactly as the world's were),
//!    less a trailing run of statements that only add constraints or indexes;
//! 3. the rows the world wrote, by key: main's row replaced by the world's, or deleted where the world
//!    deleted it (the app's triggers and history capture run, as for any merge);
//! 4. the trailing constraints and indexes: Postgres checks them against main's rows as they now are
//!    (23505 / 23514 / 23503: nothing merged);
//! 5. the twin dropped.
use super::*;
use crate::sql_text::QuotedName;

#[derive(Clone, Debug)]
pub struct Ddl {
    pub seq: i64,
    pub role: pg_sys::Oid,
    pub path: String,
    pub command: String,
    pub constraint_only: bool,
}

#[derive(Clone, Debug)]
pub struct Twin {
    pub tabno: i32,
    pub relid: pg_sys::Oid,
    pub twin: pg_sys::Oid,
    pub shape: String,
    /// main's table, as DIFF names it (public's unqualified)
    pub shown: String,
    pub main_name: QuotedName,
    pub twin_name: QuotedName,
    pub ddl: Vec<Ddl>,
    /// the world dropped main's table (no twin: `twin` is 0)
    pub dropped: bool,
}

fn fail(e: impl std::fmt::Display) -> ! {
    raise("XX000", format!("pg_worlds: {e}"))
}

/// The twins of `world`, in the order they were made.
pub fn of_world(world: i32) -> Vec<Twin> {
    as_internal(|| {
        let twins: Vec<Twin> = crate::spi_calls::rows(
            "SELECT t.tabno, t.relid, t.twin, t.shape,
                    CASE WHEN n.nspname = 'public' THEN quote_ident(c.relname) ELSE format('%I.%I', n.nspname, c.relname) END,
                    format('%I.%I', n.nspname, c.relname), CASE WHEN t.twin <> 0 THEN t.twin::regclass::text END
             FROM worlds.world_twin t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE t.world = $1 ORDER BY t.made, t.tabno",
            None,
            &[world.into()],
            |t| {
                t.map(|r| Twin {
                    tabno: r.get::<i32>(1).ok().flatten().unwrap_or(0),
                    relid: r.get::<pg_sys::Oid>(2).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    twin: r.get::<pg_sys::Oid>(3).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    shape: r.get::<String>(4).ok().flatten().unwrap_or_default(),
                    shown: r.get::<String>(5).ok().flatten().unwrap_or_default(),
                    main_name: QuotedName::printed(r.get::<String>(6).ok().flatten().unwrap_or_default()),
                    twin_name: QuotedName::printed(r.get::<String>(7).ok().flatten().unwrap_or_default()),
                    ddl: Vec::new(),
                    dropped: r.get::<pg_sys::Oid>(3).ok().flatten().unwrap_or(pg_sys::Oid::INVALID) == pg_sys::Oid::INVALID,
                })
                .collect()
            },
        )
        .unwrap_or_else(|e| fail(e));
        twins
            .into_iter()
            .map(|mut t| {
                t.ddl = crate::spi_calls::rows(
                    "SELECT role, path, command, constraint_only, seq FROM worlds.world_twin_ddl WHERE world = $1 AND tabno = $2 ORDER BY seq",
                    None,
                    &[world.into(), t.tabno.into()],
                    |x| {
                        x.map(|r| Ddl {
                            seq: r.get::<i64>(5).ok().flatten().unwrap_or(0),
                            role: r.get::<pg_sys::Oid>(1).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                            path: r.get::<String>(2).ok().flatten().unwrap_or_default(),
                            command: r.get::<String>(3).ok().flatten().unwrap_or_default(),
                            constraint_only: r.get::<bool>(4).ok().flatten().unwrap_or(false),
                        })
                        .collect()
                    },
                )
                .unwrap_or_else(|e| fail(e));
                t
            })
            .collect()
    })
}

/// Main's tables with twins: their rows are the twins' business, not the row merge's.
pub fn tabnos(twins: &[Twin]) -> Vec<i32> {
    twins.iter().map(|t| t.tabno).collect()
}

/// What changed in the table: its columns (`+email text`, `-age`), constraints and indexes.
pub fn columns(t: &Twin) -> Value {
    if t.dropped {
        return Value::Null;
    }
    as_internal(|| {
        crate::spi_calls::get_one_with_args::<JsonB>(
            "WITH m AS (SELECT attnum, attname::text AS name, format_type(atttypid, atttypmod) AS typ, attisdropped AS gone
                          FROM pg_attribute WHERE attrelid = $1 AND attnum > 0),
                  w AS (SELECT attnum, attname::text AS name, format_type(atttypid, atttypmod) AS typ, attisdropped AS gone
                          FROM pg_attribute WHERE attrelid = $2 AND attnum > 0),
                  mc AS (SELECT conname::text AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1 AND contype <> 'f'),
                  wc AS (SELECT conname::text AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $2 AND contype <> 'f'),
                  mi AS (SELECT c.relname::text AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                          WHERE i.indrelid = $1 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)),
                  wi AS (SELECT c.relname::text AS name, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                          WHERE i.indrelid = $2 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)),
                  x AS (
                    SELECT 1 AS o, m.attnum AS n, '-' || m.name AS e FROM m LEFT JOIN w ON w.attnum = m.attnum
                     WHERE NOT m.gone AND (w.attnum IS NULL OR w.gone OR w.name <> m.name OR w.typ <> m.typ)
                    UNION ALL
                    SELECT 2, w.attnum, '+' || w.name || ' ' || w.typ FROM w LEFT JOIN m ON m.attnum = w.attnum
                     WHERE NOT w.gone AND (m.attnum IS NULL OR m.gone OR m.name <> w.name OR m.typ <> w.typ)
                    UNION ALL
                    SELECT 3, 0, '-constraint ' || mc.name FROM mc WHERE NOT EXISTS (SELECT 1 FROM wc WHERE wc.name = mc.name AND wc.def = mc.def)
                    UNION ALL
                    SELECT 4, 0, '+constraint ' || wc.name || ' ' || wc.def FROM wc WHERE NOT EXISTS (SELECT 1 FROM mc WHERE mc.name = wc.name AND mc.def = wc.def)
                    UNION ALL
                    SELECT 5, 0, '-index ' || mi.name FROM mi WHERE NOT EXISTS (SELECT 1 FROM wi WHERE wi.name = mi.name)
                    UNION ALL
                    SELECT 6, 0, '+index ' || wi.name FROM wi WHERE NOT EXISTS (SELECT 1 FROM mi WHERE mi.name = wi.name))
             SELECT coalesce(jsonb_agg(e ORDER BY o, n, e), '[]') FROM x",
            &[t.relid.into(), t.twin.into()],
        )
        .ok()
        .flatten()
        .map(|j| j.0)
        .unwrap_or(Value::Null)
    })
}

/// The keys of the rows the world wrote in the table (None: every row, '*').
fn world_keys(world: i32, t: &Twin) -> Option<Vec<String>> {
    let keys: Vec<String> = as_internal(|| {
        crate::spi_calls::rows(
            "SELECT key FROM worlds.world_twin_keys WHERE world = $1 AND tabno = $2 ORDER BY key",
            None,
            &[world.into(), t.tabno.into()],
            |x| x.filter_map(|r| r.get::<String>(1).ok().flatten()).collect(),
        )
        .unwrap_or_else(|e| fail(e))
    });
    if keys.iter().any(|k| k == "*") { None } else { Some(keys) }
}

/// The twin's primary key columns now.
fn key_columns(relid: pg_sys::Oid) -> Vec<String> {
    as_internal(|| {
        crate::spi_calls::get_one_with_args::<Vec<String>>("SELECT worlds._primary_key($1::regclass)", &[relid.into()]).ok().flatten().unwrap_or_default()
    })
}

/// The rows the world wrote in the table: (key, main's row as of the fork, the world's row).
fn changed_rows(world: &World, t: &Twin) -> Vec<(String, Option<Value>, Option<Value>)> {
    if t.dropped {
        return Vec::new();
    }
    let keys = key_columns(t.twin);
    if keys.is_empty() {
        return Vec::new();
    }
    let wanted = world_keys(world.num, t);
    let ktext = key_text_expr(&keys, "w");
    let filter = if wanted.is_some() { format!("WHERE {ktext} = ANY ($1)") } else { "WHERE $1::text[] IS NULL".into() };
    let ours: Vec<(String, Value)> = as_internal(|| {
        crate::spi_calls::rows(
            &format!("SELECT {ktext}, to_jsonb(w) FROM {} w {filter} ORDER BY 1", t.twin_name),
            None,
            &[wanted.clone().into()],
            |x| x.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<JsonB>(2).ok()??.0))).collect(),
        )
        .unwrap_or_else(|e| fail(e))
    });
    // main's rows as of the fork, by the same key text (main's key columns; a key the world renamed
    // finds nothing there: shown as an insert)
    let main_keys = crate::storage::relation_layout(t.tabno).key_columns.clone();
    let base_of = Some(world.at_fork(-3_000_000 - world.num));
    let mtext = key_text_expr(&main_keys, "m");
    let mfilter = if wanted.is_some() { format!("WHERE {mtext} = ANY ($1)") } else { "WHERE $1::text[] IS NULL".into() };
    let base: HashMap<String, Value> = as_internal(|| {
        with_world(base_of, || {
            crate::spi_calls::rows(
                &format!("SELECT {mtext}, to_jsonb(m) FROM {} m {mfilter}", t.main_name),
                None,
                &[wanted.clone().into()],
                |x| x.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<JsonB>(2).ok()??.0))).collect(),
            )
            .unwrap_or_else(|e| fail(e))
        })
    });
    let mut out: Vec<(String, Option<Value>, Option<Value>)> = Vec::new();
    let ours_map: HashMap<String, Value> = ours.into_iter().collect();
    let mut all: Vec<String> = match &wanted {
        Some(k) => k.clone(),
        None => ours_map.keys().chain(base.keys()).cloned().collect(),
    };
    all.sort();
    all.dedup();
    for k in all {
        let b = base.get(&k).cloned();
        let o = ours_map.get(&k).cloned();
        if b.is_none() && o.is_none() {
            continue;
        }
        out.push((k, b, o));
    }
    out
}

/// DIFF's rows for the world's twins: each table's `alter table` row, then its rows.
pub fn diff_rows(world: &World, twins: &[Twin], as_sql_out: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for t in twins {
        if as_sql_out {
            out.extend(t.ddl.iter().map(|d| serde_json::json!({ "sql": format!("{};", d.command) })));
        } else {
            out.push(serde_json::json!({
                "table": t.shown, "id": Value::Null, "change": if t.dropped { "drop table" } else { "alter table" },
                "before": Value::Null, "after": Value::Null, "columns": columns(t),
            }));
        }
    }
    for t in twins {
        for (key, before, after) in changed_rows(world, t) {
            if before == after {
                continue;
            }
            if as_sql_out {
                let keys = key_columns(t.twin);
                let sql = as_internal(|| {
                    let del = before.as_ref().map(|_| {
                        crate::spi_calls::get_one_with_args::<String>(
                            "SELECT format('DELETE FROM %s t WHERE %s = %L;', $1, $2, $3)",
                            &[t.main_name.as_str().into(), key_text_expr(&keys, "t").into(), key.as_str().into()],
                        )
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                    });
                    let ins = after.as_ref().map(|a| {
                        crate::spi_calls::get_one_with_args::<String>(
                            "SELECT format('INSERT INTO %s SELECT * FROM jsonb_populate_record(NULL::%s, %L);', $1, $1, $2::text)",
                            &[t.main_name.as_str().into(), a.to_string().into()],
                        )
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                    });
                    [del, ins].into_iter().flatten().collect::<Vec<String>>()
                });
                out.extend(sql.into_iter().map(|s| serde_json::json!({ "sql": s })));
            } else {
                let cols: Vec<Value> = match (&before, &after) {
                    (Some(b), Some(a)) => a
                        .as_object()
                        .map(|m| m.iter().filter(|(k, v)| b.get(*k) != Some(*v)).map(|(k, _)| Value::String(k.clone())).collect())
                        .unwrap_or_default(),
                    (_, Some(r)) | (Some(r), None) => r.as_object().map(|m| m.keys().map(|k| Value::String(k.clone())).collect()).unwrap_or_default(),
                    _ => Vec::new(),
                };
                out.push(serde_json::json!({
                    "table": t.shown, "id": key, "change": change_kind(&before, &after),
                    "before": before, "after": after, "columns": cols,
                }));
            }
        }
    }
    out
}

/// A DRY RUN's rows for the twins: each table's statements, as the merge runs them.
pub fn dry_run_rows(twins: &[Twin]) -> Vec<Value> {
    twins
        .iter()
        .map(|t| {
            serde_json::json!({
                "table": t.shown, "id": Value::Null, "outcome": if t.dropped { "drop table" } else { "alter table" },
                "detail": t.ddl.iter().map(|d| format!("{};", d.command)).collect::<Vec<_>>().join("\n"),
                "base": Value::Null, "ours": Value::Null, "theirs": Value::Null, "result": Value::Null, "postgres": Value::Null,
            })
        })
        .collect()
}

/// Main's tables of the twins, locked for the statements the merge runs on them (ACCESS EXCLUSIVE, in
/// relid order), before the merge holds any other table or row of main: a writer of main waits for the
/// merge or the merge for it, never both. Merges that bring twins take them one at a time (an advisory
/// lock first): each then takes ACCESS SHARE on every tracked table, which two of them holding
/// exclusive locks would wait for crosswise.
pub fn lock(twins: &[Twin]) {
    as_internal(|| {
        crate::spi_calls::run("SELECT pg_advisory_xact_lock(2092149, 0)").unwrap_or_else(|e| fail(e));
    });
    let mut relids: Vec<pg_sys::Oid> = twins.iter().map(|t| t.relid).collect();
    relids.sort_by_key(|r| r.to_u32());
    for r in relids {
        unsafe { pg_sys::LockRelationOid(r, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE) };
    }
}

/// The keys of the rows of main's table of `t` main changed since the world's fork (among `wanted`, if
/// given), less those it changed back (main's row now is its row at the fork).
fn main_changes(world: &World, t: &Twin, wanted: Option<Vec<String>>) -> Vec<String> {
    let layout = crate::storage::relation_layout(t.tabno);
    let snapshot = world.fork_snapshot.clone().unwrap_or_default();
    let after_fork = if snapshot.starts_with('@') {
        "h._w_at > substr($1, 2)::timestamptz"
    } else {
        "h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot)"
    };
    let htext = key_text_expr(&layout.key_columns, "h");
    let changed: Vec<String> = as_internal(|| {
        crate::spi_calls::rows(
            &format!("SELECT DISTINCT {htext} FROM {} h WHERE {after_fork} AND ($2::text[] IS NULL OR {htext} = ANY ($2)) ORDER BY 1", layout.history_name),
            None,
            &[snapshot.clone().into(), wanted.into()],
            |x| x.filter_map(|r| r.get::<String>(1).ok().flatten()).collect(),
        )
        .unwrap_or_else(|e| fail(e))
    });
    if changed.is_empty() {
        return changed;
    }
    let mtext = key_text_expr(&layout.key_columns, "m");
    let read = |w: Option<World>| -> HashMap<String, String> {
        as_internal(|| {
            with_world(w, || {
                crate::spi_calls::rows(
                    &format!("SELECT {mtext}, to_jsonb(m)::text FROM {} m WHERE {mtext} = ANY ($1)", t.main_name),
                    None,
                    &[changed.clone().into()],
                    |x| x.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<String>(2).ok()??))).collect(),
                )
                .unwrap_or_else(|e| fail(e))
            })
        })
    };
    let base = read(Some(world.at_fork(-3_000_000 - world.num)));
    let now = read(None);
    changed.into_iter().filter(|k| base.get(k) != now.get(k)).collect()
}

/// What refuses the merge of the twins (40001 / 0A000), as a reason each; empty when none.
pub fn conflicts(world: &World, twins: &[Twin], into_world: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if into_world && !twins.is_empty() {
        out.push(("0A000".into(), format!("MERGE ... INTO another world of a world that changed main's table {} is not supported yet", twins[0].shown)));
        return out;
    }
    for t in twins {
        let now = as_internal(|| {
            crate::spi_calls::get_one_with_args::<String>("SELECT worlds._table_shape($1)", &[t.relid.into()]).ok().flatten().unwrap_or_default()
        });
        if now != t.shape {
            out.push((
                "40001".into(),
                format!(
                    "table {}: both sides changed its columns or constraints ({} ran {}; main changed the table since)",
                    t.shown,
                    world.name,
                    t.ddl.first().map(|d| d.command.clone()).unwrap_or_default()
                ),
            ));
            continue;
        }
        // rows main changed since the fork that the world changed too (a table the world dropped: every row
        // main changed since the fork would go with it)
        let wanted = if t.dropped { None } else { world_keys(world.num, t) };
        let both = main_changes(world, t, wanted);
        if !both.is_empty() && t.dropped {
            out.push(("40001".into(), format!("table {}: {} dropped it, and main changed its rows since the fork: {}", t.shown, world.name, both.iter().take(10).map(|k| format!("{}/{k}", t.shown)).collect::<Vec<_>>().join(", "))));
            continue;
        }
        if t.dropped {
            continue;
        }
        if !both.is_empty() {
            out.push(("40001".into(), format!("table {}: rows changed on both sides: {}", t.shown, both.iter().take(10).map(|k| format!("{}/{k}", t.shown)).collect::<Vec<_>>().join(", "))));
        }
        // objects of the world that stand on the twin itself (a view over it, a key to it)
        let dependents = as_internal(|| {
            crate::spi_calls::get_one_with_args::<String>(
                "SELECT string_agg(DISTINCT pg_describe_object(d.classid, d.objid, 0), ', ') FROM pg_depend d
                  WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 AND d.deptype = 'n'
                    AND (d.classid = 'pg_rewrite'::regclass AND NOT EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.oid = d.objid AND r.ev_class = $1)
                         OR d.classid = 'pg_constraint'::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.oid = d.objid AND k.conrelid = $1)
                         OR d.classid = 'pg_proc'::regclass)",
                &[t.twin.into()],
            )
            .ok()
            .flatten()
        });
        if let Some(d) = dependents {
            out.push(("0A000".into(), format!("{d} stands on the world's copy of table {} (made before or after the table changed): a merge can't point it at main's table yet", t.shown)));
        }
    }
    out
}

/// Refuses the merge when `conflicts` found something (nothing merged).
pub fn refuse_conflicts(world: &World, found: &[(String, String)]) {
    if let Some((code, _)) = found.first() {
        let all = found.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>().join("; ");
        raise_with(
            code,
            format!("merging {} conflicts: {all}; nothing was merged", world.name),
            None,
            Some(if code == "40001" { "Make the change again in a world forked from main as it is now." } else { "Drop it in the world, or make it in main." }.into()),
        );
    }
}

/// Runs the world's statements on main's tables, brings the rows it wrote there, then drops the twins.
/// Returns how many rows it brought.
pub fn apply(world: &World, twins: &[Twin]) -> usize {
    let mut brought = 0usize;
    for t in twins.iter().filter(|t| !t.dropped) {
        // the statements, less a trailing run that only adds constraints or indexes
        let tail_from = t.ddl.iter().rposition(|d| !d.constraint_only).map(|i| i + 1).unwrap_or(0);
        for d in &t.ddl[..tail_from] {
            run_statement(d);
        }
        unsafe { pg_sys::CommandCounterIncrement() };
        brought += bring_rows(world, t);
        for d in &t.ddl[tail_from..] {
            run_statement(d);
        }
        as_internal(|| {
            crate::spi_calls::run_with_args("DELETE FROM worlds.world_fk WHERE world = $1 AND relid = $2", &[world.num.into(), t.twin.into()])
                .unwrap_or_else(|e| fail(e));
            crate::spi_calls::run(&format!("DROP TABLE {}", t.twin_name)).unwrap_or_else(|e| fail(e));
            forget(world.num, t.tabno);
        });
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(t.relid) };
    }
    brought
}

/// Main's tables the world dropped: dropped in main (before the world's own objects move in, one of
/// which may take the name).
pub fn apply_drops(world: &World, twins: &[Twin]) {
    // (in the order the world dropped them: a table whose key stood on another went first)
    let mut dropped: Vec<&Twin> = twins.iter().filter(|t| t.dropped).collect();
    dropped.sort_by_key(|t| t.ddl.last().map(|d| d.seq).unwrap_or(0));
    for t in dropped {
        for d in &t.ddl {
            run_statement(d);
        }
        as_internal(|| {
            forget(world.num, t.tabno);
        });
    }
}

/// The registry's rows of one copy (merged, or its table dropped in main).
fn forget(world: i32, tabno: i32) {
    for sql in [
        "DELETE FROM worlds.world_twin WHERE world = $1 AND tabno = $2",
        "DELETE FROM worlds.world_twin_ddl WHERE world = $1 AND tabno = $2",
        "DELETE FROM worlds.world_twin_keys WHERE world = $1 AND tabno = $2",
    ] {
        crate::spi_calls::run_with_args(sql, &[world.into(), tabno.into()]).unwrap_or_else(|e| fail(e));
    }
}

fn run_statement(d: &Ddl) {
    let path = std::ffi::CString::new(d.path.as_str()).unwrap_or_default();
    crate::storage::as_role_in_main(d.role, &path, || {
        crate::spi_calls::run(&d.command).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: running the world's statement on main's table ({}): {e}", d.command)))
    });
}

/// The world's rows of the table, into main's: replaced by key, or deleted where the world deleted them.
fn bring_rows(world: &World, t: &Twin) -> usize {
    let keys = key_columns(t.twin);
    if keys.is_empty() {
        raise("0A000", format!("merging {}: table {} has no primary key in the world: its rows can't be matched with main's", world.name, t.shown));
    }
    let wanted = world_keys(world.num, t);
    if wanted.as_ref().is_some_and(|k| k.is_empty()) {
        return 0;
    }
    let cols = insertable_columns(t.relid);
    let list = crate::sql_text::column_list(&cols);
    let ktext_w = key_text_expr(&keys, "w");
    let ktext_t = key_text_expr(&keys, "t");
    let kmatch = key_match(&keys, "w", "t");
    let klist = crate::sql_text::column_list(&keys);
    let set: Vec<String> = cols.iter().filter(|c| !keys.contains(c)).map(|c| format!("{q} = EXCLUDED.{q}", q = quote_ident(c))).collect();
    let action = if set.is_empty() { format!("({klist}) DO NOTHING") } else { format!("({klist}) DO UPDATE SET {}", set.join(", ")) };
    let (wf, tf) = if wanted.is_some() { (format!("{ktext_w} = ANY ($1)"), format!("{ktext_t} = ANY ($1)")) } else { ("true".into(), "$1::text[] IS NULL".into()) };
    let main = &t.main_name;
    let twin = &t.twin_name;
    let delete = format!("DELETE FROM {main} t WHERE {tf} AND NOT EXISTS (SELECT 1 FROM {twin} w WHERE {kmatch})");
    let upsert = format!(
        "INSERT INTO {main} AS t ({list}) OVERRIDING SYSTEM VALUE SELECT {list} FROM {twin} w WHERE {wf} AND ($1::text[] IS NOT NULL OR true)
         ON CONFLICT {action}"
    );
    as_internal(|| {
        crate::storage::as_session_user(|| {
            crate::spi_calls::run_with_args(&delete, &[wanted.clone().into()]).unwrap_or_else(|e| fail(e));
            crate::spi_calls::run_with_args(&upsert, &[wanted.clone().into()]).unwrap_or_else(|e| fail(e));
        });
        // (the rows it brought: those it has, and those it deleted)
        let n = crate::spi_calls::get_one_with_args::<i64>(
            &format!("SELECT count(*) FROM {twin} w WHERE {wf} AND ($1::text[] IS NOT NULL OR true)"),
            &[wanted.clone().into()],
        )
        .ok()
        .flatten()
        .unwrap_or(0);
        n as usize + wanted.as_ref().map(|k| k.len().saturating_sub(n as usize)).unwrap_or(0)
    })
}

/// Main's view or functions of one name a world replaced (CREATE OR REPLACE): the world's version is its
/// own object, found first by its names; the merge runs the world's statement on main.
#[derive(Clone, Debug)]
pub struct Replaced {
    /// view, function
    pub kind: String,
    pub schema: String,
    pub name: String,
    pub main_def: String,
    pub ddl: Ddl,
    /// the world's namespace of the schema
    pub nsp: String,
}

impl Replaced {
    pub fn shown(&self) -> String {
        if self.schema == "public" { self.name.clone() } else { format!("{}.{}", self.schema, self.name) }
    }
    pub fn change(&self) -> &'static str {
        if self.kind == "view" { "alter view" } else { "replace function" }
    }
}

/// What `world` replaced of main's, in the order it did.
pub fn replaced_of(world: i32) -> Vec<Replaced> {
    as_internal(|| {
        crate::spi_calls::rows(
            "SELECT kind, schema::text, name::text, main_def, role, path, command, seq FROM worlds.world_replaced WHERE world = $1 ORDER BY seq",
            None,
            &[world.into()],
            |t| {
                t.map(|r| {
                    let schema = r.get::<String>(2).ok().flatten().unwrap_or_default();
                    Replaced {
                        kind: r.get::<String>(1).ok().flatten().unwrap_or_default(),
                        nsp: crate::storage::search_path::world_namespace(&schema, world),
                        schema,
                        name: r.get::<String>(3).ok().flatten().unwrap_or_default(),
                        main_def: r.get::<String>(4).ok().flatten().unwrap_or_default(),
                        ddl: Ddl {
                            seq: r.get::<i64>(8).ok().flatten().unwrap_or(0),
                            role: r.get::<pg_sys::Oid>(5).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                            path: r.get::<String>(6).ok().flatten().unwrap_or_default(),
                            command: r.get::<String>(7).ok().flatten().unwrap_or_default(),
                            constraint_only: false,
                        },
                    }
                })
                .collect()
            },
        )
        .unwrap_or_else(|e| fail(e))
    })
}

/// Does the world still have its version (it may have dropped it since)?
fn still_there(r: &Replaced) -> bool {
    as_internal(|| {
        let sql = if r.kind == "view" {
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2)"
        } else {
            "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2)"
        };
        crate::spi_calls::get_one_with_args::<bool>(sql, &[r.nsp.as_str().into(), r.name.as_str().into()]).ok().flatten().unwrap_or(false)
    })
}

/// DIFF's rows for what the world replaced: `alter view` / `replace function` (`id` null); AS SQL, the
/// world's statement.
pub fn replaced_diff_rows(replaced: &[Replaced], as_sql_out: bool) -> Vec<Value> {
    replaced
        .iter()
        .filter(|r| still_there(r))
        .map(|r| {
            if as_sql_out {
                serde_json::json!({ "sql": format!("{};", r.ddl.command) })
            } else {
                serde_json::json!({
                    "table": r.shown(), "id": Value::Null, "change": r.change(),
                    "before": Value::Null, "after": Value::Null, "columns": Value::Null,
                })
            }
        })
        .collect()
}

pub fn replaced_dry_run_rows(replaced: &[Replaced]) -> Vec<Value> {
    replaced
        .iter()
        .filter(|r| still_there(r))
        .map(|r| {
            serde_json::json!({
                "table": r.shown(), "id": Value::Null, "outcome": r.change(), "detail": format!("{};", r.ddl.command),
                "base": Value::Null, "ours": Value::Null, "theirs": Value::Null, "result": Value::Null, "postgres": Value::Null,
            })
        })
        .collect()
}

/// 40001 when main changed the view or function since the world replaced it.
pub fn replaced_conflicts(world: &World, replaced: &[Replaced]) -> Vec<(String, String)> {
    replaced
        .iter()
        .filter(|r| still_there(r))
        .filter(|r| {
            let now = as_internal(|| {
                crate::spi_calls::get_one_with_args::<String>(
                    "SELECT coalesce(worlds._main_definition($1, $2, $3), '')",
                    &[r.kind.as_str().into(), r.schema.as_str().into(), r.name.as_str().into()],
                )
                .ok()
                .flatten()
                .unwrap_or_default()
            });
            now != r.main_def
        })
        .map(|r| ("40001".to_string(), format!("{} {}: both sides changed it ({} ran {}; main changed it since)", r.kind, r.shown(), world.name, r.ddl.command)))
        .collect()
}

/// Runs the world's statements on main's views and functions, then drops the world's versions.
pub fn apply_replaced(world: &World, replaced: &[Replaced]) {
    for r in replaced {
        if still_there(r) {
            run_statement(&r.ddl);
        }
        as_internal(|| {
            let drops: Vec<String> = crate::spi_calls::rows(
                if r.kind == "view" {
                    "SELECT format('DROP VIEW %I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2"
                } else {
                    "SELECT format('DROP ROUTINE %s', p.oid::regprocedure) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2"
                },
                None,
                &[r.nsp.as_str().into(), r.name.as_str().into()],
                |t| t.filter_map(|x| x.get::<String>(1).ok().flatten()).collect(),
            )
            .unwrap_or_else(|e| fail(e));
            for d in drops {
                crate::spi_calls::run(&d).unwrap_or_else(|e| fail(e));
            }
            crate::spi_calls::run_with_args(
                "DELETE FROM worlds.world_replaced WHERE world = $1 AND kind = $2 AND schema = $3 AND name = $4",
                &[world.num.into(), r.kind.as_str().into(), r.schema.as_str().into(), r.name.as_str().into()],
            )
            .unwrap_or_else(|e| fail(e));
        });
    }
}

/// Which of a world's statements change the rows of its copy of main's table (ALTER TABLE, a column's
/// rename): Some(true) replay it on main's rows the rebase takes in, Some(false) leave it (an index, a
/// comment, a grant, a trigger, constraints: they don't change a row), None it names main's table with
/// its schema (it can't be pointed at the rows taken in).
fn changes_rows(command: &str) -> Option<bool> {
    let c = std::ffi::CString::new(command).unwrap_or_default();
    unsafe {
        let list = pg_sys::raw_parser(c.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if list.is_null() || (*list).length != 1 {
            return None;
        }
        let raw = crate::fast_ffi::list_nth(list, 0) as *mut pg_sys::RawStmt;
        let stmt = (*raw).stmt;
        let (rv, rows) = match (*stmt).type_ {
            pg_sys::NodeTag::T_AlterTableStmt => {
                let a = stmt as *mut pg_sys::AlterTableStmt;
                let cmds = (*a).cmds;
                let only_constraints = (0..if cmds.is_null() { 0 } else { (*cmds).length }).all(|i| {
                    use pg_sys::AlterTableType as A;
                    let cmd = crate::fast_ffi::list_nth(cmds, i) as *mut pg_sys::AlterTableCmd;
                    matches!(
                        (*cmd).subtype,
                        A::AT_AddConstraint | A::AT_AddIndex | A::AT_AddIndexConstraint | A::AT_SetNotNull | A::AT_ValidateConstraint
                            | A::AT_DropConstraint | A::AT_DropNotNull | A::AT_SetStatistics | A::AT_SetStorage | A::AT_SetOptions
                            | A::AT_ResetOptions | A::AT_EnableTrig | A::AT_DisableTrig | A::AT_EnableTrigAll | A::AT_DisableTrigAll
                            | A::AT_EnableTrigUser | A::AT_DisableTrigUser | A::AT_ClusterOn | A::AT_DropCluster
                    )
                });
                ((*a).relation, !only_constraints)
            }
            pg_sys::NodeTag::T_RenameStmt if (*(stmt as *mut pg_sys::RenameStmt)).renameType == pg_sys::ObjectType::OBJECT_COLUMN => {
                ((*(stmt as *mut pg_sys::RenameStmt)).relation, true)
            }
            _ => return Some(false),
        };
        if !rows {
            return Some(false);
        }
        if rv.is_null() || !(*rv).schemaname.is_null() {
            return None;
        }
        Some(true)
    }
}

/// REBASE of a world of main with copies of main's tables: each copy takes in the rows main changed since
/// the fork that the world didn't (main's rows now, run through the world's statements that change rows:
/// a column added gets its default, a USING converts, as the world's own rows did), before the fork point
/// moves. 40001 when main changed the table's columns, or a row the world changed too; a table the world
/// dropped takes in nothing (40001 when main changed its rows). Returns the rows taken in.
pub fn rebase(world: &World, twins: &[Twin]) -> i64 {
    // (what refuses a merge of the copies refuses their rebase: both sides changed a table or a row; what
    // stands on a copy doesn't matter here)
    let found: Vec<String> = conflicts(world, twins, false).into_iter().filter(|(code, _)| code == "40001").map(|(_, m)| m).collect();
    if !found.is_empty() {
        raise_with(
            "40001",
            format!("rebasing {} conflicts: {}; nothing was changed", world.name, found.join("; ")),
            None,
            Some("Merge what the world has, or make the change again in a world forked from main as it is now.".into()),
        );
    }
    let mut taken = 0i64;
    for t in twins.iter().filter(|t| !t.dropped) {
        let take = main_changes(world, t, None);
        if take.is_empty() {
            continue;
        }
        let replay: Vec<&Ddl> = t
            .ddl
            .iter()
            .filter(|d| match changes_rows(&d.command) {
                Some(r) => r,
                None => raise(
                    "0A000",
                    format!("rebasing {}: its statement on table {} names the table with its schema ({}), so main's rows can't be run through it; nothing was changed", world.name, t.shown, d.command),
                ),
            })
            .collect();
        let relname = unsafe {
            let n = pg_sys::get_rel_name(t.relid);
            if n.is_null() { String::new() } else { std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned() }
        };
        let temp = QuotedName::qualified("pg_temp", &relname);
        let owner = t.ddl.first().map(|d| d.role).unwrap_or(pg_sys::Oid::INVALID);
        let path = t.ddl.first().map(|d| d.path.clone()).unwrap_or_default();
        let layout = crate::storage::relation_layout(t.tabno);
        let mtext = key_text_expr(&layout.key_columns, "m");
        // main's rows now, in a temporary table of the table's name (first on the path), run through the
        // world's statements, each as the role that ran it
        let with_temp = |p: &str| std::ffi::CString::new(format!("pg_temp, {p}")).unwrap_or_default();
        crate::storage::as_role_in_main(owner, &with_temp(&path), || {
            crate::spi_calls::run(&format!("CREATE TEMPORARY TABLE {temp} (LIKE {} INCLUDING DEFAULTS)", t.main_name)).unwrap_or_else(|e| fail(e));
            crate::spi_calls::run_with_args(&format!("INSERT INTO {temp} SELECT m.* FROM {} m WHERE {mtext} = ANY ($1)", t.main_name), &[take.clone().into()])
                .unwrap_or_else(|e| fail(e));
        });
        for d in &replay {
            crate::storage::as_role_in_main(d.role, &with_temp(&d.path), || {
                crate::spi_calls::run(&d.command).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: rebasing {}: running {} on main's rows: {e}", world.name, d.command)));
            });
        }
        // into the copy, without its triggers (main's rows, not the world's writes)
        let keys = key_columns(t.twin);
        let wtext = key_text_expr(&keys, "w");
        let cols = insertable_columns(t.twin);
        let list = crate::sql_text::column_list(&cols);
        as_internal(|| {
            let level = crate::storage::push_setting(c"session_replication_role", c"replica");
            crate::spi_calls::run_with_args(&format!("DELETE FROM {} w WHERE {wtext} = ANY ($1)", t.twin_name), &[take.clone().into()]).unwrap_or_else(|e| fail(e));
            crate::spi_calls::run(&format!("INSERT INTO {} ({list}) OVERRIDING SYSTEM VALUE SELECT {list} FROM {temp}", t.twin_name)).unwrap_or_else(|e| fail(e));
            crate::storage::pop_setting(level);
            crate::spi_calls::run(&format!("DROP TABLE {temp}")).unwrap_or_else(|e| fail(e));
        });
        taken += take.len() as i64;
    }
    taken
}
