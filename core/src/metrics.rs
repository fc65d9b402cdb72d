//! SHOW METRICS' names and arithmetic (the shared memory that keeps them: src/metrics/shmem.rs).
//!
//! Each timed operation keeps a fixed-size, log-spaced histogram of its durations in microseconds (as HDR
//! histograms do): four buckets per power of two, 128 buckets from 0 µs to 2^33 µs (about 2.4 hours; a
//! longer one counts in the last bucket), plus its total and its max, both exact. A percentile is read
//! from the buckets: the middle of the bucket the rank falls in, never above the max. A bucket spans at
//! most a quarter of its lower bound, so a percentile is within 12.5% of the true value (exact below
//! 8 µs, and at the max).

/// The operations timed, in SHOW METRICS' order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timed {
    Fork,
    Merge,
    MergeFastForward,
    DryRun,
    Rebase,
    Diff,
    Restore,
    Undo,
    AsOf,
    Simulate,
    CheckReads,
    MergeChecks,
}

impl Timed {
    pub const ALL: [Timed; 12] = [
        Timed::Fork,
        Timed::Merge,
        Timed::MergeFastForward,
        Timed::DryRun,
        Timed::Rebase,
        Timed::Diff,
        Timed::Restore,
        Timed::Undo,
        Timed::AsOf,
        Timed::Simulate,
        Timed::CheckReads,
        Timed::MergeChecks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Timed::Fork => "fork",
            Timed::Merge => "merge",
            Timed::MergeFastForward => "merge (fast-forward)",
            Timed::DryRun => "dry run",
            Timed::Rebase => "rebase",
            Timed::Diff => "diff",
            Timed::Restore => "restore",
            Timed::Undo => "undo",
            Timed::AsOf => "as of",
            Timed::Simulate => "simulate",
            Timed::CheckReads => "check reads",
            Timed::MergeChecks => "merge checks",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<Timed> {
        Timed::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// The counters, after the timed operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// merges and rebases refused (40001) for rows or objects changed on both sides
    Conflicts,
    /// an agent's merge its policy refused: queued for a person (42501)
    RefusedPolicyQueued,
    /// what an agent's policy refuses outright (a rebase keeping its rows under overwrite = false: 42501)
    RefusedPolicy,
    /// a world that checks its reads read a row its parent changed since (40001)
    RefusedStaleRead,
    /// a change outside the world's declared scope (42501)
    RefusedScope,
    /// a merge check found rows or ran past its timeout (23514, 57014)
    RefusedMergeCheck,
    /// a person merging without the CONFIRM DELETES n a policy asks for (55000)
    RefusedUnconfirmedDeletes,
    /// worlds put in the review queue
    QueuedReviews,
    /// effects (NOTIFYs) a merge into main sent from a world's outbox
    EffectsSent,
    /// worlds discarded because their TTL passed
    WorldsExpired,
}

impl Counter {
    pub const ALL: [Counter; 10] = [
        Counter::Conflicts,
        Counter::RefusedPolicyQueued,
        Counter::RefusedPolicy,
        Counter::RefusedStaleRead,
        Counter::RefusedScope,
        Counter::RefusedMergeCheck,
        Counter::RefusedUnconfirmedDeletes,
        Counter::QueuedReviews,
        Counter::EffectsSent,
        Counter::WorldsExpired,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Counter::Conflicts => "conflicts",
            Counter::RefusedPolicyQueued => "refused: policy (queued)",
            Counter::RefusedPolicy => "refused: policy",
            Counter::RefusedStaleRead => "refused: stale read",
            Counter::RefusedScope => "refused: scope",
            Counter::RefusedMergeCheck => "refused: merge check",
            Counter::RefusedUnconfirmedDeletes => "refused: unconfirmed deletes",
            Counter::QueuedReviews => "queued reviews",
            Counter::EffectsSent => "effects sent",
            Counter::WorldsExpired => "worlds expired",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<Counter> {
        Counter::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The counter of a merge gate's refusal, by its SQLSTATE (governance/judge.rs raises them: 40001 a
    /// stale read, 42501 the declared scope, 55000 deletes unconfirmed, 23514 / 57014 a merge check).
    pub fn of_refusal(sqlstate: &str) -> Option<Counter> {
        match sqlstate {
            "40001" => Some(Counter::RefusedStaleRead),
            "42501" => Some(Counter::RefusedScope),
            "55000" => Some(Counter::RefusedUnconfirmedDeletes),
            "23514" | "57014" => Some(Counter::RefusedMergeCheck),
            _ => None,
        }
    }
}

/// Buckets per power of two.
const SUB: u32 = 4;
/// Buckets of a histogram.
pub const BUCKETS: usize = 128;

/// The bucket of a duration of `us` microseconds: exact below 4 µs, then four per power of two.
pub fn bucket(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let e = 63 - us.leading_zeros(); // floor(log2 us), >= 2
    let sub = (us >> (e - 2)) & (SUB as u64 - 1);
    ((SUB * (e - 1)) as usize + sub as usize).min(BUCKETS - 1)
}

/// The smallest duration (µs) bucket `i` holds.
pub fn lower(i: usize) -> u64 {
    if i < SUB as usize {
        return i as u64;
    }
    let e = i as u32 / SUB + 1;
    let sub = i as u64 % SUB as u64;
    (SUB as u64 + sub) << (e - 2)
}

/// The largest duration (µs) bucket `i` holds (the last holds everything longer too).
pub fn upper(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        return u64::MAX;
    }
    lower(i + 1) - 1
}

/// The `pct`-th percentile (1..=100) of the durations the buckets hold, in µs: the middle of the bucket
/// the rank ceil(n * pct / 100) falls in (the max's bucket taken to end at the max), never above
/// `max_us`; the last rank is the max. None when the buckets are empty.
pub fn percentile(buckets: &[u64], max_us: u64, pct: u64) -> Option<f64> {
    let n: u64 = buckets.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = (n.saturating_mul(pct.clamp(1, 100)).div_ceil(100)).max(1);
    // (the last rank is the max, exact)
    if rank == n {
        return Some(max_us as f64);
    }
    let mut seen = 0u64;
    for (i, c) in buckets.iter().enumerate() {
        seen += c;
        if seen >= rank {
            // (the max's bucket ends at the max)
            let hi = upper(i).min(max_us).max(lower(i));
            return Some(((lower(i) as f64 + hi as f64) / 2.0).min(max_us as f64));
        }
    }
    Some(max_us as f64)
}

/// One timed operation's row of SHOW METRICS, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub total_ms: f64,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// The row of a histogram read as `buckets`, `total_us` and `max_us` (read in that order's reverse by the
/// shared memory, so the total holds the max). The count is the buckets' sum.
pub fn summary(buckets: &[u64], total_us: u64, max_us: u64) -> Summary {
    let count: u64 = buckets.iter().sum();
    let ms = |us: f64| us / 1000.0;
    let p = |pct| percentile(buckets, max_us, pct).map(ms);
    Summary {
        count,
        total_ms: ms(total_us.max(if count > 0 { max_us } else { 0 }) as f64),
        p50_ms: p(50),
        p95_ms: p(95),
        p99_ms: p(99),
        max_ms: (count > 0).then(|| ms(max_us as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> ([u64; BUCKETS], u64, u64) {
        let mut b = [0u64; BUCKETS];
        for &v in values {
            b[bucket(v)] += 1;
        }
        (b, values.iter().sum(), values.iter().copied().max().unwrap_or(0))
    }

    #[test]
    fn buckets_cover_every_duration_in_order() {
        // each bucket starts where the one before ends, and holds what it says
        for i in 0..BUCKETS - 1 {
            assert_eq!(upper(i) + 1, lower(i + 1), "bucket {i}");
            assert!(lower(i) <= upper(i));
            assert_eq!(bucket(lower(i)), i);
            assert_eq!(bucket(upper(i)), i);
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(3), 3);
        assert_eq!(bucket(4), 4);
        assert_eq!(bucket(7), 7);
        assert_eq!(bucket(8), 8);
        assert_eq!(bucket(9), 8);
        assert_eq!(bucket(10), 9);
        // 2^33 µs (2.4 h) and past: the last bucket
        assert_eq!(lower(BUCKETS - 1), 7 << 30);
        assert_eq!(bucket(1 << 33), BUCKETS - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // monotonic
        let mut last = 0;
        for v in (0..5_000_000u64).step_by(997) {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
        }
    }

    #[test]
    fn a_bucket_spans_at_most_a_quarter_of_its_lower_bound() {
        for i in 4..BUCKETS - 1 {
            let (lo, hi) = (lower(i) as f64, (upper(i) + 1) as f64);
            assert!(hi / lo <= 1.25 + 1e-12, "bucket {i}: {lo}..{hi}");
        }
    }

    #[test]
    fn percentiles_within_their_precision() {
        // 1..=10,000 µs: the p-th percentile is p * 100 µs
        let values: Vec<u64> = (1..=10_000).collect();
        let (b, _, max) = hist(&values);
        for (pct, truth) in [(50u64, 5_000.0), (95, 9_500.0), (99, 9_900.0)] {
            let p = percentile(&b, max, pct).unwrap();
            assert!((p - truth).abs() / truth <= 0.125, "p{pct} = {p}, true {truth}");
        }
        assert_eq!(percentile(&b, max, 100).unwrap(), 10_000.0);
        // exact for small values
        let (b, _, max) = hist(&[1, 2, 3]);
        assert_eq!(percentile(&b, max, 50), Some(2.0));
        assert_eq!(percentile(&b, max, 99), Some(3.0));
    }

    #[test]
    fn percentiles_are_ordered_and_never_above_the_max() {
        for values in [vec![5u64], vec![1_000_000], vec![12, 13, 14, 15, 9_000_000], (0..777).map(|i| i * i * 31).collect()] {
            let (b, total, max) = hist(&values);
            let s = summary(&b, total, max);
            assert_eq!(s.count, values.len() as u64);
            let (p50, p95, p99, m) = (s.p50_ms.unwrap(), s.p95_ms.unwrap(), s.p99_ms.unwrap(), s.max_ms.unwrap());
            assert!(p50 <= p95 && p95 <= p99 && p99 <= m, "{values:?}: {s:?}");
            assert!(s.total_ms >= m);
            assert_eq!(m, max as f64 / 1000.0);
        }
        // one value: every percentile is it
        let (b, total, max) = hist(&[1_234_567]);
        let s = summary(&b, total, max);
        assert_eq!(s.p50_ms, Some(1_234.567));
        assert_eq!(s.p99_ms, Some(1_234.567));
    }

    #[test]
    fn past_the_last_bucket() {
        let (b, total, max) = hist(&[3 << 33, 1]);
        assert_eq!(percentile(&b, max, 99), Some((3u64 << 33) as f64));
        assert!(summary(&b, total, max).p50_ms.unwrap() <= 0.001);
    }

    #[test]
    fn empty() {
        let s = summary(&[0; BUCKETS], 0, 0);
        assert_eq!(s, Summary { count: 0, total_ms: 0.0, p50_ms: None, p95_ms: None, p99_ms: None, max_ms: None });
    }

    #[test]
    fn names() {
        for t in Timed::ALL {
            assert_eq!(Timed::from_name(t.name()), Some(t));
            assert_eq!(Timed::ALL[t.index()], t);
        }
        for c in Counter::ALL {
            assert_eq!(Counter::from_name(c.name()), Some(c));
            assert_eq!(Counter::ALL[c.index()], c);
        }
        assert_eq!(Timed::from_name("nope"), None);
        assert_eq!(Counter::of_refusal("40001"), Some(Counter::RefusedStaleRead));
        assert_eq!(Counter::of_refusal("57014"), Some(Counter::RefusedMergeCheck));
    }
}
