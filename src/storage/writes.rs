//! Writes in a world: the INSTEAD OF trigger of every overlay view (and of its conflict twin, for
//! INSERT ... ON CONFLICT). A write is a new version of the row in the table's delta, checked as the
//! table would check it (NOT NULL, keys, unique, CHECK), serialized per world, and reflected in this
//! backend's overlay cache at once.
use crate::sql_text::quote_ident;
use super::snapshot_spi::{kept, latest};
use super::overlay::{key_expr, read_key_of, session_world, with_cache, World, CACHES};
use super::{app_triggers, snapshot_spi, world_locks};
use super::unique_checks::{check_unique, lock_unique_values, output_values, primary_key_name, raise_duplicate, unique_clash};
use super::write_events::bump_version;
use super::{as_internal, as_table_owner, relation_layout, Layout};
use crate::api::raise;
use pgrx::prelude::*;

// ---- writes in a world: the INSTEAD OF trigger of every overlay view ----

#[pg_trigger]
fn _overlay_write<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, pgrx::AllocatedByPostgres>>, pgrx::PgTriggerError> {
    let td = trigger.trigger_data();
    let tg = unsafe { &*td.tg_trigger };
    let tabno: i32 = unsafe { std::ffi::CStr::from_ptr(*tg.tgargs) }.to_str().unwrap_or("0").parse().unwrap_or(0);
    // the conflict twin of the view (INSERT ... ON CONFLICT), or the rows twin of a table without a key
    let twin = if tg.tgnargs > 1 { unsafe { std::ffi::CStr::from_ptr(*tg.tgargs.add(1)) }.to_bytes() } else { b"" };
    let on_conflict_nothing = twin == b"nothing";
    let layout = relation_layout(tabno);
    if let Some(why) = &layout.unsupported {
        raise("0A000", why.clone());
    }
    let Some(world) = session_world() else {
        // (or the statement was planned for a world another session dropped since: the session carries on
        // from the world's parent, and the statement must run again)
        crate::api::raise_with(
            "0A000",
            "the overlay views of pg_worlds are written only from inside a world",
            None,
            Some("If the session's world was just dropped, the session now works in its parent: run the statement again.".into()),
        );
    };
    if world.read_only {
        raise("25006", format!("{} is a moment of the past: it can be read, not written", world.name));
    }
    let event = td.tg_event & pg_sys::TRIGGER_EVENT_OPMASK;
    let view_desc = unsafe { (*td.tg_relation).rd_att };
    let old = td.tg_trigtuple;
    let new = td.tg_newtuple;
    // the app's BEFORE ROW triggers on the table shape the session's rows (not pg_worlds' own writes:
    // a merge into a world, a restore, an undo write rows as they were)
    let fire = |e: app_triggers::Event, old: pg_sys::HeapTuple, new: pg_sys::HeapTuple| -> Option<pg_sys::HeapTuple> {
        if super::internal() || !app_triggers::any(layout.relid, e) {
            return Some(if e == app_triggers::Event::Delete { old } else { new });
        }
        unsafe { app_triggers::fire_before(layout.relid, e, view_desc, old, new) }
    };
    match event {
        pg_sys::TRIGGER_EVENT_INSERT => {
            if on_conflict_nothing {
                if let Some(action) = unsafe { upsert_action(view_desc, old) } {
                    // as in Postgres: BEFORE INSERT triggers on the proposed row, and BEFORE UPDATE ones on
                    // the row DO UPDATE makes
                    let Some(proposed) = fire(app_triggers::Event::Insert, std::ptr::null_mut(), old) else { return Ok(None) };
                    let fire_update = |existing, new| fire(app_triggers::Event::Update, existing, new);
                    return Ok(upsert(&layout, &world, view_desc, proposed, &action, &fire_update)
                        .map(|t| unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(view_desc), t) }));
                }
            }
            // (for an INSERT, Postgres hands the new row over as the trigger tuple)
            let Some(row) = fire(app_triggers::Event::Insert, std::ptr::null_mut(), old) else { return Ok(None) };
            let fired = row != old;
            let old = row;
            check_not_null(&layout, view_desc, old);
            // DO NOTHING skips a row that conflicts on the primary key or on any other unique index
            // (Postgres skips only conflicts on the named target and raises on others)
            if on_conflict_nothing && (key_exists(&layout, view_desc, old) || {
                let (names, args) = row_args(view_desc, old);
                unique_clash(&layout, &world, &names, &args).is_some()
                    // a row this same statement inserted before (the statement's snapshot doesn't see it;
                    // Postgres's conflict check does)
                    || (layout.key_kind != b'r' && serialize_key(&layout, &world, &names, &args).1.is_some_and(|(_, del, _)| !del))
            }) {
                return Ok(None);
            }
            let written = write_version(&layout, &world, view_desc, old, false, KeyCheck::New);
            bump_version(&world);
            Ok(returned(trigger, &layout, view_desc, old, &written, fired))
        }
        pg_sys::TRIGGER_EVENT_UPDATE => {
            let Some(row) = fire(app_triggers::Event::Update, old, new) else { return Ok(None) };
            let fired = row != new;
            let new = row;
            if layout.key_kind == b'r' {
                // a table without a key: the row's physical identity goes, a new row comes
                let Some(identity) = (unsafe { row_identity(view_desc, old) }) else { raise_no_key(&layout) };
                check_not_null(&layout, view_desc, new);
                remove_keyless_row(&layout, &world, view_desc, old, identity);
                let written = write_version(&layout, &world, view_desc, new, false, KeyCheck::New);
                bump_version(&world);
                return Ok(returned(trigger, &layout, view_desc, new, &written, fired));
            }
            check_not_null(&layout, view_desc, new);
            let changed = unsafe { key_differs(&layout, view_desc, old, new) };
            if changed {
                write_version(&layout, &world, view_desc, old, true, KeyCheck::Unchanged);
            }
            let written = write_version(&layout, &world, view_desc, new, false, if changed { KeyCheck::New } else { KeyCheck::Unchanged });
            bump_version(&world);
            Ok(returned(trigger, &layout, view_desc, new, &written, fired))
        }
        pg_sys::TRIGGER_EVENT_DELETE => {
            if fire(app_triggers::Event::Delete, old, std::ptr::null_mut()).is_none() {
                return Ok(None);
            }
            if layout.key_kind == b'r' {
                let Some(identity) = (unsafe { row_identity(view_desc, old) }) else { raise_no_key(&layout) };
                remove_keyless_row(&layout, &world, view_desc, old, identity);
                bump_version(&world);
                return Ok(trigger.old());
            }
            write_version(&layout, &world, view_desc, old, true, KeyCheck::Unchanged);
            bump_version(&world);
            Ok(trigger.old())
        }
        _ => Ok(None),
    }
}

