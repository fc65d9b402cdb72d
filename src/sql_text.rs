//! The one place pg_worlds writes SQL text's names and literals.
//!
//! A name or a literal that is already quoted travels as its own type, `QuotedName` or `SqlLiteral`, never
//! as a bare `String`: code that builds SQL can't then forget to quote one, or quote it twice. Both are
//! made only here, by Postgres's own functions (`quote_identifier`, `quote_literal_cstr`), or from names
//! Postgres itself printed quoted (`regclass::text`, `format('%I')`: `QuotedName::printed`). Values go as
//! parameters (`$1`) wherever a statement can take one; a literal is written only where the text itself is
//! what pg_worlds hands over (DIFF AS SQL, a view's comment, a row object's key names).
//!
//! Postgres reads such text under the settings of the moment: pg_worlds' internal work runs with the
//! settings it is written for (storage/mod.rs, `FIXED_SETTINGS`), and a literal from `quote_literal_cstr`
//! is written `E'...'` when it holds a backslash, so it reads the same under any
//! `standard_conforming_strings`.
//!
//! It imports nothing of pg_worlds: every room may use it.
use std::fmt;

/// An identifier, or a qualified name, as SQL text: quoted where Postgres needs quotes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuotedName(String);

impl QuotedName {
    /// One identifier, quoted as Postgres's quote_ident() quotes it (`orders`, `"Orders"`, `"a""b"`).
    pub fn ident(name: &str) -> Self {
        // (quote_identifier returns its argument itself when no quotes are needed: nothing to free then)
        QuotedName(quoted_by(name, |c| unsafe { pgrx::pg_sys::quote_identifier(c) }))
    }

    /// `schema.name`, each part quoted.
    pub fn qualified(schema: &str, name: &str) -> Self {
        QuotedName(format!("{}.{}", Self::ident(schema), Self::ident(name)))
    }

    /// A name Postgres printed already quoted: `regclass::text`, `format('%I.%I')`,
    /// `worlds._qualified(oid)`, quote_ident() in SQL.
    pub fn printed(text: String) -> Self {
        QuotedName(text)
    }

    /// A relation's `schema.name`, each part quoted, read from the catalog caches (no query). None: no
    /// such relation.
    pub fn of_relation(relid: pgrx::pg_sys::Oid) -> Option<Self> {
        unsafe {
            let name = pgrx::pg_sys::get_rel_name(relid);
            if name.is_null() {
                return None;
            }
            let schema = pgrx::pg_sys::get_namespace_name(pgrx::pg_sys::get_rel_namespace(relid));
            if schema.is_null() {
                return None;
            }
            let text = |p: *const std::ffi::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
            Some(Self::qualified(&text(schema), &text(name)))
        }
    }

