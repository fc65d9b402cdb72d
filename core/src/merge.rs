//! The three-way merge decision for one row, as a pure function.
//!
//! base: the row in the parent at the fork point; ours: the world's row; theirs: the parent's row now.
//! Each is a JSON object of the table's columns, or None when the row does not exist there.
//! Settling order for a row both sides changed: RESOLVE, then BY COLUMNS, then USING; otherwise a
//! conflict. The outcomes are the spec's (MERGE ... DRY RUN).
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum Pick {
    Ours,
    Theirs,
    Delete,
    Row(Value),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settle {
    /// RESOLVE for this row, if given
    pub resolve: Option<Pick>,
    /// BY COLUMNS (the clause, or the table's merge_by_columns setting)
    pub by_columns: bool,
    /// USING OURS (Some(true)) / USING THEIRS (Some(false))
    pub using_ours: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// only this world changed the row (or both made the same change): result is applied
    Apply,
    /// both changed it and nothing settles it; detail says which columns each side changed
    Conflict(String),
    ByColumns,
    PickedOurs,
    PickedTheirs,
    PickedRow,
    KeptOurs,
    KeptTheirs,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Apply => "apply",
            Outcome::Conflict(_) => "conflict",
            Outcome::ByColumns => "by columns",
            Outcome::PickedOurs => "picked ours",
            Outcome::PickedTheirs => "picked theirs",
            Outcome::PickedRow => "picked row",
            Outcome::KeptOurs => "kept ours",
            Outcome::KeptTheirs => "kept theirs",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub outcome: Outcome,
    /// the row after the merge (None: no row); meaningless for a conflict
    pub result: Option<Value>,
}

/// Columns whose values differ between two versions of a row (a missing row differs in every column).
pub fn changed_columns(a: Option<&Value>, b: Option<&Value>) -> Vec<String> {
    let empty = Map::new();
    let am = a.and_then(Value::as_object);
    let bm = b.and_then(Value::as_object);
    if am.is_none() != bm.is_none() {
        let m = am.or(bm).unwrap_or(&empty);
        let mut cols: Vec<String> = m.keys().cloned().collect();
        cols.sort();
        return cols;
    }
    let (am, bm) = (am.unwrap_or(&empty), bm.unwrap_or(&empty));
    // (the maps' keys in order, as serde_json's map keeps them: one walk over both, no lookups)
    if am.keys().is_sorted() && bm.keys().is_sorted() {
        let mut cols = Vec::new();
        let (mut a, mut b) = (am.iter().peekable(), bm.iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => return cols,
                (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                    std::cmp::Ordering::Equal => {
                        if va != vb {
                            cols.push((*ka).clone());
                        }
                        a.next();
                        b.next();
                    }
                    std::cmp::Ordering::Less => {
                        cols.push((*ka).clone());
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        cols.push((*kb).clone());
                        b.next();
                    }
                },
                (Some((ka, _)), None) => {
                    cols.push((*ka).clone());
                    a.next();
                }
                (None, Some((kb, _))) => {
                    cols.push((*kb).clone());
                    b.next();
                }
            }
        }
    }
    let mut cols: Vec<String> = am
        .keys()
        .chain(bm.keys())
        .filter(|k| am.get(*k) != bm.get(*k))
        .cloned()
        .collect();
    cols.sort();
    cols.dedup();
    cols
}

