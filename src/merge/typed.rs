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

    /// The side whose `select` columns start at `at` (0-based) in a row's deformed values (`values`,
    /// `nulls`: heap_deform_tuple's), as the object to_jsonb(row) gives: no SPI call per value, each Datum
    /// made its value directly.
    pub fn read_datums(&self, values: &[pg_sys::Datum], nulls: &[bool], at: usize) -> Map<String, Value> {
        use pgrx::datum::FromDatum;
        let j = at + self.typed.len();
        // SAFETY: the values are of the types `select` gave them (int8, bool, text, jsonb), deformed from a
        // tuple of the SPI result the caller holds
        let mut map = match unsafe { pgrx::JsonB::from_datum(values[j], nulls[j]) } {
            Some(pgrx::JsonB(Value::Object(m))) => m,
            _ => Map::new(),
        };
        for (n, i) in self.typed.iter().enumerate() {
            let (d, null) = (values[at + n], nulls[at + n]);
            let v = unsafe {
                match self.kinds[*i] {
                    Kind::Int { .. } => i64::from_datum(d, null).map(Value::from),
                    Kind::Bool => bool::from_datum(d, null).map(Value::Bool),
                    _ => String::from_datum(d, null).map(Value::String),
                }
            };
            map.insert(self.names[*i].clone(), v.unwrap_or(Value::Null));
        }
        map
    }
}

/// One column's values, as an array of its type.
enum Values {
    I16(Vec<Option<i16>>),
    I32(Vec<Option<i32>>),
    I64(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
    Text(Vec<Option<String>>),
}

impl Values {
    fn new(kind: Kind, n: usize) -> Option<Values> {
        Some(match kind {
            Kind::Int { min, .. } if min == i16::MIN as i64 => Values::I16(Vec::with_capacity(n)),
            Kind::Int { min, .. } if min == i32::MIN as i64 => Values::I32(Vec::with_capacity(n)),
            Kind::Int { .. } => Values::I64(Vec::with_capacity(n)),
            Kind::Bool => Values::Bool(Vec::with_capacity(n)),
            Kind::Text => Values::Text(Vec::with_capacity(n)),
            Kind::Json => return None,
        })
    }

    /// Adds one value; false when it is not a plain value of the column's type (the JSON way then).
    fn push(&mut self, kind: Kind, v: Option<&Value>) -> bool {
        let v = v.filter(|v| !v.is_null());
        match (self, v) {
            (Values::I16(a), None) => a.push(None),
            (Values::I32(a), None) => a.push(None),
            (Values::I64(a), None) => a.push(None),
            (Values::Bool(a), None) => a.push(None),
            (Values::Text(a), None) => a.push(None),
            (Values::Bool(a), Some(Value::Bool(b))) => a.push(Some(*b)),
            (Values::Text(a), Some(Value::String(s))) => a.push(Some(s.clone())),
            (vals, Some(Value::Number(n))) => {
                let Kind::Int { min, max } = kind else { return false };
                // (an integer as written: "5", not "5.0" or "5e0", which the JSON way refuses as an integer; as
                // serde_json keeps numbers as written, `as_i64` parses that text as an integer)
                let Some(i) = n.as_i64().filter(|i| (min..=max).contains(i)) else { return false };
                match vals {
                    Values::I16(a) => a.push(Some(i as i16)),
                    Values::I32(a) => a.push(Some(i as i32)),
                    Values::I64(a) => a.push(Some(i)),
                    _ => return false,
                }
            }
            _ => return false,
        }
        true
    }

    fn sql_type(&self) -> &'static str {
        match self {
            Values::I16(_) => "int2[]",
            Values::I32(_) => "int4[]",
            Values::I64(_) => "int8[]",
            Values::Bool(_) => "bool[]",
            Values::Text(_) => "text[]",
        }
    }

    fn datum(self) -> pgrx::datum::DatumWithOid<'static> {
        match self {
            Values::I16(a) => a.into(),
            Values::I32(a) => a.into(),
            Values::I64(a) => a.into(),
            Values::Bool(a) => a.into(),
            Values::Text(a) => a.into(),
        }
    }
}

/// Rows (JSON objects) of a table as a FROM item `r` with the columns `needed`, its parameters numbered
/// from `first`: typed arrays when every value of those columns is a plain value of its column's type,
/// else the jsonb array through jsonb_populate_recordset (all the table's columns). The FROM item's text
/// and its parameters.
pub(crate) fn rows_source(table: &str, relid: pg_sys::Oid, rows: Vec<&Value>, needed: &[&String], first: usize) -> (String, Vec<pgrx::datum::DatumWithOid<'static>>) {
    if let Some(typed) = typed_source(relid, &rows, needed, first) {
        return typed;
    }
    (format!("jsonb_populate_recordset(NULL::{table}, ${first}) r"), vec![pgrx::JsonB(Value::Array(rows.into_iter().cloned().collect())).into()])
}

fn typed_source(relid: pg_sys::Oid, rows: &[&Value], needed: &[&String], first: usize) -> Option<(String, Vec<pgrx::datum::DatumWithOid<'static>>)> {
    if needed.is_empty() {
        return None;
    }
    let columns = TypedColumns::of(relid);
    let mut arrays: Vec<(Kind, &String, Values)> = Vec::with_capacity(needed.len());
    for c in needed {
        let kind = columns.names.iter().position(|n| n == *c).map(|i| columns.kinds[i])?;
        arrays.push((kind, c, Values::new(kind, rows.len())?));
    }
    for row in rows.iter().copied() {
        let Value::Object(row) = row else { return None };
        for (kind, name, vals) in arrays.iter_mut() {
            if !vals.push(*kind, row.get(name.as_str())) {
                return None;
            }
        }
    }
    // (each array through a subquery: the planner doesn't count its elements, and plans the join to the
    // table as for jsonb_populate_recordset (an index probe per row); counted, 10,000 rows into 1M made
    // it scan the whole index for a merge join, 2.6 times as long)
    let params = arrays.iter().enumerate().map(|(i, (_, _, v))| format!("(SELECT ${}::{})", first + i, v.sql_type())).collect::<Vec<_>>().join(", ");
    let names = arrays.iter().map(|(_, n, _)| quote_ident(n).to_string()).collect::<Vec<_>>().join(", ");
    Some((format!("unnest({params}) AS r({names})"), arrays.into_iter().map(|(_, _, v)| v.datum()).collect()))
}
