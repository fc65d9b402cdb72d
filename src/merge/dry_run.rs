//! MERGE ... DRY RUN: the plan as rows, with the TARGET fingerprint that pins what it saw.
use super::*;

pub(crate) fn target_fingerprint(plan: &[Planned]) -> i64 {
    // FNV-1a over what the merge saw of main for the rows it settles, kept to 53 bits (exact in JSON)
    let mut h: u64 = 0xcbf29ce484222325;
    for p in plan {
        for b in p.layout.table_name.as_str().bytes().chain(p.row.key.bytes()).chain(p.row.theirs.as_ref().map(|t| t.to_string()).unwrap_or_default().bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    (h & ((1u64 << 53) - 1)) as i64
}

pub(crate) fn dry_run_rows(plan: &[Planned]) -> Vec<Value> {
    // summary per table: what the merge does to it (conflicts not counted), destructive first
    let mut per_table: Vec<(String, Vec<DiffRow>)> = Vec::new();
    for p in plan {
        // every table the plan has rows of gets its summary, even when all of them conflict or change nothing
        let name = short_name(&p.table);
        let entry = match per_table.iter_mut().find(|(t, _)| *t == name) {
            Some(e) => e,
            None => {
                per_table.push((name.clone(), Vec::new()));
                per_table.last_mut().unwrap()
            }
        };
        if matches!(p.decision.outcome, Outcome::Conflict(_)) || p.decision.result == p.row.theirs {
            continue;
        }
        entry.1.push((p.row.key.clone(), p.row.theirs.clone(), p.decision.result.clone()));
    }
    per_table.sort_by(|a, b| counts(&b.1).0.cmp(&counts(&a.1).0).then(a.0.cmp(&b.0)));
    let mut out = Vec::new();
    for (t, rows) in &per_table {
        let (d, u, i) = counts(rows);
        out.push(serde_json::json!({
            "table": t, "id": null, "outcome": "summary",
            "detail": format!("{} deleted, {} updated, {} inserted", fmt_count(d), fmt_count(u), fmt_count(i)),
            "base": null, "ours": null, "theirs": null, "result": null, "postgres": null,
        }));
    }
    let order: Vec<String> = per_table.iter().map(|(t, _)| t.clone()).collect();
    let deletes = |p: &Planned| p.row.theirs.is_some() && p.decision.result.is_none() && !matches!(p.decision.outcome, Outcome::Conflict(_));
    let mut sorted: Vec<&Planned> = plan.iter().collect();
    sorted.sort_by_key(|p| order.iter().position(|t| *t == short_name(&p.table)).unwrap_or(usize::MAX));
    for p in sorted.iter().filter(|p| deletes(p)) {
        out.push(plan_row(p, "DELETE: the merge deletes this row".into()));
    }
    for p in sorted.iter().filter(|p| !deletes(p)) {
        let detail = match &p.decision.outcome {
            Outcome::Conflict(d) => d.clone(),
            Outcome::ByColumns => format!(
                "combined column by column{}",
                if p.merge_by_columns { " (the table merges by columns)" } else { "" }
            ),
            // the parent already has the row as the merge would leave it (both sides made the same change)
            Outcome::Apply if p.decision.result == p.row.theirs => "no change: the parent already has this row".to_string(),
            Outcome::Apply => change_kind(&p.row.theirs, &p.decision.result).to_string(),
            other => other.label().to_string(),
        };
        out.push(plan_row(p, detail));
    }
    out
}

pub(crate) fn plan_row(p: &Planned, detail: String) -> Value {
    let conflict = matches!(p.decision.outcome, Outcome::Conflict(_));
    serde_json::json!({
        "table": short_name(&p.table), "id": p.row.key, "outcome": p.decision.outcome.label(), "detail": detail,
        "base": p.row.base, "ours": p.row.ours, "theirs": p.row.theirs,
        "result": if conflict { Value::Null } else { p.decision.result.clone().unwrap_or(Value::Null) },
        // the spec's row in an attached folder; pg_worlds is Postgres itself: no separate copy to show
        "postgres": null,
    })
}