pub fn decide(base: Option<&Value>, ours: Option<&Value>, theirs: Option<&Value>, settle: &Settle) -> Decision {
    let apply = |row: Option<&Value>, outcome| Decision { outcome, result: row.cloned() };
    // the parent didn't change it: ours goes in as it is
    if theirs == base {
        return apply(ours, Outcome::Apply);
    }
    // both deleted it: nothing is left to disagree on
    if ours.is_none() && theirs.is_none() {
        return apply(None, Outcome::Apply);
    }
    // the world didn't change it (only possible for rows listed explicitly): the parent's stays
    if ours == base {
        return apply(theirs, Outcome::Apply);
    }
    if let Some(pick) = &settle.resolve {
        return match pick {
            Pick::Ours => apply(ours, Outcome::PickedOurs),
            Pick::Theirs => apply(theirs, Outcome::PickedTheirs),
            Pick::Delete => Decision { outcome: Outcome::PickedRow, result: None },
            Pick::Row(v) => Decision { outcome: Outcome::PickedRow, result: Some(v.clone()) },
        };
    }
    let ours_cols = changed_columns(base, ours);
    let theirs_cols = changed_columns(base, theirs);
    if settle.by_columns {
        if let (Some(_), Some(o), Some(t)) = (base, ours, theirs) {
            let (o, t) = (o.as_object().unwrap(), t.as_object().unwrap());
            // a column both changed conflicts even when both wrote the same value: each side decided on the
            // base's value, and taking one of them would lose the other's update (as two v = v - 25 would)
            let both: Vec<&String> = ours_cols.iter().filter(|c| theirs_cols.contains(c)).collect();
            if both.is_empty() {
                let mut merged = t.clone();
                for c in &ours_cols {
                    if let Some(v) = o.get(c) {
                        merged.insert(c.clone(), v.clone());
                    }
                }
                return Decision { outcome: Outcome::ByColumns, result: Some(Value::Object(merged)) };
            }
            if let Some(use_ours) = settle.using_ours {
                // USING settles only the columns both changed; each side's other changes still merge
                let mut merged = t.clone();
                for c in ours_cols.iter().filter(|c| use_ours || !both.contains(c)) {
                    if let Some(v) = o.get(c) {
                        merged.insert(c.clone(), v.clone());
                    }
                }
                let outcome = if use_ours { Outcome::KeptOurs } else { Outcome::KeptTheirs };
                return Decision { outcome, result: Some(Value::Object(merged)) };
            }
        }
    }
    match settle.using_ours {
        Some(true) => apply(ours, Outcome::KeptOurs),
        Some(false) => apply(theirs, Outcome::KeptTheirs),
        None => Decision { outcome: Outcome::Conflict(conflict_detail(base, ours, theirs, &ours_cols, &theirs_cols)), result: None },
    }
}

fn side(row: Option<&Value>, base: Option<&Value>, cols: &[String]) -> String {
    match (base.is_some(), row.is_some()) {
        (true, false) => "deleted it".into(),
        (false, true) => "inserted it".into(),
        _ => format!("changed {}", cols.join(", ")),
    }
}

