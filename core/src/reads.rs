//! Stale reads (spec, "Stale reads"): what a world read, kept as fixed-size entries, and the pure parts
//! of judging a change of its parent against them.
//!
//! A read of a table is one of:
//! - a **key**: a lookup of one row by its (single-column) key, kept as the hash of the key's text;
//! - a **scan** with conditions of the form column op constant, joined by AND (`=`, `<`, `<=`, `>`,
//!   `>=`, `IN`, `IS NULL`, `LIKE 'prefix%'`): it read the rows those conditions match;
//! - the **whole table**: a scan without such a condition, or past the limits below.
//!
//! Each carries the columns the statement used of the table. A changed row holds the merge when it was
//! added or deleted, or when it changed a column read, and (for a scan) when it matched the conditions
//! before or after the change.

/// Past this many keys of one table, its reads count as the whole table.
pub const MAX_KEYS: u32 = 10_000;
/// Past this many distinct filtered scans (ranges included) of one table, the same.
pub const MAX_SCANS: u32 = 1_000;
/// The bytes a scan's conditions take in shared memory; longer ones lose conditions (reading more).
pub const PRED_BYTES: usize = 200;

/// The columns of a table a statement used, by attnum (1..=256; a column past 256, or a whole-row
/// reference, counts as every column).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Columns(pub [u64; 4]);

impl Columns {
    pub const ALL: Columns = Columns([u64::MAX; 4]);

    pub fn add(&mut self, attno: i32) {
        if attno <= 0 || attno > 256 {
            *self = Columns::ALL;
        } else {
            let b = (attno - 1) as usize;
            self.0[b / 64] |= 1u64 << (b % 64);
        }
    }

    pub fn has(&self, attno: i32) -> bool {
        if attno <= 0 || attno > 256 {
            return self.0.iter().any(|w| *w != 0);
        }
        let b = (attno - 1) as usize;
        self.0[b / 64] & (1u64 << (b % 64)) != 0
    }

    pub fn union(&self, o: &Columns) -> Columns {
        Columns([self.0[0] | o.0[0], self.0[1] | o.0[1], self.0[2] | o.0[2], self.0[3] | o.0[3]])
    }

    /// Every column of `o` is here too.
    pub fn covers(&self, o: &Columns) -> bool {
        (0..4).all(|i| self.0[i] & o.0[i] == o.0[i])
    }

    pub fn any_of(&self, attnos: &[i32]) -> bool {
        attnos.iter().any(|a| self.has(*a))
    }
}

/// How a condition compares its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// column op constant (op: `=`, `<`, `<=`, `>`, `>=`, or `~~` for LIKE 'prefix%')
    Op,
    /// constant op column
    OpCommuted,
    /// column = ANY (array constant): IN
    AnyEq,
    /// column IS NULL
    IsNull,
}

/// One condition of a scan: column, operator (a built-in operator's oid), the constant's type (a
/// built-in type) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conjunct {
    pub attno: i16,
    pub test: Test,
    pub opno: u32,
    pub typ: u32,
    pub value: String,
}

/// Is `pattern` a LIKE pattern that matches a prefix (or one exact text): no wildcard but one `%` at
/// its end, no escape?
pub fn like_prefix(pattern: &str) -> bool {
    let body = pattern.strip_suffix('%').unwrap_or(pattern);
    !body.contains(['%', '_', '\\'])
}

/// The operators a condition may use, by name.
pub fn comparison(opname: &str) -> bool {
    matches!(opname, "=" | "<" | "<=" | ">" | ">=" | "~~")
}

fn test_code(t: Test) -> u8 {
    match t {
        Test::Op => 0,
        Test::OpCommuted => 1,
        Test::AnyEq => 2,
        Test::IsNull => 3,
    }
}

fn test_of(c: u8) -> Option<Test> {
    Some(match c {
        0 => Test::Op,
        1 => Test::OpCommuted,
        2 => Test::AnyEq,
        3 => Test::IsNull,
        _ => return None,
    })
}