/// The DO UPDATE action a row for the conflict twin carries (None for ON CONFLICT DO NOTHING).
unsafe fn upsert_action(desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> Option<String> {
    unsafe {
        let natts = (*desc).natts;
        let att = &*(*desc).attrs.as_ptr().add(natts as usize - 1);
        if std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_bytes() != super::upsert_wire::ACTION_COLUMN.as_bytes() {
            return None;
        }
        let mut isnull = false;
        let d = pg_sys::heap_getattr(tuple, natts, desc, &mut isnull);
        String::from_datum(d, isnull)
    }
}

/// INSERT ... ON CONFLICT DO UPDATE of one proposed row: the new row when the world has no row with its
/// key, otherwise the updated row (when DO UPDATE's WHERE holds). Returns what RETURNING shows, or None
/// when nothing was written.
/// INSERT ... ON CONFLICT DO UPDATE of one proposed row (BEFORE INSERT triggers already fired on it):
/// an insert, or the DO UPDATE of the world's row (after the BEFORE UPDATE triggers, `fire_update`).
fn upsert(
    layout: &Layout,
    world: &World,
    desc: pg_sys::TupleDesc,
    proposed: pg_sys::HeapTuple,
    action: &str,
    fire_update: &dyn Fn(pg_sys::HeapTuple, pg_sys::HeapTuple) -> Option<pg_sys::HeapTuple>,
) -> Option<pg_sys::HeapTuple> {
    // the statement's command id: versions this statement writes come at or after it
    let statement_cid = unsafe { (*crate::fast_ffi::GetActiveSnapshot()).curcid };
    let (names, args) = row_args(desc, proposed);
    let Some(action) = super::upsert_wire::decode(action) else {
        raise("XX000", "pg_worlds: a malformed ON CONFLICT action reached the trigger");
    };
    // the statement's own parameters come first ($n in the action is the statement's $n), the proposed row after
    let user = statement_params(&action.param_types, action.param_values.as_deref());
    let excluded: Vec<String> =
        names.iter().enumerate().map(|(i, n)| format!("${} AS {}", user.len() + i + 1, quote_ident(n))).collect();
    // the conflict target: the primary key, or the unique index ON CONFLICT names
    let matches: Vec<String> = action
        .match_attnos
        .iter()
        .map(|&a| {
            let att = unsafe { &*(*desc).attrs.as_ptr().add(a as usize - 1) };
            let k = quote_ident(&unsafe { std::ffi::CStr::from_ptr(att.attname.data.as_ptr()) }.to_string_lossy());
            format!("{a}.{k} = excluded.{k}", a = super::upsert_wire::TARGET_ALIAS)
        })
        .collect();
    let sql = format!("{}, (SELECT {}) AS excluded WHERE {}", action.sql, excluded.join(", "), matches.join(" AND "));
    with_cache(layout.tabno, |_| ());
    let types: Vec<pg_sys::Oid> = user.iter().map(|u| u.0).chain(args.iter().map(|a| a.oid())).collect();
    let values: Vec<Option<pg_sys::Datum>> = user.iter().map(|u| u.1).chain(args.iter().map(|a| a.datum().map(|d| d.sans_lifetime()))).collect();
    let upper = unsafe { pg_sys::CurrentMemoryContext };
    let natts = unsafe { (*desc).natts } as usize;
    // As Postgres does under READ COMMITTED: the conflicting row is read as it is now, under the world's
    // write lock, so concurrent upserts of one key queue instead of failing. Under REPEATABLE READ the
    // statement's snapshot is read and a row changed since fails with 40001.
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    if read_committed {
        lock_conflict_target(layout, world, desc, proposed, &action.match_attnos);
    }
    let read = if read_committed { snapshot_spi::query_fresh } else { snapshot_spi::query };
    let check = if read_committed { KeyCheck::Locked } else { KeyCheck::Unchanged };
    // the action's columns: the updated row's live columns, the WHERE's verdict, the row as the world has it
    let live: Vec<usize> = (0..natts)
        .filter(|&i| unsafe {
            let att = &*(*desc).attrs.as_ptr().add(i);
            let name = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy();
            !(att.attisdropped || name.starts_with("........pg.dropped.") || (i + 1 == natts && name == super::upsert_wire::ACTION_COLUMN))
        })
        .collect();
    // run as the session (routed, with its rights): the action reads the world's row of the real table
    let found: Vec<(Option<pg_sys::HeapTuple>, pg_sys::HeapTuple)> = read(&sql, &types, &values, &mut |row: &snapshot_spi::Row| unsafe {
        let form = |first: usize| {
            let mut datums = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![true; natts];
            for (k, &i) in live.iter().enumerate() {
                if let Some(d) = row.raw(first + k) {
                    datums[i] = d;
                    nulls[i] = false;
                }
            }
            let old = pg_sys::MemoryContextSwitchTo(upper);
            let t = pg_sys::heap_form_tuple(desc, datums.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::MemoryContextSwitchTo(old);
            t
        };
        let existing = form(live.len() + 2);
        // DO UPDATE ... WHERE said no: nothing to write
        let new = (row.get::<bool>(live.len() + 1) == Some(true)).then(|| form(1));
        (new, existing)
    });
    let Some((new, existing)) = found.into_iter().next() else {
        // the world has no row with this key: an ordinary insert
        check_not_null(layout, desc, proposed);
        let written = write_version(layout, world, desc, proposed, false, KeyCheck::New);
        bump_version(world);
        return Some(with_generated(layout, desc, proposed, &written));
    };
    // the conflicting row was written by this very statement (two proposed rows, one key): Postgres's 21000
    let (existing_names, existing_args) = row_args(desc, existing);
    if written_by_this_statement(layout, world, &existing_names, &existing_args, statement_cid) {
        crate::api::raise_with(
            "21000",
            "ON CONFLICT DO UPDATE command cannot affect row a second time",
            None,
            Some("Ensure that no rows proposed for insertion within the same command have duplicate constrained values.".into()),
        );
    }
    let new = fire_update(existing, new?)?;
    check_not_null(layout, desc, new);
    let changed = unsafe { key_differs(layout, desc, existing, new) };
    if changed {
        write_version(layout, world, desc, existing, true, check);
    }
    let written = write_version(layout, world, desc, new, false, if changed { KeyCheck::New } else { check });
    bump_version(world);
    Some(with_generated(layout, desc, new, &written))
}

/// The statement's parameters an upsert's action uses, back from text with their types' input functions
/// (an unused one: a NULL text).
fn statement_params(types: &[pg_sys::Oid], values: Option<&str>) -> Vec<(pg_sys::Oid, Option<pg_sys::Datum>)> {
    let Some(values) = values else { return Vec::new() };
    // the text[] literal, through array_in (no query)
    let texts: Vec<Option<String>> = unsafe {
        let mut input = pg_sys::Oid::INVALID;
        let mut ioparam = pg_sys::Oid::INVALID;
        pg_sys::getTypeInputInfo(pg_sys::TEXTARRAYOID, &mut input, &mut ioparam);
        let c = std::ffi::CString::new(values).unwrap_or_default();
        let array = pg_sys::OidInputFunctionCall(input, c.as_ptr() as *mut std::ffi::c_char, ioparam, -1);
        Vec::<Option<String>>::from_datum(array, false).unwrap_or_default()
    };
    types
        .iter()
        .enumerate()
        .map(|(i, &ty)| {
            if ty == pg_sys::Oid::INVALID {
                return (pg_sys::TEXTOID, None);
            }
            let datum = texts.get(i).cloned().flatten().map(|t| unsafe {
                let mut input = pg_sys::Oid::INVALID;
                let mut ioparam = pg_sys::Oid::INVALID;
                pg_sys::getTypeInputInfo(ty, &mut input, &mut ioparam);
                let c = std::ffi::CString::new(t).unwrap_or_default();
                pg_sys::OidInputFunctionCall(input, c.as_ptr() as *mut std::ffi::c_char, ioparam, -1)
            });
            (ty, datum)
        })
        .collect()
}

/// Did this very statement write a version of the key in the world (this transaction, at or after the
/// statement's command id)?
fn written_by_this_statement(
    layout: &Layout,
    world: &World,
    names: &[String],
    args: &[pgrx::datum::DatumWithOid],
    statement_cid: pg_sys::CommandId,
) -> bool {
    let conds: Vec<String> = layout
        .key_columns
        .iter()
        .map(|k| format!("d.{} = ${}", quote_ident(k), names.iter().position(|n| n == k).unwrap() + 3))
        .collect();
    let sql = format!(
        "SELECT 1 FROM {} d WHERE d._w_world = $1 AND {} AND d._w_xid = pg_current_xact_id_if_assigned()
           AND d.cmin::text::int8 >= $2 LIMIT 1",
        layout.delta_name,
        conds.join(" AND ")
    );
    let mut all: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into(), (statement_cid as i64).into()];
    all.extend(args.iter().map(|a| unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }));
    as_table_owner(layout, || !kept(&sql, &all, |_| ()).is_empty())
}