fn conflict_detail(base: Option<&Value>, ours: Option<&Value>, theirs: Option<&Value>, oc: &[String], tc: &[String]) -> String {
    format!("this world {}; the parent {}", side(ours, base, oc), side(theirs, base, tc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(base: Option<Value>, ours: Option<Value>, theirs: Option<Value>, s: Settle) -> Decision {
        decide(base.as_ref(), ours.as_ref(), theirs.as_ref(), &s)
    }

    #[test]
    fn only_ours_changed_applies_ours() {
        let r = d(Some(json!({"id":1,"s":"a"})), Some(json!({"id":1,"s":"b"})), Some(json!({"id":1,"s":"a"})), Settle::default());
        assert_eq!(r.outcome, Outcome::Apply);
        assert_eq!(r.result, Some(json!({"id":1,"s":"b"})));
    }

    #[test]
    fn insert_and_delete_apply() {
        assert_eq!(d(None, Some(json!({"id":1})), None, Settle::default()).result, Some(json!({"id":1})));
        let del = d(Some(json!({"id":1})), None, Some(json!({"id":1})), Settle::default());
        assert_eq!((del.outcome, del.result), (Outcome::Apply, None));
    }

    #[test]
    fn same_change_both_sides_conflicts() {
        // both sides ran v = v - 25 on 1000: taking either 975 would lose the other's update
        let r = d(Some(json!({"id":1,"v":1000})), Some(json!({"id":1,"v":975})), Some(json!({"id":1,"v":975})), Settle::default());
        assert_eq!(r.outcome, Outcome::Conflict("this world changed v; the parent changed v".into()));
        let s = Settle { by_columns: true, ..Default::default() };
        let c = d(Some(json!({"id":1,"v":1000,"n":"a"})), Some(json!({"id":1,"v":975,"n":"a"})), Some(json!({"id":1,"v":975,"n":"b"})), s);
        assert!(matches!(c.outcome, Outcome::Conflict(_)));
        // both added the same row: a clash, not one row
        let i = d(None, Some(json!({"id":1,"v":1})), Some(json!({"id":1,"v":1})), Settle::default());
        assert!(matches!(i.outcome, Outcome::Conflict(_)));
        // both deleted it: nothing to disagree on
        let del = d(Some(json!({"id":1})), None, None, Settle::default());
        assert_eq!((del.outcome, del.result), (Outcome::Apply, None));
    }

    #[test]
    fn both_changed_conflicts_naming_columns() {
        let r = d(Some(json!({"id":1,"s":"a","q":1})), Some(json!({"id":1,"s":"b","q":1})), Some(json!({"id":1,"s":"a","q":2})), Settle::default());
        assert_eq!(r.outcome, Outcome::Conflict("this world changed s; the parent changed q".into()));
        let del = d(Some(json!({"id":1,"s":"a"})), None, Some(json!({"id":1,"s":"c"})), Settle::default());
        assert_eq!(del.outcome, Outcome::Conflict("this world deleted it; the parent changed s".into()));
    }

    #[test]
    fn by_columns_combines_disjoint_columns() {
        let s = Settle { by_columns: true, ..Default::default() };
        let r = d(Some(json!({"id":1,"s":"a","q":1})), Some(json!({"id":1,"s":"b","q":1})), Some(json!({"id":1,"s":"a","q":2})), s.clone());
        assert_eq!(r.outcome, Outcome::ByColumns);
        assert_eq!(r.result, Some(json!({"id":1,"s":"b","q":2})));
        // the same column changed differently still conflicts
        let c = d(Some(json!({"id":1,"s":"a"})), Some(json!({"id":1,"s":"b"})), Some(json!({"id":1,"s":"c"})), s);
        assert!(matches!(c.outcome, Outcome::Conflict(_)));
    }

    #[test]
    fn settling_order_resolve_then_by_columns_then_using() {
        let base = Some(json!({"id":1,"s":"a","q":1}));
        let ours = Some(json!({"id":1,"s":"b","q":1}));
        let theirs = Some(json!({"id":1,"s":"a","q":2}));
        let all = Settle { resolve: Some(Pick::Theirs), by_columns: true, using_ours: Some(true) };
        assert_eq!(d(base.clone(), ours.clone(), theirs.clone(), all).outcome, Outcome::PickedTheirs);
        let bc = Settle { resolve: None, by_columns: true, using_ours: Some(false) };
        assert_eq!(d(base.clone(), ours.clone(), theirs.clone(), bc).outcome, Outcome::ByColumns);
        let using = Settle { using_ours: Some(false), ..Default::default() };
        let r = d(base, ours, theirs.clone(), using);
        assert_eq!((r.outcome, r.result), (Outcome::KeptTheirs, theirs));
    }

    #[test]
    fn by_columns_with_using_settles_only_the_clashing_columns() {
        let base = Some(json!({"id":7,"status":"new","note":"x","qty":1}));
        let ours = Some(json!({"id":7,"status":"paid","note":"x","qty":2}));
        let theirs = Some(json!({"id":7,"status":"void","note":"n","qty":1}));
        let s = |o| Settle { resolve: None, by_columns: true, using_ours: Some(o) };
        let r = d(base.clone(), ours.clone(), theirs.clone(), s(true));
        assert_eq!((r.outcome, r.result), (Outcome::KeptOurs, Some(json!({"id":7,"status":"paid","note":"n","qty":2}))));
        let r = d(base, ours, theirs, s(false));
        assert_eq!((r.outcome, r.result), (Outcome::KeptTheirs, Some(json!({"id":7,"status":"void","note":"n","qty":2}))));
    }

    #[test]
    fn resolve_delete_and_row() {
        let s = Settle { resolve: Some(Pick::Delete), ..Default::default() };
        let r = d(Some(json!({"id":1,"s":"a"})), Some(json!({"id":1,"s":"b"})), Some(json!({"id":1,"s":"c"})), s);
        assert_eq!((r.outcome, r.result), (Outcome::PickedRow, None));
        let row = json!({"id":1,"s":"paid"});
        let s = Settle { resolve: Some(Pick::Row(row.clone())), ..Default::default() };
        let r = d(Some(json!({"id":1,"s":"a"})), Some(json!({"id":1,"s":"b"})), Some(json!({"id":1,"s":"c"})), s);
        assert_eq!(r.result, Some(row));
    }

    /// Property: against a small reference model, over every combination of base/ours/theirs drawn from a
    /// few versions and every clause combination.
    #[test]
    fn property_against_reference_model() {
        let versions = [None, Some(json!({"id":1,"a":0,"b":0})), Some(json!({"id":1,"a":1,"b":0})), Some(json!({"id":1,"a":0,"b":1})), Some(json!({"id":1,"a":2,"b":2}))];
        let picks = [None, Some(Pick::Ours), Some(Pick::Theirs), Some(Pick::Delete)];
        for base in &versions {
            for ours in &versions {
                for theirs in &versions {
                    for pick in &picks {
                        for by_columns in [false, true] {
                            for using in [None, Some(true), Some(false)] {
                                let s = Settle { resolve: pick.clone(), by_columns, using_ours: using };
                                let got = decide(base.as_ref(), ours.as_ref(), theirs.as_ref(), &s);
                                let want = reference(base, ours, theirs, &s);
                                assert_eq!(got.result.clone(), want, "base {base:?} ours {ours:?} theirs {theirs:?} {s:?} -> {got:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The reference: the result row, or None for no row / a conflict (conflicts compared by result None
    /// and checked separately above).
    fn reference(base: &Option<Value>, ours: &Option<Value>, theirs: &Option<Value>, s: &Settle) -> Option<Value> {
        if theirs == base {
            return ours.clone();
        }
        if ours.is_none() && theirs.is_none() {
            return None;
        }
        if ours == base {
            return theirs.clone();
        }
        match &s.resolve {
            Some(Pick::Ours) => return ours.clone(),
            Some(Pick::Theirs) => return theirs.clone(),
            Some(Pick::Delete) => return None,
            Some(Pick::Row(v)) => return Some(v.clone()),
            None => {}
        }
        if s.by_columns {
            if let (Some(b), Some(o), Some(t)) = (base, ours, theirs) {
                let mut out = t.as_object().unwrap().clone();
                let mut ok = true;
                for (k, bv) in b.as_object().unwrap() {
                    let (ov, tv) = (&o[k], &t[k]);
                    if ov != bv && tv != bv {
                        ok = false;
                    }
                    if ov != bv {
                        out.insert(k.clone(), ov.clone());
                    }
                }
                if ok {
                    return Some(Value::Object(out));
                }
                if let Some(use_ours) = s.using_ours {
                    // column by column: a column both changed differently goes to the side USING names
                    let mut out = t.as_object().unwrap().clone();
                    for (k, bv) in b.as_object().unwrap() {
                        let (ov, tv) = (&o[k], &t[k]);
                        if ov != bv && (tv == bv || ov == tv || use_ours) {
                            out.insert(k.clone(), ov.clone());
                        }
                    }
                    return Some(Value::Object(out));
                }
            }
        }
        match s.using_ours {
            Some(true) => ours.clone(),
            Some(false) => theirs.clone(),
            None => None,
        }
    }
}
