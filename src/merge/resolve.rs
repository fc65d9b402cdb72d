//! Step 1 of a merge (and of DIFF and REBASE): which world, which target, which rows the user named.
//! The world is resolved by name or ID (3D000), again after its lock is held (merged or dropped meanwhile),
//! and an approval repeated at the same version finds the merge it repeats.
use crate::spi_calls::Fresh;
use super::*;

/// A live world as the engine needs it.
#[derive(Clone, Debug)]
pub struct WorldRow {
    pub num: i32,
    pub id: String,
    pub name: String,
    pub parent: Option<i32>,
    pub version: i64,
    pub fork_snapshot: Option<String>,
    /// merged in part (ONLY TABLES / ONLY KEYS) at least once: its later merges leave out what main
    /// changed of those rows before that merge (gather.rs)
    pub merged_part: bool,
}

/// A world of that name already merged whole at version `v` (its last merge): the tag that merge
/// returned (an approval repeated, or made twice at once, applies once).
pub(crate) fn merged_at_version(name: &str, v: i64) -> Option<Vec<Value>> {
    if world_row("(name = $1 OR id = $1)", name.into()).is_some_and(|w| w.version != v) {
        return None;
    }
    crate::spi_calls::get_one_with_args::<i64>(
        "SELECT coalesce(e.rows, 0) FROM worlds.world w JOIN worlds.event e ON e.world = w.num
         WHERE (w.name = $1 OR w.id = $1) AND w.dropped IS NOT NULL AND w.version = $2 AND e.event LIKE 'merged into %'
           AND NOT EXISTS (SELECT 1 FROM worlds.world l WHERE l.name = w.name AND l.dropped IS NULL)
         ORDER BY e.seq DESC LIMIT 1",
        &[name.into(), v.into()],
    )
    .ok()
    .flatten()
    .map(|n| vec![serde_json::json!({ "tag": format!("MERGE {n}") })])
}

/// The world again, after waiting for its lock: another session may have merged or dropped it meanwhile
/// (3D000, by the name it was asked for).
pub(crate) fn resolve_again(world: &WorldRow) -> WorldRow {
    world_row("id = $1", world.id.as_str().into())
        .unwrap_or_else(|| raise("3D000", format!("world \"{}\" does not exist (it was merged or dropped meanwhile)", world.name)))
}

pub fn resolve_world(name: &str) -> WorldRow {
    // a world past its TTL is discarded first: it can't be merged, rebased or diffed any more
    if unsafe { !pg_sys::XactReadOnly } {
        crate::spi_calls::run("SELECT worlds._expire()").ok();
    }
    let row = world_row("(name = $1 OR id = $1) ORDER BY (name = $1) DESC", name.into());
    row.unwrap_or_else(|| {
        if name.contains('@') {
            raise(
                "0A000",
                format!("a world as it was ({name}) can only be read: in SWITCH, DIFF ... TO, or as the source of FORK WORLD / CREATE WORLD ... FROM"),
            );
        }
        raise("3D000", format!("world \"{name}\" does not exist"))
    })
}

/// The live world that `condition` (on worlds.world, with `$1`) finds first.
pub(crate) fn world_row(condition: &str, arg: DatumWithOid) -> Option<WorldRow> {
    Spi::connect(|c| {
        c.fresh(
            &format!(
                "SELECT num, id, name, parent, version, coalesce(fork_snapshot::text, '@' || fork_at::text), merged_part FROM worlds.world
                 WHERE dropped IS NULL AND {condition} LIMIT 1"
            ),
            None,
            &[arg],
        )
        .ok()
        .and_then(|r| {
            r.into_iter().next().map(|r| WorldRow {
                num: r.get(1).ok().flatten().unwrap_or(0),
                id: r.get(2).ok().flatten().unwrap_or_default(),
                name: r.get(3).ok().flatten().unwrap_or_default(),
                parent: r.get(4).ok().flatten(),
                version: r.get(5).ok().flatten().unwrap_or(0),
                fork_snapshot: r.get(6).ok().flatten(),
                merged_part: r.get(7).ok().flatten().unwrap_or(false),
            })
        })
    })
}

pub(crate) fn regclass_of(name: &str) -> pg_sys::Oid {
    crate::storage::in_session_search_path(|| crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[name.into()]))
        .ok()
        .flatten()
        .unwrap_or_else(|| raise("42P01", format!("relation \"{name}\" does not exist")))
}

/// 't/1' or 't/(1,abc)' -> (table oid, key text). The key must have the table's key's shape: as many
/// parts as key columns (a value of an integer column must be an integer).
pub(crate) fn parse_row_ref(r: &str) -> (pg_sys::Oid, String) {
    let not_a_row = || -> ! { raise("22023", format!("'{r}' is not a row: write 'table/id', or 'table/(a,b)' for a key of several columns")) };
    let Some((t, k)) = r.split_once('/') else { not_a_row() };
    if t.is_empty() || k.is_empty() {
        not_a_row();
    }
    let relid = regclass_of(t);
    if let Some(&tabno) = crate::storage::tracked_tables().get(&relid) {
        let layout = relation_layout(tabno);
        let n = layout.key_columns.len();
        let parts = if n > 1 { record_parts(k) } else { Some(vec![k.to_string()]) };
        let fits = parts.is_some_and(|p| {
            p.len() == n && (layout.key_kind != b'i' || p.iter().all(|v| v.trim().parse::<i64>().is_ok()))
        });
        if n > 0 && !fits {
            raise(
                "22023",
                format!("'{r}' is not a row of {t}: its key is {}", if n == 1 { layout.key_columns[0].clone() } else { format!("({})", layout.key_columns.join(", ")) }),
            );
        }
    }
    (relid, k.to_string())
}

/// A row given to RESOLVE: an object of the table's columns, carrying the key it resolves (22023 otherwise).
pub(crate) fn check_resolve_row(relid: pg_sys::Oid, key: &str, row: &Value) {
    let Some(obj) = row.as_object() else {
        raise("22023", format!("RESOLVE of row {key}: the row must be a JSON object of the table's columns"));
    };
    let columns = live_columns(relid);
    if let Some(unknown) = obj.keys().find(|c| !columns.contains(c)) {
        raise("22023", format!("RESOLVE of row {key}: the table has no column \"{unknown}\""));
    }
    if let Some(&tabno) = crate::storage::tracked_tables().get(&relid) {
        let layout = relation_layout(tabno);
        let given = key_texts(&layout, std::slice::from_ref(row)).pop().unwrap_or_default();
        if !layout.key_columns.is_empty() && given != key {
            raise("22023", format!("RESOLVE of row {key}: the row given has key {given} (a row resolves its own key)"));
        }
    }
}

/// The parts of a key written as a record, `(1,"a,b")`: None when it isn't one.
pub(crate) fn record_parts(k: &str) -> Option<Vec<String>> {
    let inner = k.strip_prefix('(')?.strip_suffix(')')?;
    let (mut parts, mut cur, mut quoted, mut chars) = (Vec::new(), String::new(), false, inner.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            '\\' => cur.extend(chars.next()),
            ',' if !quoted => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    (!quoted).then_some(parts)
}
