//! Names of tables as pg_worlds shows them to the user. (The SQL text's names and literals are written
//! by crate::sql_text.)
use super::*;

/// The table name as the spec prints it in ids ('orders/7'): unqualified when in the search path.
/// A table as Postgres names it on the session's search_path (`orders`; `app."Orders"` where it isn't on
/// the path or needs quotes), so a name DIFF or a DRY RUN prints pastes back into ONLY KEYS and RESOLVE.
/// Remembered per (name, search_path): plans name a table once per row.
pub fn short_name(table: impl AsRef<str>) -> String {
    let table = table.as_ref();
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