    /// This name's column `column` as `name.column`.
    pub fn dot(&self, column: &str) -> String {
        format!("{}.{}", self.0, Self::ident(column))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for QuotedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for QuotedName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// One identifier, quoted (`QuotedName::ident`).
pub fn quote_ident(name: &str) -> QuotedName {
    QuotedName::ident(name)
}

/// Identifiers quoted and joined with `, `: a column list.
pub fn column_list<S: AsRef<str>>(names: &[S]) -> String {
    names.iter().map(|n| QuotedName::ident(n.as_ref()).0).collect::<Vec<_>>().join(", ")
}

/// A constant as SQL text: a quoted string (`'it''s'`, `E'a\\b'`), NULL, or a number or boolean written
/// out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlLiteral(String);

impl SqlLiteral {
    /// A string constant as Postgres's own quote_literal() writes it (E'...' with backslashes doubled when
    /// the text has one): it reads the same whatever the session's standard_conforming_strings says.
    pub fn text(s: &str) -> Self {
        SqlLiteral(quoted_by(s, |c| unsafe { pgrx::pg_sys::quote_literal_cstr(c) }))
    }

    /// A string constant cast to a type: `'...'::jsonb`. The type is a name Postgres printed
    /// (format_type()) or one of pg_worlds' own.
    pub fn cast(s: &str, type_name: &str) -> Self {
        SqlLiteral(format!("{}::{type_name}", Self::text(s).0))
    }

    pub fn null() -> Self {
        SqlLiteral("NULL".into())
    }

    pub fn boolean(b: bool) -> Self {
        SqlLiteral(b.to_string())
    }

    /// A JSON number as SQL text: its digits, which Postgres reads as numeric (exactly).
    pub fn number(n: &serde_json::Number) -> Self {
        SqlLiteral(n.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SqlLiteral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string constant (`SqlLiteral::text`).
pub fn quote_literal(s: &str) -> SqlLiteral {
    SqlLiteral::text(s)
}

/// A row of `alias` as a jsonb object of these columns: `jsonb_build_object('c', alias.c, ...)` (the key a
/// literal, the column a quoted name). jsonb_build_object takes at most 100 arguments: chunks of 50
/// columns, concatenated.
pub fn json_object_expr(alias: &str, cols: &[String]) -> String {
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

/// The key of a row of `alias` as the text Postgres writes for it: `alias.id::text`, `ROW(alias.a,
/// alias.b)::text`, or the whole row's for a table without a key.
pub fn key_text_expr(key_columns: &[String], alias: &str) -> String {
    match key_columns.len() {
        0 => format!("ROW({alias}.*)::text"),
        1 => format!("{alias}.{}::text", quote_ident(&key_columns[0])),
        _ => format!("ROW({})::text", key_columns.iter().map(|c| format!("{alias}.{}", quote_ident(c))).collect::<Vec<_>>().join(", ")),
    }
}

/// `a.k1 = b.k1 AND a.k2 = b.k2` over the key columns.
pub fn key_match(key_columns: &[String], a: &str, b: &str) -> String {
    key_columns.iter().map(|c| format!("{a}.{c} = {b}.{c}", c = quote_ident(c))).collect::<Vec<_>>().join(" AND ")
}

/// Names, literals or expressions written one after another with `sep` between them.
pub fn join<T: fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(sep)
}

/// `text` as one of Postgres's quoting functions writes it. A NUL can't be in a name or a text value: one
/// in `text` cuts it there, as Postgres would. What the function returns is freed unless it is its
/// argument (quote_identifier's answer when no quotes are needed).
fn quoted_by(text: &str, quote: impl FnOnce(*const std::ffi::c_char) -> *const std::ffi::c_char) -> String {
    let c = std::ffi::CString::new(text.split('\0').next().unwrap_or_default()).unwrap_or_default();
    let quoted = quote(c.as_ptr());
    unsafe {
        let out = std::ffi::CStr::from_ptr(quoted).to_string_lossy().into_owned();
        if quoted != c.as_ptr() {
            pgrx::pg_sys::pfree(quoted as *mut std::ffi::c_void);
        }
        out
    }
}

/// The query finding the live world a setting names (`$1`): its `num`. A text of an
/// ID's form (worlds_core::names::looks_like_id; no name has it) is looked up by ID, any other by name:
/// never both (issue 44: `name = $1 OR id = $1`, or a UNION of the two, was answered by scanning
/// world_live_name whole with the ID as a filter, the planner misled by a partial index that a long
/// transaction, such as SIMULATE's, fills with the dropped worlds it keeps from VACUUM while statistics
/// say it holds the few live ones: SIMULATE's time per world grew fourfold over a bench run). The ID's
/// lookup reads the ID's unique index alone (the fence keeps `dropped IS NULL` from making the partial
/// index of names a candidate). The resolver's (world.rs), the session's world (storage/overlay/worlds.rs), the
/// search path's (storage/search_path.rs) and the connection's (route/connect_name.rs).
pub fn live_world_query(setting: &str) -> &'static str {
    if worlds_core::names::looks_like_id(setting) {
        "SELECT num FROM (SELECT num, dropped FROM worlds.world WHERE id = $1 OFFSET 0) w WHERE dropped IS NULL"
    } else {
        "SELECT num FROM worlds.world WHERE dropped IS NULL AND name = $1"
    }
}
