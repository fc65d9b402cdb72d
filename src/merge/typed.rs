//! Rows read and written typed where that is exact, JSON where it isn't.
//!
//! The merge plans rows as JSON values (`worlds_core::merge::decide` compares them; DRY RUN shows them):
//! each side of a row is the object `to_jsonb(row)` gives. Building that object in SQL, printing it and
//! parsing it again per row was most of a planned merge's time outside its statements. A column of a
//! plain type (smallint, integer, bigint, boolean, text, varchar) has a JSON value that is its value
//! itself (`to_jsonb(5)` is `5`, `to_jsonb('a'::text)` is `"a"`): it is read as a Datum of its type and
//! made that value directly. The other columns of a side (numeric, timestamps, json, arrays, ...) come
//! in one jsonb object per side, as before. Either way the value is the one `to_jsonb` writes.
//!
//! Writing back (apply.rs): a statement whose rows' values are all such plain values of plain columns
//! gets them as one array per column of the column's type (`unnest($1::int8[], $2::text[], ...)`),
//! not as a jsonb array through `jsonb_populate_recordset`. Any other value (a RESOLVE row giving a
//! string for an integer, a number past the column's range) sends the statement the JSON way, so an
//! error is Postgres's own, worded as before.
use crate::sql_text::quote_ident;
use pgrx::prelude::*;
use serde_json::{Map, Value};

/// How a column's value is read and written.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    /// smallint, integer, bigint: read as int8; written with its bounds
    Int { min: i64, max: i64 },
    Bool,
    /// text, and varchar without a length (varchar(n) checks its length on the way in)
    Text,
    /// anything else: as to_jsonb writes it, in the side's jsonb object
    Json,
}

impl Kind {
    fn of(typid: pg_sys::Oid, typmod: i32) -> Kind {
        match typid {
            pg_sys::INT2OID => Kind::Int { min: i16::MIN as i64, max: i16::MAX as i64 },
            pg_sys::INT4OID => Kind::Int { min: i32::MIN as i64, max: i32::MAX as i64 },
            pg_sys::INT8OID => Kind::Int { min: i64::MIN, max: i64::MAX },
            pg_sys::BOOLOID => Kind::Bool,
            pg_sys::TEXTOID => Kind::Text,
            pg_sys::VARCHAROID if typmod < 0 => Kind::Text,
            _ => Kind::Json,
        }
    }
}

/// A table's live columns (attnum order) and how each is read.
pub(crate) struct TypedColumns {
    pub names: Vec<String>,
    pub kinds: Vec<Kind>,
    /// the names of the Json columns
    others: Vec<String>,
    /// the positions (in `names`) of the typed columns
    typed: Vec<usize>,
}

impl TypedColumns {
    pub fn of(relid: pg_sys::Oid) -> TypedColumns {
        let cols: Vec<(String, pg_sys::Oid, i32)> = Spi::connect(|c| {
            use crate::spi_calls::Fresh;
            c.fresh(
                "SELECT attname::text, atttypid, atttypmod FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                None,
                &[relid.into()],
            )
            .map(|r| {
                r.into_iter()
                    .filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<pg_sys::Oid>(2).ok()??, r.get::<i32>(3).ok()??)))
                    .collect()
            })
            .unwrap_or_default()
        });
        let kinds: Vec<Kind> = cols.iter().map(|(_, t, m)| Kind::of(*t, *m)).collect();
        let names: Vec<String> = cols.into_iter().map(|(n, _, _)| n).collect();
        let typed = (0..names.len()).filter(|i| kinds[*i] != Kind::Json).collect();
        let others = names.iter().zip(&kinds).filter(|(_, k)| **k == Kind::Json).map(|(n, _)| n.clone()).collect();
        TypedColumns { names, kinds, others, typed }
    }

    /// How many result columns `select` gives.
    pub fn width(&self) -> usize {
        self.typed.len() + 1
    }

    /// The side `alias` (a relation with the table's columns by name) as result columns: each typed
    /// column, then the jsonb object of the others.
    pub fn select(&self, alias: &str) -> String {
        let mut parts: Vec<String> = self
            .typed
            .iter()
            .map(|i| {
                let c = format!("{alias}.{}", quote_ident(&self.names[*i]));
                match self.kinds[*i] {
                    Kind::Int { .. } => format!("{c}::int8"),
                    Kind::Text => format!("{c}::text"),
                    _ => c,
                }
            })
            .collect();
        parts.push(if self.others.is_empty() { "NULL::jsonb".into() } else { crate::sql_text::json_object_expr(alias, &self.others) });
        parts.join(", ")
    }

    /// The side whose `select` columns start at `at` (1-based), as the object to_jsonb(row) gives.
    pub fn read(&self, r: &pgrx::spi::SpiHeapTupleData, at: usize) -> Map<String, Value> {
        let mut map = match r.get::<pgrx::JsonB>(at + self.typed.len()) {
            Ok(Some(pgrx::JsonB(Value::Object(m)))) => m,
            Ok(_) => Map::new(),
            Err(e) => crate::api::raise("XX000", format!("pg_worlds: {e}")),
        };
        for (n, i) in self.typed.iter().enumerate() {
            let ord = at + n;
            let v = match self.kinds[*i] {
                Kind::Int { .. } => r.get::<i64>(ord).map(|v| v.map(Value::from)),
                Kind::Bool => r.get::<bool>(ord).map(|v| v.map(Value::Bool)),
                _ => r.get::<String>(ord).map(|v| v.map(Value::String)),
            }
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
            .unwrap_or(Value::Null);
            map.insert(self.names[*i].clone(), v);
        }
        map
    }
}
