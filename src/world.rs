//! The one resolver of a world's name or ID for the statements that act on it (MERGE, DRY RUN, REBASE,
//! DIFF, CHECK READS, UNDO, the dump). It gives the one `World` type (storage::overlay::World, re-exported
//! here), the same the routing uses: its row in worlds.world and its chain of layers.
//! Its errors are written here once: 3D000 (no such world; one merged or dropped meanwhile) and 0A000 (a
//! moment of the past, 'name@when', where only a live world can be used).
//!
//! (The routing resolves the session's setting to the same type in storage/overlay/worlds.rs, with
//! `world_by_num` as here; the plpgsql lifecycle (create, fork, alter, drop:
//! catalog/lifecycle.sql) resolves names with worlds._resolve, which asks this resolver: `_resolve_num`.)
use crate::api::raise;
use crate::spi_calls::Fresh;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use serde_json::Value;

pub use crate::storage::overlay::World;

/// A world of that name already merged whole at version `v` (its last merge): the tag that merge
/// returned (an approval repeated, or made twice at once, applies once).
pub(crate) fn merged_at_version(name: &str, v: i64) -> Option<Vec<Value>> {
    if live_named(name).is_some_and(|w| w.version != v) {
        return None;
    }
    crate::spi_calls::get_one_with_args::<i64>(
        "SELECT coalesce(e.rows, 0) FROM worlds.world w JOIN worlds.event e ON e.world = w.num
         WHERE (w.name = $1 OR w.id = $1) AND w.dropped IS NOT NULL AND w.version = $2 AND e.event LIKE 'merged into %'
           AND NOT EXISTS (SELECT 1 FROM worlds.world l WHERE l.name = w.name AND l.dropped IS NULL)
         ORDER BY e.seq DESC LIMIT 1",
        &[name.into(), v.into()],
    )
    .ok()
    .flatten()
    .map(|n| vec![serde_json::json!({ "tag": format!("MERGE {n}") })])
}

/// The world again, after waiting for its lock: another session may have merged or dropped it meanwhile
/// (3D000, by the name it was asked for).
pub(crate) fn resolve_again(world: &World) -> World {
    world_row("id = $1", world.id.as_str().into())
        .unwrap_or_else(|| raise("3D000", format!("world \"{}\" does not exist (it was merged or dropped meanwhile)", world.name)))
}

/// The live world named `name` (its name or its ID), for a statement that acts on it: 3D000 when there is
/// none, 0A000 for a moment of the past ('name@when'), which can only be read. A world past its TTL is
/// discarded first: it can't be merged, rebased or diffed any more.
pub fn resolve_world(name: &str) -> World {
    if unsafe { !pg_sys::XactReadOnly } {
        crate::spi_calls::run("SELECT worlds._expire()").ok();
    }
    resolve_live(name)
}

/// The live world named `name` (its name or its ID; a name first), or the resolver's error.
pub fn resolve_live(name: &str) -> World {
    live_named(name).unwrap_or_else(|| missing(name))
}

/// The live world of that name, or of that ID when the text has an ID's form (sql_text::live_world_query:
/// never both; an OR of the two scans an index whole).
fn live_named(name: &str) -> Option<World> {
    world_row(&format!("num = ({} LIMIT 1)", crate::sql_text::live_world_query(name)), name.into())
}

/// The resolver's error for a name that finds no live world: 0A000 for a moment ('name@when'), else 3D000.
pub fn missing(name: &str) -> ! {
    if name.contains('@') {
        refuse_moment(name);
    }
    raise("3D000", format!("world \"{name}\" does not exist"))
}

/// `worlds._resolve_num(name_or_id)`: the resolver, for the plpgsql lifecycle (`worlds._resolve`,
/// catalog/lifecycle.sql): the live world's number, or its error.
#[pg_extern(stable, parallel_safe)]
fn _resolve_num(name_or_id: Option<&str>) -> i32 {
    resolve_live(name_or_id.unwrap_or_default()).num
}

/// `worlds._world_missing(name_or_id)`: the resolver's error (for `worlds._resolve`, when the world its
/// statement's snapshot reads is gone).
#[pg_extern(stable, parallel_safe)]
fn _world_missing(name_or_id: Option<&str>) {
    missing(name_or_id.unwrap_or_default())
}

/// The live world that `condition` (on worlds.world, with `$1`) finds first, with its chain.
pub(crate) fn world_row(condition: &str, arg: DatumWithOid) -> Option<World> {
    let (num, version) = Spi::connect(|c| {
        c.fresh(&format!("SELECT num, version FROM worlds.world WHERE dropped IS NULL AND {condition} LIMIT 1"), None, &[arg])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .next()
            .map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<i64>(2).ok().flatten().unwrap_or(0)))
    })?;
    if num == 0 {
        // main, named where a world may be main (MERGE ... INTO main): no chain, no fork
        return Some(World::new(crate::storage::overlay::WorldData {
            num: 0,
            id: "main".into(),
            name: "main".into(),
            parent: None,
            version,
            fork_snapshot: None,
            merged_part: false,
            chain: Vec::new(),
            layer_snapshots: Vec::new(),
            main_snapshot: String::new(),
            read_only: false,
        }));
    }
    crate::storage::overlay::world_by_num(num)
}

/// 0A000: a moment of the past ('name@when') named where a live world is needed.
pub fn refuse_moment(name: &str) -> ! {
    raise(
        "0A000",
        format!("a world as it was ({name}) can only be read: in SWITCH, DIFF ... TO, or as the source of FORK WORLD / CREATE WORLD ... FROM"),
    )
}
