//! The search path a session in a world resolves names with: the world's own namespaces ahead of the
//! schemas they belong to, while `SHOW search_path` keeps saying what the session set.
//!
//! A world's objects (tables, views, sequences, functions, types it created) live in one namespace per
//! schema and world, named `pg_w<num>_<schema>` (`world_namespace`). Postgres resolves names during parse
//! analysis, before any hook, from the text `namespace_search_path`: so that text, for a session in
//! world 5 whose search_path is `"$user", public`, reads `"$user", pg_w5_public, public` (its ancestors'
//! namespaces follow its own, nearest first). A namespace that doesn't exist is skipped by Postgres, so
//! the text depends only on the path the session set and its world's chain, never on the catalog.
//!
//! How: at load (shared_preload_libraries) the `search_path` setting's variable is moved to a slot of
//! ours (`USER_PATH`): GUC keeps, shows, saves and restores the session's own text there, untouched.
//! `namespace_search_path`, which Postgres resolves names from, becomes ours, rewritten by the setting's
//! assign hook (wrapped: every SET, RESET, function SET clause and transaction end passes through it)
//! and by `set_chain` when the session's world changes. pg_worlds' own schemas, `pg_catalog`,
//! `pg_temp` and `$user` get no world namespace.
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void, CStr, CString};
use crate::backend_local::BackendLocal;

/// The setting's own text (GUC's variable for `search_path` since `install`).
static mut USER_PATH: *mut c_char = std::ptr::null_mut();
/// Postgres's assign hook of `search_path` (it marks the resolved path stale).
static mut ORIGINAL_ASSIGN: pg_sys::GucStringAssignHook = None;
static mut INSTALLED: bool = false;

/// The worlds whose namespaces the session's names resolve in, its own first (empty: main).
static CHAIN: BackendLocal<RefCell<Vec<i32>>> = BackendLocal::new(RefCell::new(Vec::new()));
/// The text `namespace_search_path` points into (kept alive here).
static EFFECTIVE: BackendLocal<RefCell<Option<CString>>> = BackendLocal::new(RefCell::new(None));
/// The world setting changed where its chain couldn't be read (outside a transaction): read it at
/// the next chance (`refresh_if_pending`); until then the session sees no world namespace.
static PENDING: BackendLocal<Cell<bool>> = BackendLocal::new(Cell::new(false));

/// Where a world's objects of `schema` live: `pg_w<num>_<schema>`, the schema's name cut (at a character)
/// to keep the whole within Postgres's 63 bytes. A name beginning `pg_` is reserved: no role makes one
/// (42939) without allow_system_table_mods, pg_dump leaves such namespaces and everything in them out,
/// and psql's `\dn` doesn't list them; pg_worlds makes them as its owner (storage/world_schemas.rs).
pub fn world_namespace(schema: &str, num: i32) -> String {
    let prefix = format!("pg_w{num}_");
    let room = 63 - prefix.len();
    let mut cut = schema.len().min(room);
    while !schema.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{prefix}{}", &schema[..cut])
}

/// The world number of a namespace name made by `world_namespace` (None for any other name).
pub fn world_of_namespace(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("pg_w")?;
    let (num, _) = rest.split_once('_')?;
    if num.is_empty() || num.starts_with('0') || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse().ok()
}