/// The conditions as bytes of at most PRED_BYTES, in a canonical order (the same scan run again is
/// the same bytes). Conditions that don't fit are left out, longest first: the scan then reads more
/// rows, never fewer. None: none fits (it reads the whole table).
pub fn encode(conjuncts: &[Conjunct]) -> Option<Vec<u8>> {
    let mut cs: Vec<&Conjunct> = conjuncts.iter().collect();
    cs.sort_by(|a, b| (a.attno, test_code(a.test), a.opno, &a.value).cmp(&(b.attno, test_code(b.test), b.opno, &b.value)));
    cs.dedup();
    let size = |cs: &[&Conjunct]| 1 + cs.iter().map(|c| 2 + 1 + 4 + 4 + 2 + c.value.len()).sum::<usize>();
    while !cs.is_empty() && size(&cs) > PRED_BYTES {
        let longest = cs.iter().enumerate().max_by_key(|(_, c)| c.value.len()).map(|(i, _)| i).unwrap();
        cs.remove(longest);
    }
    if cs.is_empty() {
        return None;
    }
    let mut out = vec![cs.len() as u8];
    for c in cs {
        out.extend_from_slice(&c.attno.to_le_bytes());
        out.push(test_code(c.test));
        out.extend_from_slice(&c.opno.to_le_bytes());
        out.extend_from_slice(&c.typ.to_le_bytes());
        out.extend_from_slice(&(c.value.len() as u16).to_le_bytes());
        out.extend_from_slice(c.value.as_bytes());
    }
    Some(out)
}

pub fn decode(bytes: &[u8]) -> Option<Vec<Conjunct>> {
    let n = *bytes.first()? as usize;
    let mut at = 1;
    let mut take = |k: usize| -> Option<&[u8]> {
        let s = bytes.get(at..at + k)?;
        at += k;
        Some(s)
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let attno = i16::from_le_bytes(take(2)?.try_into().ok()?);
        let test = test_of(take(1)?[0])?;
        let opno = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let typ = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let value = String::from_utf8(take(len)?.to_vec()).ok()?;
        out.push(Conjunct { attno, test, opno, typ, value });
    }
    Some(out)
}

/// FNV-1a: keys' texts and scans' bytes as shared memory keys them.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The names SQL needs to test a condition on a row: the column, the operator's name, the types its
/// sides are cast to (qualified), and the constant's place in the text array parameter.
pub struct ConjunctSql<'a> {
    pub column: &'a str,
    pub opname: &'a str,
    pub left_type: &'a str,
    pub right_type: &'a str,
    pub param: usize,
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The condition as SQL over the record `row` (`(row).col OPERATOR(pg_catalog.=) ($2[3])::pg_catalog.int4`).
/// `values` is the name of the text array the constants come in. Operators are pg_catalog's only.
pub fn conjunct_sql(test: Test, c: &ConjunctSql, row: &str, values: &str) -> String {
    let col = format!("({row}).{}", quote_ident(c.column));
    let val = format!("({values}[{}])", c.param);
    match test {
        Test::IsNull => format!("{col} IS NULL"),
        Test::Op => format!("({col})::{} OPERATOR(pg_catalog.{}) {val}::{}", c.left_type, c.opname, c.right_type),
        Test::OpCommuted => format!("{val}::{} OPERATOR(pg_catalog.{}) ({col})::{}", c.left_type, c.opname, c.right_type),
        Test::AnyEq => format!("({col})::{} OPERATOR(pg_catalog.{}) ANY ({val}::{}[])", c.left_type, c.opname, c.right_type),
    }
}

/// "accounts/1, accounts/2" (10 at most, then how many more).
pub fn rows_named(rows: &[String]) -> String {
    let shown = rows.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if rows.len() > 10 {
        format!("{shown} and {} more", rows.len() - 10)
    } else {
        shown
    }
}