/// What an INSERT or UPDATE through the overlay returns: the new row, with generated columns computed.
fn returned<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
    layout: &Layout,
    desc: pg_sys::TupleDesc,
    tuple: pg_sys::HeapTuple,
    written: &Written,
    fired: bool,
) -> Option<PgHeapTuple<'a, pgrx::AllocatedByPostgres>> {
    if layout.generated.is_empty() && !fired {
        return trigger.new();
    }
    // the row as the app's triggers left it, with its generated columns
    let t = if layout.generated.is_empty() { tuple } else { with_generated(layout, desc, tuple, written) };
    Some(unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(desc), t) })
}

/// Which physical row a row of a keyless table's rows twin is: (source branch, tid of main's row for a
/// base row or before-image, the delta's dseq for a row the world added).
struct RowIdentity {
    src: i32,
    tid: pg_sys::Datum,
    seq: i64,
}

unsafe fn row_identity(desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> Option<RowIdentity> {
    unsafe {
        let natts = (*desc).natts;
        let name_at = |n: i32| std::ffi::CStr::from_ptr((*(*desc).attrs.as_ptr().add(n as usize - 1)).attname.data.as_ptr()).to_bytes();
        if natts < 3 || name_at(natts - 2) != b"_w_src" || name_at(natts - 1) != b"_w_tid" || name_at(natts) != b"_w_seq" {
            return None;
        }
        let get = |n: i32| {
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, n, desc, &mut isnull);
            (!isnull).then_some(d)
        };
        Some(RowIdentity {
            src: get(natts - 2)?.value() as i32,
            tid: get(natts - 1).unwrap_or(pg_sys::Datum::from(0usize)),
            seq: get(natts).map(|d| d.value() as i64).unwrap_or(0),
        })
    }
}

