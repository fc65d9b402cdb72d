//! The SQL text the merge's steps build: row objects, literals, key expressions, table names as shown.
use super::*;

pub fn json_object_expr(alias: &str, cols: &[String]) -> String {
    // jsonb_build_object takes at most 100 arguments: concatenate chunks of 50 columns
    let parts: Vec<String> = cols
        .chunks(50)
        .map(|chunk| {
            format!(
                "jsonb_build_object({})",
                chunk.iter().map(|c| format!("{}, {alias}.{}", quote_literal(c), quote_ident(c))).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    if parts.is_empty() {
        "'{}'::jsonb".into()
    } else {
        parts.join(" || ")
    }
}

/// A literal as Postgres's own quote_literal() writes it (E'...' with backslashes doubled when the text has
/// one): it reads the same whatever the session's standard_conforming_strings says.
pub fn quote_literal(s: &str) -> String {
    // (a text value never holds a NUL; a Rust string that does is cut there, as Postgres would refuse it)
    let c = std::ffi::CString::new(s.split('\0').next().unwrap_or_default()).unwrap_or_default();
    unsafe {
        let quoted = pgrx::pg_sys::quote_literal_cstr(c.as_ptr());
        let out = std::ffi::CStr::from_ptr(quoted).to_string_lossy().into_owned();
        pgrx::pg_sys::pfree(quoted.cast());
        out
    }
}

pub(crate) fn key_text_expr(layout: &Layout, alias: &str) -> String {
    match layout.key_columns.len() {
        0 => format!("ROW({alias}.*)::text"),
        1 => format!("{alias}.{}::text", quote_ident(&layout.key_columns[0])),
        _ => format!(
            "ROW({})::text",
            layout.key_columns.iter().map(|c| format!("{alias}.{}", quote_ident(c))).collect::<Vec<_>>().join(", ")
        ),
    }
}

pub fn key_match(layout: &Layout, a: &str, b: &str) -> String {
    layout
        .key_columns
        .iter()
        .map(|c| format!("{a}.{} = {b}.{}", quote_ident(c), quote_ident(c)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The table name as the spec prints it in ids ('orders/7'): unqualified when in the search path.
/// A table as Postgres names it on the session's search_path (`orders`; `app."Orders"` where it isn't on
/// the path or needs quotes), so a name DIFF or a DRY RUN prints pastes back into ONLY KEYS and RESOLVE.
/// Remembered per (name, search_path): plans name a table once per row.
pub fn short_name(table: &str) -> String {
    thread_local! {
        static NAMES: std::cell::RefCell<HashMap<(String, String), String>> = std::cell::RefCell::new(HashMap::new());
    }
    let path = unsafe {
        let p = pg_sys::namespace_search_path;
        if p.is_null() { String::new() } else { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() }
    };
    let key = (table.to_string(), path);
    if let Some(name) = NAMES.with(|n| n.borrow().get(&key).cloned()) {
        return name;
    }
    let name = crate::storage::in_session_search_path(|| crate::spi_calls::get_one_with_args::<String>("SELECT to_regclass($1)::text", &[table.into()]))
        .ok()
        .flatten()
        .unwrap_or_else(|| table.rsplit('.').next().unwrap_or(table).trim_matches('"').to_string());
    NAMES.with(|n| {
        let mut n = n.borrow_mut();
        if n.len() > 10_000 {
            n.clear();
        }
        n.insert(key, name.clone());
    });
    name
}
