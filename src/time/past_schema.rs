//! A session in 'main@when' reads each table with the columns it had then (AS OF's schema, for a whole
//! session): temporary views named as the tables whose columns changed since, and as tables dropped
//! since, made by `worlds._shadow_past` when the session enters the moment and dropped when it leaves.
//! Names are resolved before any hook runs, so the views must exist before a statement is analysed:
//! they are made right after `SET worlds.world`, and otherwise (SWITCH WORLD, a connection string, a
//! setting undone by ROLLBACK) at the next statement, which is then analysed again.
use crate::guc;
use std::cell::RefCell;
use crate::backend_local::BackendLocal;

/// The moment the session's views were made for (None: no views).
static SHADOWED: BackendLocal<RefCell<Option<String>>> = BackendLocal::new(RefCell::new(None));
/// A transaction that made or dropped views was rolled back: what exists is unknown.
static UNSURE: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

fn past_setting() -> Option<String> {
    let s = guc::current_world_setting().to_string_lossy();
    let (name, _) = s.split_once('@')?;
    name.eq_ignore_ascii_case("main").then(|| s.into_owned())
}

/// Do the session's views differ from what its world needs? Cheap: this runs before every statement.
pub fn out_of_step() -> bool {
    if UNSURE.with(|u| u.get()) {
        return true;
    }
    let shadowed = SHADOWED.with(|s| s.borrow().is_some());
    let in_past = guc::current_world_setting().to_bytes().contains(&b'@');
    if !shadowed && !in_past {
        return false;
    }
    SHADOWED.with(|s| *s.borrow() != past_setting())
}

/// Makes or drops the views so they match the session's world. True when any view was made or dropped
/// (a statement analysed before should be analysed again).
pub fn sync() -> bool {
    let target = past_setting();
    let unsure = UNSURE.with(|u| u.replace(false));
    let had = SHADOWED.with(|s| s.borrow_mut().take());
    if unsure && had.is_some() && had == target {
        // after a rollback: still there (made before it), or to make again?
        let present = crate::spi_calls::get_one::<i64>("SELECT count(*) FROM worlds._past_views()").ok().flatten().unwrap_or(0);
        if present > 0 {
            SHADOWED.with(|s| *s.borrow_mut() = had);
            return false;
        }
    }
    let mut changed = false;
    if had.is_some() || unsure {
        changed |= crate::spi_calls::get_one::<i32>("SELECT worlds._unshadow_past()").ok().flatten().unwrap_or(0) > 0;
    }
    if let Some(setting) = target {
        let made = crate::spi_calls::get_one_with_args::<i32>("SELECT worlds._shadow_past($1)", &[setting.as_str().into()])
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
            .unwrap_or(0);
        changed |= made > 0;
        SHADOWED.with(|s| *s.borrow_mut() = Some(setting));
    }
    changed
}

/// A rolled-back transaction may have made or dropped views.
pub fn on_abort() {
    if SHADOWED.with(|s| s.try_borrow().map(|s| s.is_some()).unwrap_or(true)) {
        UNSURE.with(|u| u.set(true));
    }
}

/// DISCARD dropped the session's temporary objects, the views among them.
pub fn forget() {
    SHADOWED.with(|s| *s.borrow_mut() = None);
    UNSURE.with(|u| u.set(false));
}