/// A tombstone for one physical row of a table without a key: main's row (by tid; a base row or a
/// before-image) or one the world's chain added (by dseq). Writers serialize on the world's lock, and a
/// row another session removed since this statement read it fails with 40001 rather than twice.
fn remove_keyless_row(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, old: pg_sys::HeapTuple, identity: RowIdentity) {
    let by_tid = identity.src != 1;
    // the physical row's own lock (a base row or before-image by tid, an added row by its number)
    let physical = if by_tid { super::overlay::Key::T(format!("tid {}", unsafe { super::overlay::tid_of_datum(identity.tid) })) } else { super::overlay::Key::I(identity.seq) };
    world_locks::lock_key(world, world_locks::key_id(world.num, layout.tabno, &physical));
    let taken = if by_tid {
        "SELECT 1 FROM {delta} d WHERE d._w_world = $1 AND d._w_del AND d._w_base_tid = $2 LIMIT 1"
    } else {
        "SELECT 1 FROM {delta} d WHERE d._w_world = $1 AND d._w_del AND d._w_of = $2 LIMIT 1"
    }
    .replace("{delta}", layout.delta_name.as_str());
    let target: pgrx::datum::DatumWithOid = if by_tid {
        unsafe { pgrx::datum::DatumWithOid::new(identity.tid, pg_sys::TIDOID) }
    } else {
        identity.seq.into()
    };
    let again = unsafe { pgrx::datum::DatumWithOid::new_from_datum(target.datum(), target.oid()) };
    let removed = as_internal(|| Spi::connect_mut(|c| c.update(&taken, None, &[world.num.into(), again]).map(|r| !r.is_empty()).unwrap_or(false)));
    if removed {
        raise_conflict(layout, world, true, "Another session of the world removed the row since this statement read it.".into());
    }
    let column = if by_tid { "_w_base_tid" } else { "_w_of" };
    write_version_with(layout, world, desc, old, true, KeyCheck::Unchanged, vec![(column.to_string(), target)]);
    CACHES.with(|c| {
        if let Some(t) = c.borrow_mut().get_mut(&layout.tabno) {
            // (copied first when a scan still reads the part as it was)
            let w = std::rc::Rc::make_mut(&mut t.world);
            if by_tid {
                w.hidden_tids.insert(unsafe { super::overlay::tid_of_datum(identity.tid) });
            } else {
                w.delta_pick.remove(&identity.seq);
            }
        }
    });
}

fn raise_no_key(layout: &Layout) -> ! {
    raise(
        "0A000",
        format!(
            "updating or deleting rows of {} inside a world needs a primary key: the table has none (inserts work)",
            layout.table_name
        ),
    )
}

unsafe fn key_differs(layout: &Layout, desc: pg_sys::TupleDesc, a: pg_sys::HeapTuple, b: pg_sys::HeapTuple) -> bool {
    unsafe {
        for &attno in &layout.key_attnos {
            let (mut n1, mut n2) = (false, false);
            let d1 = pg_sys::heap_getattr(a, attno, desc, &mut n1);
            let d2 = pg_sys::heap_getattr(b, attno, desc, &mut n2);
            if n1 != n2 {
                return true;
            }
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            if !n1 && !super::datum_is_equal(d1, d2, att.attbyval, att.attlen as i32) {
                return true;
            }
        }
        false
    }
}

/// NOT NULL of the real table holds inside the world (23502, Postgres's own message).
fn check_not_null(layout: &Layout, view_desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) {
    unsafe {
        let rel = pg_sys::table_open(layout.relid, pg_sys::AccessShareLock as i32);
        let tdesc = (*rel).rd_att;
        for i in 0..(*tdesc).natts as usize {
            let att = &*(*tdesc).attrs.as_ptr().add(i);
            if att.attisdropped || !att.attnotnull {
                continue;
            }
            let mut isnull = false;
            pg_sys::heap_getattr(tuple, (i + 1) as i32, view_desc, &mut isnull);
            if isnull {
                let col = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned();
                let relname = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
                pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
                // Postgres's DETAIL: the row's values (generated columns aren't computed yet: null here)
                let (_, values) = row_args(view_desc, tuple);
                crate::api::raise_with(
                    "23502",
                    format!("null value in column \"{col}\" of relation \"{relname}\" violates not-null constraint"),
                    Some(format!("Failing row contains ({}).", output_values(&values).join(", "))),
                    None,
                );
            }
        }
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
    }
}

