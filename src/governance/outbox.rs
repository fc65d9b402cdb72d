//! The effects outbox (outbox.sql): what a world would send once it lands. A NOTIFY statement inside a
//! world is kept by the ProcessUtility hook; a `pg_notify()` call in a query the router sends into a world
//! is pointed at `worlds._world_notify`, which keeps it while the session is in a world and notifies as
//! Postgres does otherwise. Merge policies count them (max_effects, effects_per_hour, review_channels).
use crate::api::raise;
use pgrx::prelude::*;

/// Keeps an effect in the world's outbox (as Postgres checks a NOTIFY: a channel name, at most 63
/// bytes; a payload under 8000 bytes).
pub fn keep(world_num: i32, channel: &str, payload: &str) {
    if channel.is_empty() {
        raise("22023", "channel name cannot be empty");
    }
    if channel.len() >= pg_sys::NAMEDATALEN as usize {
        raise("22023", "channel name too long");
    }
    if payload.len() >= 8000 {
        raise("22023", "payload string too long");
    }
    crate::storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.outbox (world, channel, payload) VALUES ($1, $2, $3)",
            &[world_num.into(), channel.into(), payload.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    });
}

/// The world a NOTIFY of this session goes to (None: main, which sends it).
pub fn session_world_num() -> Option<i32> {
    crate::storage::overlay::routing_world().filter(|w| w.num > 0 && !w.read_only).map(|w| w.num)
}

/// `pg_notify(channel, payload)` as a world runs it: kept in the world's outbox (sent at its merge).
#[pg_extern(volatile, parallel_unsafe)]
fn _world_notify(channel: Option<&str>, payload: Option<&str>) {
    let channel = channel.unwrap_or_default();
    let payload = payload.unwrap_or_default();
    match session_world_num() {
        Some(num) => keep(num, channel, payload),
        None => {
            crate::spi_calls::run_with_args("SELECT pg_catalog.pg_notify($1, $2)", &[channel.into(), payload.into()])
                .unwrap_or_else(|e| raise("XX000", format!("{e}")));
        }
    }
}

/// The oid of worlds._world_notify(text, text), looked up where the router needs it (rarely: a query
/// calling pg_notify inside a world).
pub fn world_notify_oid() -> pg_sys::Oid {
    crate::spi_calls::get_one::<pg_sys::Oid>("SELECT to_regprocedure('worlds._world_notify(text, text)')::oid")
        .ok()
        .flatten()
        .unwrap_or(pg_sys::Oid::INVALID)
}

/// The world's effects: (count, channels in first-queued order).
pub fn effects(world_num: i32) -> (i64, Vec<String>) {
    crate::storage::as_internal(|| {
        let n = crate::spi_calls::get_one_with_args::<i64>("SELECT count(*) FROM worlds.outbox WHERE world = $1", &[world_num.into()])
            .ok()
            .flatten()
            .unwrap_or(0);
        let channels = crate::spi_calls::rows(
            "SELECT channel FROM worlds.outbox WHERE world = $1 GROUP BY channel ORDER BY min(seq)",
            None,
            &[world_num.into()],
            |t| t.filter_map(|r| r.get::<String>(1).ok().flatten()).collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        (n, channels)
    })
}

/// At a whole merge: into main, the world's effects are sent (in order, by the merge's transaction);
/// into another world, they move to its outbox. Returns how many.
pub fn land(world_num: i32, target_num: i32) -> i64 {
    crate::storage::as_internal(|| {
        let sql = if target_num == 0 {
            "WITH sent AS (DELETE FROM worlds.outbox WHERE world = $1 RETURNING seq, channel, payload)
             SELECT count(pg_catalog.pg_notify(channel, payload)) FROM (SELECT * FROM sent ORDER BY seq) s"
        } else {
            "WITH moved AS (UPDATE worlds.outbox SET world = $2 WHERE world = $1 RETURNING 1) SELECT count(*) FROM moved"
        };
        let n = crate::spi_calls::get_one_with_args::<i64>(sql, &[world_num.into(), target_num.into()]).ok().flatten().unwrap_or(0);
        if target_num == 0 {
            crate::metrics::count_n(crate::metrics::Counter::EffectsSent, n.max(0) as u64);
        }
        n
    })
}

/// DIFF's rows for the world's queued effects: change `notify`, the channel as the table, the payload.
pub fn diff_rows(world_num: i32) -> Vec<serde_json::Value> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT channel, payload FROM worlds.outbox WHERE world = $1 ORDER BY seq",
            None,
            &[world_num.into()],
            |t| {
                t.filter_map(|r| {
                    let channel = r.get::<String>(1).ok().flatten()?;
                    let payload = r.get::<String>(2).ok().flatten().unwrap_or_default();
                    Some(serde_json::json!({
                        "table": channel, "id": null, "change": "notify", "before": null,
                        "after": { "channel": channel, "payload": payload }, "columns": null,
                    }))
                })
                .collect()
            },
        )
        .unwrap_or_default()
    })
}
