//! SHOW METRICS (`worlds.show_metrics()`, for any role pg_worlds lets read), the view `worlds.metrics`
//! (for members of pg_monitor: postgres_exporter and other monitoring), and `worlds.reset_metrics()`
//! (admins of pg_worlds).
use super::{shmem, Counter, Timed};
use pgrx::prelude::*;

type Row = (String, i64, Option<f64>, Option<f64>, Option<f64>, Option<f64>, Option<f64>);

/// `worlds._metrics()`: the rows, timed operations first (in worlds_core's order), then the counters
/// with null latencies. Every metric has its row, zero or not (a scraper sees the same series each time).
/// Empty without shared memory (the library not preloaded).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn _metrics() -> TableIterator<
    'static,
    (
        name!(metric, String),
        name!(count, i64),
        name!(total_ms, Option<f64>),
        name!(p50_ms, Option<f64>),
        name!(p95_ms, Option<f64>),
        name!(p99_ms, Option<f64>),
        name!(max_ms, Option<f64>),
    ),
> {
    let mut out: Vec<Row> = Vec::new();
    if !shmem::available() {
        return TableIterator::new(out);
    }
    for t in Timed::ALL {
        let Some((buckets, total, max)) = shmem::read(t) else { continue };
        let s = worlds_core::metrics::summary(&buckets, total, max);
        out.push((t.name().into(), s.count.min(i64::MAX as u64) as i64, Some(s.total_ms), s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms));
    }
    for c in Counter::ALL {
        let n = shmem::count(c).unwrap_or(0);
        out.push((c.name().into(), n.min(i64::MAX as u64) as i64, None, None, None, None, None));
    }
    TableIterator::new(out)
}

/// `worlds.metrics_since()`: when the numbers began (the server's start or the last reset).
#[pg_extern(volatile, parallel_safe)]
fn metrics_since() -> Option<pgrx::datum::TimestampWithTimeZone> {
    shmem::since().and_then(|t| pgrx::datum::TimestampWithTimeZone::try_from(t).ok())
}

/// `worlds._reset_metrics()`: every number back to zero (worlds.reset_metrics checks the right first).
#[pg_extern(volatile, parallel_unsafe)]
fn _reset_metrics() {
    shmem::reset();
}

/// `worlds._metric_time(name, started)`: the plpgsql lifecycle's timed operation (CREATE WORLD) ended
/// well, begun at `started`.
#[pg_extern(volatile, parallel_unsafe)]
fn _metric_time(metric: &str, started: pgrx::datum::TimestampWithTimeZone) {
    let Some(t) = Timed::from_name(metric) else { return };
    let began: i64 = started.into_inner();
    let us = unsafe { pg_sys::GetCurrentTimestamp() } - began;
    shmem::record(t, us.max(0) as u64);
}

/// `worlds._metric_count(name)`: one more of a counter the plpgsql lifecycle counts (worlds expired).
#[pg_extern(volatile, parallel_unsafe)]
fn _metric_count(metric: &str) {
    if let Some(c) = Counter::from_name(metric) {
        shmem::add(c, 1);
    }
}

pgrx::extension_sql!(
    r#"
-- SHOW METRICS: for any role pg_worlds lets read (metrics/show.rs).
CREATE FUNCTION worlds.show_metrics()
RETURNS TABLE (metric text, count bigint, total_ms double precision, p50_ms double precision, p95_ms double precision,
               p99_ms double precision, max_ms double precision)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM worlds._require('read');
    RETURN QUERY SELECT * FROM worlds._metrics();
END $$;

-- Every number back to zero: superusers and admins of pg_worlds.
CREATE FUNCTION worlds.reset_metrics() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM worlds._require('admin');
    PERFORM worlds._reset_metrics();
END $$;

-- The same rows for monitoring (postgres_exporter's queries, and the like): members of pg_monitor.
CREATE VIEW worlds.metrics AS SELECT * FROM worlds._metrics();
REVOKE ALL ON worlds.metrics FROM PUBLIC;
GRANT SELECT ON worlds.metrics TO pg_monitor;
REVOKE EXECUTE ON FUNCTION worlds._metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION worlds._metrics() TO pg_monitor;
REVOKE EXECUTE ON FUNCTION worlds._reset_metrics(), worlds._metric_time(text, timestamptz), worlds._metric_count(text) FROM PUBLIC;
"#,
    name = "metrics",
    requires = ["agents", _metrics, _reset_metrics, _metric_time, _metric_count]
);