/// The view's live columns and the tuple's values, as SPI arguments.
fn row_args(desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> (Vec<String>, Vec<pgrx::datum::DatumWithOid<'static>>) {
    let mut names = Vec::new();
    let mut args = Vec::new();
    unsafe {
        for i in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(i);
            let name = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned();
            // not the table's: dropped placeholders, the conflict twin's action, the rows twin's identity
            let natts = (*desc).natts as usize;
            if name.starts_with("........pg.dropped.")
                || (i + 1 == natts && name == super::upsert_wire::ACTION_COLUMN)
                || (i + 3 >= natts && matches!(name.as_str(), "_w_src" | "_w_tid" | "_w_seq"))
            {
                continue;
            }
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, (i + 1) as i32, desc, &mut isnull);
            names.push(name);
            args.push(if isnull {
                pgrx::datum::DatumWithOid::null_oid(att.atttypid)
            } else {
                pgrx::datum::DatumWithOid::new(d, att.atttypid)
            });
        }
    }
    (names, args)
}

/// Does the world already see a row with this row's primary key?
fn key_exists(layout: &Layout, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> bool {
    if layout.key_kind == b'r' {
        return false;
    }
    let (names, args) = row_args(desc, tuple);
    key_visible(layout, &names, &args)
}

/// Serializes writers of one key in one world (a transaction-level advisory lock), then returns the
/// world's own latest version of the key as this statement saw it and as committed now.
/// The world's latest version of a key: (its number, a tombstone?, the key as the cache keeps it).
type LatestVersion = (i64, bool, Option<super::overlay::Key>);

fn serialize_key(
    layout: &Layout,
    world: &World,
    names: &[String],
    args: &[pgrx::datum::DatumWithOid],
) -> (Option<i64>, Option<LatestVersion>) {
    let key_args: Vec<pgrx::datum::DatumWithOid> = layout
        .key_columns
        .iter()
        .map(|k| {
            let p = names.iter().position(|n| n == k).unwrap();
            unsafe { pgrx::datum::DatumWithOid::new_from_datum(args[p].datum(), args[p].oid()) }
        })
        .collect();
    let conds = delta_key_conds(layout);
    let latest = format!(
        "SELECT d._w_dseq, d._w_del, {} FROM {} d WHERE d._w_world = $1 AND {conds} ORDER BY d._w_dseq DESC LIMIT 1",
        key_expr(layout, "d"),
        layout.delta_name
    );
    let mut all: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into()];
    all.extend(key_args);
    // the statement's snapshot
    let seen = as_table_owner(layout, || snapshot_query(&latest, &all).into_iter().next().flatten());
    world_locks::lock_key(world, world_locks::key_id(world.num, layout.tabno, &row_key(layout, names, args)));
    as_table_owner(layout, || {
        // what has committed by now, read after the lock
        let now = self::latest(&latest, &all, |r| {
            let key = match layout.key_kind {
                b'i' => r.get::<i64>(3).map(super::overlay::Key::I),
                b't' => r.get::<String>(3).map(super::overlay::Key::T),
                _ => None,
            };
            (r.get::<i64>(1).unwrap_or(0), r.get::<bool>(2).unwrap_or(false), key)
        })
        .into_iter()
        .next();
        (seen, now)
    })
}

/// `serialize_key` and `key_visible` for an integer key, by index probes instead of queries
/// (storage/key_probe.rs), on the same snapshots: the world's latest version of the key as the statement's
/// snapshot saw it (for a row the statement read), the key's lock, the latest version committed by now
/// (after a command counter increment, so this statement's own earlier versions are seen, as the query's
/// did), and for a new key whether the world sees the key (its chain's version, else main's row through
/// the overlay cache's view of main).
fn probe_key(layout: &Layout, world: &World, probe: &super::key_probe::Probe, k: i64, check: KeyCheck) -> (Option<i64>, Option<LatestVersion>, bool) {
    let key = super::overlay::Key::I(k);
    let statement = unsafe { crate::fast_ffi::GetActiveSnapshot() };
    let seen = if check == KeyCheck::Unchanged { probe.latest_version(world.num, k, statement).map(|v| v.0) } else { None };
    world_locks::lock_key(world, world_locks::key_id(world.num, layout.tabno, &key));
    let latest = unsafe {
        pg_sys::CommandCounterIncrement();
        let now = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let latest = probe.latest_version(world.num, k, now);
        pg_sys::UnregisterSnapshot(now);
        latest
    };
    let visible = check == KeyCheck::New
        && match super::overlay::int_key_seen(layout.tabno, k) {
            Some(seen) => seen,
            None => probe.main_rows(k, statement).into_iter().any(|tid| !super::overlay::created_since_fork(layout.tabno, tid)),
        };
    (seen, latest.map(|(dseq, del)| (dseq, del, Some(key))), visible)
}

/// The world's write lock for a statement that reads the rows it writes other than by key (ON CONFLICT,
/// SQL MERGE): EXCLUSIVE when the transaction holds none yet (it reads on a snapshot taken after it, as a
/// statement of its own), else the one it holds (its rows are then locked one by one as written, and a
/// row changed since the statement read it fails with 40001).
pub fn lock_world(world: &World) -> bool {
    match world_locks::held(world) {
        Some(_) => false,
        None => world_locks::lock_world(world, world_locks::Mode::Exclusive),
    }
}

