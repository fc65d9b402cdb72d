//! The wire format of an upsert in a world: how the router (route/upsert.rs) hands the DO UPDATE part of an
//! INSERT ... ON CONFLICT to the conflict twin's INSTEAD OF trigger (storage/writes.rs), as text in the
//! twin's extra column: `<length of sql>:<sql><attnums>;<type oids>;<values as text[]>` (lists
//! comma-separated; the values are appended, as each row is inserted, only when the action uses the
//! statement's parameters). Storage owns it; the router writes it.
use pgrx::pg_sys;

/// The name of the conflict twin's extra column that carries the DO UPDATE action.
pub const ACTION_COLUMN: &str = "_w_upsert";
/// The alias the action gives the row the world already has.
pub const TARGET_ALIAS: &str = "_w_x";

/// The part written when the statement is analysed: the SELECT computing the updated row, the conflict
/// target's attnums, the parameters' types (the values follow).
pub fn head(sql: &str, match_attnos: &[i16], param_types: &[pg_sys::Oid]) -> String {
    let types = param_types.iter().map(|t| t.to_u32().to_string()).collect::<Vec<_>>().join(",");
    let matches = match_attnos.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    format!("{}:{sql}{matches};{types};", sql.len())
}

/// The trigger's side of `head` (and the values after it).
pub struct Decoded {
    pub sql: String,
    pub match_attnos: Vec<i16>,
    pub param_types: Vec<pg_sys::Oid>,
    pub param_values: Option<String>,
}

pub fn decode(value: &str) -> Option<Decoded> {
    let (len, rest) = value.split_once(':')?;
    let len: usize = len.parse().ok()?;
    if rest.len() < len || !rest.is_char_boundary(len) {
        return None;
    }
    let (sql, tail) = rest.split_at(len);
    let (matches, tail) = tail.split_once(';')?;
    let (types, values) = tail.split_once(';')?;
    let list = |s: &str| s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    let param_types: Vec<pg_sys::Oid> = list(types).into_iter().map(pg_sys::Oid::from_u32).collect();
    Some(Decoded {
        sql: sql.to_string(),
        match_attnos: list(matches).into_iter().map(|a| a as i16).collect(),
        param_values: (!param_types.is_empty()).then(|| values.to_string()),
        param_types,
    })
}