/// Moves the setting's variable to our slot and wraps its assign hook. In the postmaster, at load.
pub fn install() {
    unsafe {
        let vars = pg_sys::get_guc_variables();
        let n = pg_sys::GetNumConfigOptions();
        for i in 0..n as usize {
            let g = *vars.add(i);
            if g.is_null() || (*g).vartype != pg_sys::config_type::PGC_STRING || CStr::from_ptr((*g).name) != c"search_path" {
                continue;
            }
            let s = g as *mut pg_sys::config_string;
            USER_PATH = *(*s).variable;
            (*s).variable = &raw mut USER_PATH;
            ORIGINAL_ASSIGN = (*s).assign_hook;
            (*s).assign_hook = Some(assign_path);
            INSTALLED = true;
            let user = if USER_PATH.is_null() { c"".to_owned() } else { CStr::from_ptr(USER_PATH).to_owned() };
            set_effective(&user);
            return;
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_path(newval: *const c_char, extra: *mut c_void) {
    unsafe {
        let user = if newval.is_null() { c"".to_owned() } else { CStr::from_ptr(newval).to_owned() };
        set_effective(&user);
        if let Some(f) = ORIGINAL_ASSIGN {
            f(newval, extra);
        }
    }
}

/// The session's world namespaces: the chain of its world (own first; empty for main or a moment of
/// the past). Rewrites the effective path when it changes.
pub fn set_chain(chain: &[i32]) {
    PENDING.with(|p| p.set(false));
    if CHAIN.with(|c| c.borrow().as_slice() == chain) {
        return;
    }
    CHAIN.with(|c| *c.borrow_mut() = chain.to_vec());
    unsafe {
        if !INSTALLED {
            return;
        }
        let user = if USER_PATH.is_null() { c"".to_owned() } else { CStr::from_ptr(USER_PATH).to_owned() };
        set_effective(&user);
        // Postgres resolves the path again at its next name lookup
        if let Some(f) = ORIGINAL_ASSIGN {
            f(USER_PATH, std::ptr::null_mut());
        }
    }
}

/// The search_path the session set (its own text, without world namespaces).
pub fn user_path() -> String {
    unsafe { if USER_PATH.is_null() { String::new() } else { CStr::from_ptr(USER_PATH).to_string_lossy().into_owned() } }
}

/// The session's world chain (its own world first; empty for main or a moment).
pub fn chain() -> Vec<i32> {
    CHAIN.with(|c| c.borrow().clone())
}

/// The world whose namespaces the session's names resolve in first (None: main, a moment, or unknown).
pub fn own_world() -> Option<i32> {
    CHAIN.with(|c| c.borrow().first().copied())
}

/// The world setting changed where its chain can't be read: no world namespace until it is.
pub fn mark_pending() {
    set_chain(&[]);
    PENDING.with(|p| p.set(true));
}

pub fn pending() -> bool {
    PENDING.with(|p| p.get())
}

fn set_effective(user: &CStr) {
    let text = CHAIN.with(|c| expand(user, &c.borrow()));
    EFFECTIVE.with(|e| {
        let mut e = e.borrow_mut();
        *e = Some(text);
        unsafe { pg_sys::namespace_search_path = e.as_ref().map(|t| t.as_ptr() as *mut c_char).unwrap_or(std::ptr::null_mut()) };
    });
}

/// Schemas that never get a world namespace in the path.
fn kept_as_is(name: &str) -> bool {
    name == "$user" || name.starts_with("pg_") || name == "worlds" || name == "worlds_data" || world_of_namespace(name).is_some()
}

/// The path `user` with each schema's world namespaces (for `chain`, in order) put ahead of it.
fn expand(user: &CStr, chain: &[i32]) -> CString {
    if chain.is_empty() {
        return user.to_owned();
    }
    let text = user.to_string_lossy();
    let Some(elements) = split_identifiers(&text) else { return user.to_owned() };
    let mut out: Vec<String> = Vec::new();
    for (raw, name) in elements {
        if !kept_as_is(&name) {
            for &num in chain {
                out.push(quote(&world_namespace(&name, num)));
            }
        }
        out.push(raw);
    }
    CString::new(out.join(", ")).unwrap_or_else(|_| user.to_owned())
}

/// A path's elements as written and as Postgres reads them (SplitIdentifierString: quoted ones as they
/// are, unquoted ones down-cased). None for a text Postgres wouldn't accept.
fn split_identifiers(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Some(out);
    }
    loop {
        let (raw, name, after);
        if let Some(r) = rest.strip_prefix('"') {
            let mut name_buf = String::new();
            let mut chars = r.char_indices();
            let mut end = None;
            while let Some((i, ch)) = chars.next() {
                if ch == '"' {
                    if r[i + 1..].starts_with('"') {
                        name_buf.push('"');
                        chars.next();
                    } else {
                        end = Some(i + 1);
                        break;
                    }
                } else {
                    name_buf.push(ch);
                }
            }
            let end = end?;
            raw = format!("\"{}", &r[..end]);
            name = name_buf;
            after = &r[end..];
        } else {
            let end = rest.find(|c: char| c == ',' || c.is_whitespace()).unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            raw = rest[..end].to_string();
            name = raw.to_ascii_lowercase();
            after = &rest[end..];
        }
        out.push((raw, name));
        let after = after.trim_start();
        if after.is_empty() {
            return Some(out);
        }
        rest = after.strip_prefix(',')?.trim_start();
    }
}

/// The session's world setting changed to `setting`: its chain is read now when a transaction is open
/// (a SET, SWITCH WORLD, a connection's options), else at the next statement (`refresh_if_pending`).
pub fn world_setting_changed(setting: &CStr) {
    let s = setting.to_bytes();
    if s.is_empty() || s == b"main" || s.contains(&b'@') {
        // main, or a moment of the past (read as it was: a world's own objects aren't kept in its past)
        set_chain(&[]);
        return;
    }
    unsafe {
        if !pg_sys::IsTransactionState() || pg_sys::ParallelWorkerNumber >= 0 || pg_sys::creating_extension {
            mark_pending();
            return;
        }
    }
    let name = setting.to_string_lossy().into_owned();
    // (a connection's settings are applied in its start-up transaction, before any snapshot is taken)
    let read = || unsafe {
        let pushed = !crate::fast_ffi::ActiveSnapshotSet();
        if pushed {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let chain = super::as_internal(|| chain_of(&name));
        if pushed {
            pg_sys::PopActiveSnapshot();
        }
        chain
    };
    match crate::subxact::in_subtransaction(read) {
        Ok(chain) => set_chain(&chain),
        Err(e) => {
            pgrx::debug1!("pg_worlds: the world's chain isn't readable yet: {:?}", crate::subxact::state_and_message(&e));
            mark_pending()
        }
    }
}

/// Reads the chain the world setting names, if `world_setting_changed` couldn't.
pub fn refresh_if_pending() {
    if !pending() {
        return;
    }
    let setting = crate::guc::current_world_setting().to_owned();
    world_setting_changed(&setting);
}

/// The live world named `name` (its name or ID) and its ancestors, nearest first (main left out); empty
/// when there is none or pg_worlds isn't installed in this database.
fn chain_of(name: &str) -> Vec<i32> {
    let installed = unsafe {
        let ns = pg_sys::get_namespace_oid(c"worlds".as_ptr(), true);
        ns != pg_sys::Oid::INVALID && pg_sys::get_relname_relid(c"world".as_ptr(), ns) != pg_sys::Oid::INVALID
    };
    if !installed {
        return Vec::new();
    }
    crate::spi_calls::get_one_with_args::<Vec<i32>>(
        &format!(
            "WITH RECURSIVE w AS ({} LIMIT 1),
                           c AS (SELECT num, parent, 0 AS lvl FROM worlds.world WHERE num = (SELECT num FROM w)
                                 UNION ALL
                                 SELECT p.num, p.parent, c.lvl + 1 FROM worlds.world p JOIN c ON p.num = c.parent)
             SELECT coalesce(array_agg(num ORDER BY lvl) FILTER (WHERE num <> 0), '{{}}') FROM c",
            crate::sql_text::live_world_query(name)
        ),
        &[name.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// A world namespace's name as an identifier in the path text: bare when it needs no quotes (it starts
/// with `pg_w`, so it is never a keyword), else quoted.
fn quote(name: &str) -> String {
    if name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return name.to_string();
    }
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_read_back() {
        assert_eq!(world_namespace("public", 5), "pg_w5_public");
        let long = "é".repeat(40);
        let n = world_namespace(&long, 123);
        assert!(n.len() <= 63 && n.starts_with("pg_w123_"));
        assert_eq!(world_of_namespace(&n), Some(123));
        assert_eq!(world_of_namespace("public"), None);
        assert_eq!(world_of_namespace("pg_w_x"), None);
        assert_eq!(world_of_namespace("pg_w05_x"), None);
        assert_eq!(world_of_namespace("pg_toast"), None);
        assert_eq!(world_of_namespace("pg_temp_3"), None);
        assert_eq!(world_of_namespace("pg_w12_"), Some(12));
    }

    #[test]
    fn expands_each_schema() {
        let e = expand(c"\"$user\", public, \"My App\"", &[5, 2]);
        assert_eq!(
            e.to_str().unwrap(),
            "\"$user\", pg_w5_public, pg_w2_public, public, \"pg_w5_My App\", \"pg_w2_My App\", \"My App\""
        );
        assert_eq!(expand(c"pg_catalog, worlds", &[5]).to_str().unwrap(), "pg_catalog, worlds");
        assert_eq!(expand(c"Public", &[]).to_str().unwrap(), "Public");
        assert_eq!(expand(c"Public", &[1]).to_str().unwrap(), "pg_w1_public, Public");
        assert_eq!(expand(c"", &[1]).to_str().unwrap(), "");
        // (an unquoted name runs to a comma or a space, quotes included, as Postgres splits it)
        assert_eq!(expand(c"a\"b", &[1]).to_str().unwrap(), "\"pg_w1_a\"\"b\", a\"b");
        // a text Postgres wouldn't accept stays as it is
        assert_eq!(expand(c"\"open", &[1]).to_str().unwrap(), "\"open");
        assert_eq!(expand(c"a b", &[1]).to_str().unwrap(), "a b");
    }
}