/// `d.k1 = $2 AND d.k2 = $3 ...`: a delta row with the key given as parameters after the world ($1).
fn delta_key_conds(layout: &Layout) -> String {
    layout.key_columns.iter().enumerate().map(|(i, k)| format!("d.{} = ${}", quote_ident(k), i + 2)).collect::<Vec<_>>().join(" AND ")
}

/// The key of a row as a row lock names it (route/row_locks.rs): `values` are its key columns, in order.
pub fn lock_key_of(layout: &Layout, values: &[pgrx::datum::DatumWithOid]) -> super::overlay::Key {
    let names = layout.key_columns.clone();
    row_key(layout, &names, values)
}

/// Has a transaction the statement's snapshot doesn't see written a version of the row with these key
/// values (in key column order) into the world? For a row lock taken after a wait.
pub fn changed_since_statement(layout: &Layout, world: &World, values: &[pgrx::datum::DatumWithOid]) -> bool {
    let conds = delta_key_conds(layout);
    let latest = format!("SELECT d._w_dseq FROM {} d WHERE d._w_world = $1 AND {conds} ORDER BY d._w_dseq DESC LIMIT 1", layout.delta_name);
    let mut all: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into()];
    all.extend(values.iter().map(|v| unsafe { pgrx::datum::DatumWithOid::new_from_datum(v.datum(), v.oid()) }));
    as_table_owner(layout, || {
        let seen = snapshot_query(&latest, &all).into_iter().next().flatten();
        let types: Vec<pg_sys::Oid> = all.iter().map(|a| a.oid()).collect();
        let values: Vec<Option<pg_sys::Datum>> = all.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
        let now = snapshot_spi::query_latest_generic(&latest, &types, &values, |r| r.get::<i64>(1)).into_iter().next().flatten();
        seen != now
    })
}

/// The key of a row as its lock names it: the cache's key (an integer key as itself, one text-like column
/// as its text), several key columns as their texts joined.
fn row_key(layout: &Layout, names: &[String], args: &[pgrx::datum::DatumWithOid]) -> super::overlay::Key {
    let values: Vec<&pgrx::datum::DatumWithOid> = layout.key_columns.iter().map(|k| &args[names.iter().position(|n| n == k).unwrap()]).collect();
    if layout.key_kind == b'i' && values.len() == 1 {
        if let Some(i) = values[0].datum().and_then(|d| crate::datum::integer_of(values[0].oid(), d.sans_lifetime())) {
            return super::overlay::Key::I(i);
        }
    }
    let owned: Vec<pgrx::datum::DatumWithOid> = values.iter().map(|a| unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }).collect();
    super::overlay::Key::T(output_values(&owned).join("\u{1f}"))
}


/// ON CONFLICT DO UPDATE reads the conflicting row on a fresh snapshot: first the conflict target's
/// values are locked (the key's lock when the target is the primary key), so two upserts of one key queue.
fn lock_conflict_target(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, proposed: pg_sys::HeapTuple, match_attnos: &[i16]) {
    let (names, args) = row_args(desc, proposed);
    let columns: Vec<String> = match_attnos
        .iter()
        .map(|&a| unsafe { std::ffi::CStr::from_ptr((*(*desc).attrs.as_ptr().add(a as usize - 1)).attname.data.as_ptr()).to_string_lossy().into_owned() })
        .collect();
    let mut sorted_target = columns.clone();
    sorted_target.sort();
    let mut sorted_key = layout.key_columns.clone();
    sorted_key.sort();
    if layout.key_kind != b'r' && sorted_target == sorted_key {
        world_locks::lock_key(world, world_locks::key_id(world.num, layout.tabno, &row_key(layout, &names, &args)));
    } else {
        lock_unique_values(layout, world, &columns, &names, &args);
    }
}

fn key_visible(layout: &Layout, names: &[String], args: &[pgrx::datum::DatumWithOid]) -> bool {
    with_cache(layout.tabno, |_| ());
    let conds: Vec<String> = layout
        .key_columns
        .iter()
        .map(|k| {
            let pos = names.iter().position(|n| n == k).unwrap();
            format!("v.{} = ${}", quote_ident(k), pos + 1)
        })
        .collect();
    let sql = format!("SELECT 1 FROM {} v WHERE {} LIMIT 1", layout.overlay_name, conds.join(" AND "));
    as_table_owner(layout, || !snapshot_query(&sql, args).is_empty())
}

