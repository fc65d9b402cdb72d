//! Step 7: what a merge that applied records. Its events (SHOW HISTORY; a partial merge moves the world's
//! version on), its leaving the review queue, its effects landed (sent into main by this transaction,
//! moved into a world), the world ended by a whole merge into its parent (unless worlds were forked from
//! it), and the agent's audit row.
use super::*;
use crate::spi_calls::written;

pub(crate) fn record(world: &World, target_num: i32, target_name: &str, partial: bool, applied: i64, deletes: i64) {
    Spi::connect_mut(|c| {
        if partial {
            written(c.update("UPDATE worlds.world SET version = version + 1, merged_part = true WHERE num = $1", None, &[world.num.into()]), "the world's version");
            written(
                c.update(
                    "INSERT INTO worlds.event (world, event, rows) VALUES ($1, 'merged part into ' || $3, $4), ($5, 'merged part of ' || $2, $4)",
                    None,
                    &[world.num.into(), world.name.clone().into(), target_name.into(), applied.into(), target_num.into()],
                ),
                "the merge's events",
            );
        } else {
            written(
                c.update(
                    "INSERT INTO worlds.event (world, event, rows) VALUES ($1, 'merged into ' || $3, $4), ($5, 'merged ' || $2, $4)",
                    None,
                    &[world.num.into(), world.name.clone().into(), target_name.into(), applied.into(), target_num.into()],
                ),
                "the merge's events",
            );
        }
    });
    crate::governance::reviews::leave(world.num, "merged");
    // a whole merge lands the world's effects: sent by this transaction into main, moved into a world
    let effects = if partial { 0 } else { crate::governance::outbox::land(world.num, target_num) };
    if !partial && target_num == world.parent.unwrap_or(0) {
        // a whole merge into the parent (named with INTO or not) ends the world (unless worlds were
        // forked from it)
        Spi::connect_mut(|c| {
            // its row FOR UPDATE: a CREATE WORLD forking it key-share locks that row, so a fork under
            // way is waited for (and seen below), and one that comes after waits and finds it gone
            written(c.update("SELECT 1 FROM worlds.world WHERE num = $1 FOR UPDATE", None, &[world.num.into()]), "the world's row lock");
            written(
                c.update(
                    "SELECT worlds._discard(w) FROM worlds.world w WHERE num = $1
                       AND NOT EXISTS (SELECT 1 FROM worlds.world c WHERE c.parent = w.num AND c.dropped IS NULL)",
                    None,
                    &[world.num.into()],
                ),
                "the merged world's end",
            );
        });
    }
    crate::governance::agents::audit_merge("merge", &world.name, Some(applied), Some(deletes), Some(target_name), Some(effects));
}
