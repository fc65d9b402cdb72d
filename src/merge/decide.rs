//! Step 4: the plan. For each table the world changed, its rows' three sides (gather.rs) and, for each row,
//! what to do with it: `worlds_core::merge::decide` (pure), settled by RESOLVE, BY COLUMNS (asked, or the
//! table's own merge_by_columns) and USING.
use super::*;

/// The plan's rows. `gathered`: tables whose rows were already gathered (by relid: lock.rs,
/// `main_rows_gathered`, gathered as it locked them); the other tables are gathered here.
pub(crate) fn plan_rows(
    layouts: &[std::rc::Rc<Layout>],
    world: &World,
    target_world: Option<&World>,
    req: &MergeRequest,
    resolve: &HashMap<(pg_sys::Oid, String), Pick>,
    only_keys: Option<&[(pg_sys::Oid, String)]>,
    mut gathered: HashMap<pg_sys::Oid, Vec<Changed>>,
) -> Vec<Planned> {
    let mut plan: Vec<Planned> = Vec::new();
    let base_world = world_by_num(world.num).and_then(|w| base_of(&w));
    for l in layouts {
        let mut t = match gathered.remove(&l.relid) {
            Some(rows) => TableChanges { layout: l.clone(), name: l.table_name.to_string(), rows },
            None => gather(l, world),
        };
        other_sides(l, &mut t.rows, base_world.as_ref(), target_world);
        let mbc = merge_by_columns(l);
        for row in t.rows {
            if let Some(keys) = only_keys {
                if !keys.iter().any(|(r, k)| *r == l.relid && *k == row.key) {
                    continue;
                }
            }
            let settle = Settle {
                resolve: resolve.get(&(l.relid, row.key.clone())).cloned(),
                by_columns: req.by_columns || mbc,
                using_ours: req.using_ours,
            };
            let given_row = matches!(settle.resolve, Some(Pick::Row(_)));
            let mut decision = decide(row.base.as_ref(), row.ours.as_ref(), row.theirs.as_ref(), &settle);
            if let (true, Some(Value::Object(result))) = (given_row, decision.result.as_mut()) {
                // a RESOLVE row's columns left out are NULL, as the merge writes them: shown so
                for c in live_columns(l.relid) {
                    result.entry(c).or_insert(Value::Null);
                }
            }
            plan.push(Planned { table: t.name.clone(), layout: l.clone(), merge_by_columns: mbc, row, decision });
        }
    }
    plan
}
