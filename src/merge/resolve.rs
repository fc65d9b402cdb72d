//! Step 1 of a merge (and of DIFF and REBASE): which rows the user named (ONLY TABLES, ONLY KEYS, RESOLVE).
//! The world itself is found by the one resolver (src/world.rs).
use super::*;

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