/// The refusal a person meets: "merging payout read rows that changed since it forked: accounts/1;
/// nothing was merged: redo the work in a new world forked from now".
pub fn refusal(verb: &str, world: &str, what: &str) -> String {
    format!("{verb} {world} {what}; nothing was {}: redo the work in a new world forked from now", if verb == "rebasing" { "changed" } else { "merged" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(attno: i16, test: Test, value: &str) -> Conjunct {
        Conjunct { attno, test, opno: 96, typ: 23, value: value.into() }
    }

    #[test]
    fn columns() {
        let mut s = Columns::default();
        s.add(1);
        s.add(70);
        assert!(s.has(1) && s.has(70) && !s.has(2));
        assert!(s.any_of(&[3, 70]) && !s.any_of(&[2, 3]));
        let mut all = Columns::default();
        all.add(0);
        assert_eq!(all, Columns::ALL);
        assert!(all.covers(&s) && !s.covers(&all));
        assert!(!Columns::default().any_of(&[1]));
    }

    #[test]
    fn encoding_is_canonical_and_bounded() {
        let a = vec![c(2, Test::Op, "ana"), c(1, Test::IsNull, "")];
        let b = vec![c(1, Test::IsNull, ""), c(2, Test::Op, "ana"), c(2, Test::Op, "ana")];
        assert_eq!(encode(&a), encode(&b));
        assert_eq!(decode(&encode(&a).unwrap()).unwrap(), vec![c(1, Test::IsNull, ""), c(2, Test::Op, "ana")]);
        // too long: the longest condition goes (the scan reads more), then none fits: the whole table
        let long = vec![c(1, Test::Op, &"x".repeat(300)), c(2, Test::Op, "b")];
        assert_eq!(decode(&encode(&long).unwrap()).unwrap(), vec![c(2, Test::Op, "b")]);
        assert!(encode(&[c(1, Test::AnyEq, &"9".repeat(400))]).is_none());
        assert!(encode(&[]).is_none());
        assert!(encode(&a).unwrap().len() <= PRED_BYTES);
        assert!(decode(&[3, 1]).is_none());
    }

    #[test]
    fn like_prefixes_and_operators() {
        assert!(like_prefix("abc%") && like_prefix("abc") && like_prefix("%"));
        assert!(!like_prefix("%abc") && !like_prefix("a_c%") && !like_prefix("a%c") && !like_prefix("a\\%"));
        assert!(comparison("=") && comparison(">=") && comparison("~~"));
        assert!(!comparison("<>") && !comparison("~~*") && !comparison("@@"));
    }

    #[test]
    fn sql_of_conditions() {
        let x = ConjunctSql { column: "owner", opname: "=", left_type: "text", right_type: "text", param: 3 };
        assert_eq!(conjunct_sql(Test::Op, &x, "x.b", "$2"), "((x.b).\"owner\")::text OPERATOR(pg_catalog.=) ($2[3])::text");
        assert_eq!(conjunct_sql(Test::IsNull, &x, "x.b", "$2"), "(x.b).\"owner\" IS NULL");
        assert_eq!(conjunct_sql(Test::AnyEq, &x, "x.a", "$2"), "((x.a).\"owner\")::text OPERATOR(pg_catalog.=) ANY (($2[3])::text[])");
        assert_eq!(conjunct_sql(Test::OpCommuted, &x, "r", "v"), "(v[3])::text OPERATOR(pg_catalog.=) ((r).\"owner\")::text");
    }

    #[test]
    fn messages() {
        assert_eq!(
            refusal("merging", "payout", "read rows that changed since it forked: accounts/1"),
            "merging payout read rows that changed since it forked: accounts/1; nothing was merged: redo the work in a new world forked from now"
        );
        let many: Vec<String> = (1..=12).map(|i| format!("t/{i}")).collect();
        assert_eq!(rows_named(&many), "t/1, t/2, t/3, t/4, t/5, t/6, t/7, t/8, t/9, t/10 and 2 more");
        assert_ne!(hash(b"1"), hash(b"2"));
    }
}