fn snapshot_query(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<Option<i64>> {
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
    snapshot_spi::query_generic(sql, &types, &values, |r| r.get::<i64>(1))
}

/// What a write checks about the row's key before it writes a version.
#[derive(Clone, Copy, PartialEq)]
enum KeyCheck {
    /// a new key: not visible in the world, nor written by a session that committed since (23505)
    New,
    /// the row as this statement read it: unchanged by a concurrent session since (40001 otherwise)
    Unchanged,
    /// read under the world's lock on a fresh snapshot (ON CONFLICT DO UPDATE): nothing left to check
    Locked,
}

/// Writes one version of a row into the world's delta (a tombstone when `del`), checking the primary
/// key against what the world sees when `check_key`, and updates this backend's cache in place.
/// A version written: the generated columns the delta computed for it (in the caller's memory, in
/// `layout.generated` order), for RETURNING.
struct Written {
    generated: Vec<Option<pg_sys::Datum>>,
}

/// 40001 for a write that met a concurrent session's version of the row (the DETAIL says which), in
/// Postgres's words: "concurrent delete" when that version removed the row, else "concurrent update".
fn raise_conflict(layout: &Layout, world: &World, deleted: bool, detail: String) -> ! {
    let what = if deleted { "delete" } else { "update" };
    crate::api::raise_with(
        "40001",
        format!("could not serialize access due to concurrent {what} of {} in world \"{}\"", layout.table_name, world.name),
        Some(detail),
        None,
    )
}

/// A version of a row in a world, for an error's DETAIL: its number, or main's row when the world has none.
fn version_words(dseq: Option<i64>) -> String {
    match dseq {
        Some(v) => format!("world version {v}"),
        None => "main's row".to_string(),
    }
}

fn write_version(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple, del: bool, check: KeyCheck) -> Written {
    write_version_with(layout, world, desc, tuple, del, check, Vec::new())
}

/// `write_version`, with more delta columns to set (a keyless tombstone's `_w_base_tid` / `_w_of`).
fn write_version_with(
    layout: &Layout,
    world: &World,
    desc: pg_sys::TupleDesc,
    tuple: pg_sys::HeapTuple,
    del: bool,
    check: KeyCheck,
    extra: Vec<(String, pgrx::datum::DatumWithOid<'static>)>,
) -> Written {
    let (names, args) = row_args(desc, tuple);
    // the row as the statement read it, its key locked before the statement took its snapshot: that row
    // is the world's latest version, and no other can commit before this transaction ends (nothing to check)
    let key = (layout.key_kind != b'r').then(|| row_key(layout, &names, &args));
    let read_locked = check == KeyCheck::Unchanged
        && key.as_ref().is_some_and(|k| world_locks::locked_before_reading(world_locks::key_id(world.num, layout.tabno, k)));
    if let Some(key) = key.filter(|_| !read_locked) {
        let probed = match key {
            super::overlay::Key::I(k) if unsafe { crate::fast_ffi::ActiveSnapshotSet() } => {
                super::key_probe::probe(layout).map(|p| probe_key(layout, world, &p, k, check))
            }
            _ => None,
        };
        // (else the checks' three queries, in one scope of pg_worlds' settings: set and restored once, not
        // around each, which was a tenth of a world's one-row INSERT transaction)
        let (seen, latest, visible) = probed.unwrap_or_else(|| {
            as_internal(|| {
                let (seen, latest) = serialize_key(layout, world, &names, &args);
                let visible = check == KeyCheck::New && key_visible(layout, &names, &args);
                (seen, latest, visible)
            })
        });
        if check == KeyCheck::New {
            // a new key must not be visible in the world already, nor written by a concurrent session
            // that committed since this statement began (23505, as Postgres words it)
            if visible || latest.as_ref().is_some_and(|(_, del, _)| !del) {
                let constraint = as_internal(|| primary_key_name(layout));
                raise_duplicate(&constraint, &layout.key_columns, &names, &args);
            }
        } else if check == KeyCheck::Unchanged && seen != latest.as_ref().map(|(dseq, _, _)| *dseq) {
            // the row this statement read was changed by a concurrent session in the same world since:
            // like REPEATABLE READ, refuse rather than lose that update (retry the transaction)
            raise_conflict(
                layout,
                world,
                latest.as_ref().is_some_and(|l| l.1),
                format!(
                    "The statement read the row as {}; the world's latest version of it is {}.",
                    version_words(seen),
                    version_words(latest.as_ref().map(|l| l.0))
                ),
            );
        } else if check == KeyCheck::Unchanged {
            // and the version this backend's cache showed the statement is that latest one: a cache behind
            // the world (seen under concurrent writers) must fail the statement, not lose an update
            if let Some((now, _, Some(key))) = &latest {
                let shown = with_cache(layout.tabno, |c| c.world.winner.get(key).map(|v| v.0));
                if shown != Some(*now) {
                    raise_conflict(
                        layout,
                        world,
                        latest.as_ref().is_some_and(|l| l.1),
                        format!(
                            "This session's view of the world showed the row as {}; its latest version is {}.",
                            version_words(shown),
                            version_words(Some(*now))
                        ),
                    );
                }
            }
        }
    }
    if !del {
        check_unique(layout, world, &names, &args);
    }
    // generated columns are the delta's to compute
    let (mut names, mut args): (Vec<String>, Vec<pgrx::datum::DatumWithOid>) = if layout.generated.is_empty() {
        (names, args)
    } else {
        names.into_iter().zip(args).filter(|(n, _)| !layout.generated.contains(n)).unzip()
    };
    if extra.is_empty() && super::delta_insert::eligible(layout) {
        // nothing of the table's code to run: written with heap and index calls (delta_insert.rs)
        let dseq = super::capture::next_hseq();
        let key = (layout.key_kind == b'i').then(|| row_key(layout, &names, &args));
        unsafe { super::delta_insert::insert(layout, world.num, dseq, del, desc, tuple) };
        note_version(layout, key, dseq, del);
        return Written { generated: Vec::new() };
    }
    for (n, a) in extra {
        names.push(n);
        args.push(a);
    }
    let cols: Vec<crate::sql_text::QuotedName> = names.iter().map(|n| quote_ident(n)).collect();
    // $1 world, $2 deleted, $3 the version's number; the row's columns follow. The number is taken as
    // history's are (capture::next_hseq: increasing per backend, and across the world's writers, who
    // serialize on its lock), not from a sequence: nextval would move the session's lastval(), which
    // drivers read as the id just inserted (PDO's lastInsertId)
    let placeholders: Vec<String> = (0..names.len()).map(|i| format!("${}", i + 4)).collect();
    let delta = &layout.delta_name;
    let sql = format!(
        "INSERT INTO {delta} AS d (_w_world, _w_dseq, _w_del{}{}) VALUES ($1, $3::int8, $2{}{}) RETURNING _w_dseq, {}{}",
        if cols.is_empty() { "" } else { ", " },
        crate::sql_text::join(&cols, ", "),
        if placeholders.is_empty() { "" } else { ", " },
        placeholders.join(", "),
        key_expr(layout, "d"),
        // and what the delta computed for the generated columns, for RETURNING
        layout.generated.iter().map(|c| format!(", d.{}", quote_ident(c))).collect::<String>()
    );
    let dseq_new = super::capture::next_hseq();
    let upper = unsafe { pg_sys::CurrentMemoryContext };
    let mut all_args: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into(), del.into(), dseq_new.into()];
    all_args.extend(args);
    let insert = std::panic::AssertUnwindSafe(|| {
        as_table_owner(layout, || {
            kept(&sql, &all_args, |row| {
                let generated = (0..layout.generated.len())
                    .map(|k| {
                        let d = row.raw(3 + k)?;
                        Some(unsafe { copy_out(desc, &layout.generated[k], d, upper) })
                    })
                    .collect::<Vec<_>>();
                (row.get::<i64>(1).unwrap_or(0), read_key_of(layout, row, 2), generated)
            })
            .into_iter()
            .next()
            .unwrap_or_else(|| raise("XX000", "pg_worlds: writing the world's row returned nothing"))
        })
    });
    // the table's CHECK constraints fire on the delta's copies: report them as Postgres would for the table
    let (delta, table, row) = (layout.delta, layout.relid, std::panic::AssertUnwindSafe(&all_args[3..]));
    let failing = move |e: pgrx::pg_sys::panic::CaughtError| match &e {
        pgrx::pg_sys::panic::CaughtError::PostgresError(r) => unsafe {
            let name = |oid| std::ffi::CStr::from_ptr(pg_sys::get_rel_name(oid)).to_string_lossy().into_owned();
            let message = r.message().replace(&format!("\"{}\"", name(delta)), &format!("\"{}\"", name(table)));
            crate::api::raise_with("23514", message, Some(format!("Failing row contains ({}).", output_values(&row).join(", "))), None)
        },
        _ => e.rethrow(),
    };
    let (dseq, key, generated) = pgrx::PgTryBuilder::new(insert).catch_when(PgSqlErrorCode::ERRCODE_CHECK_VIOLATION, failing).execute();
    note_version(layout, key, dseq, del);
    Written { generated }
}

/// Keeps this backend's view of the world current without a rebuild: version `dseq` of `key` (None: a
/// table without a key) was just written.
fn note_version(layout: &Layout, key: Option<super::overlay::Key>, dseq: i64, del: bool) {
    CACHES.with(|c| {
        if let Some(t) = c.borrow_mut().get_mut(&layout.tabno) {
            // (copied first when a scan still reads the part as it was: a cursor open over the table)
            let w = std::rc::Rc::make_mut(&mut t.world);
            match key {
                Some(k) => {
                    if let Some((old, _)) = w.set_winner(k, (dseq, del)) {
                        w.delta_pick.remove(&old);
                    }
                    if !del {
                        w.delta_pick.insert(dseq);
                    }
                }
                None => {
                    if !del {
                        w.delta_pick.insert(dseq);
                    }
                }
            }
        }
    });
}

/// A datum of the named column (of `desc`), copied into `into` so it outlives the SPI call.
unsafe fn copy_out(desc: pg_sys::TupleDesc, column: &str, d: pg_sys::Datum, into: pg_sys::MemoryContext) -> pg_sys::Datum {
    unsafe {
        let att = (0..(*desc).natts as usize)
            .map(|i| &*(*desc).attrs.as_ptr().add(i))
            .find(|a| std::ffi::CStr::from_ptr(a.attname.data.as_ptr()).to_bytes() == column.as_bytes())
            .expect("a generated column of the table");
        let old = pg_sys::MemoryContextSwitchTo(into);
        let copy = super::datum_copy(d, att.attbyval, att.attlen as i32);
        pg_sys::MemoryContextSwitchTo(old);
        copy
    }
}

/// The row as written, with the generated columns the delta computed (what RETURNING shows); the tuple
/// itself when the table has none.
fn with_generated(layout: &Layout, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple, written: &Written) -> pg_sys::HeapTuple {
    if layout.generated.is_empty() {
        return tuple;
    }
    unsafe {
        let natts = (*desc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![false; natts];
        let mut replace = vec![false; natts];
        for (name, value) in layout.generated.iter().zip(&written.generated) {
            let Some(i) = (0..natts).find(|&i| {
                let att = &*(*desc).attrs.as_ptr().add(i);
                std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_bytes() == name.as_bytes()
            }) else {
                continue;
            };
            replace[i] = true;
            match value {
                Some(d) => values[i] = *d,
                None => nulls[i] = true,
            }
        }
        pg_sys::heap_modify_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr(), replace.as_mut_ptr())
    }
}
