//! A `pg_snapshot`'s text form (`xmin:xmax:xip,...`, full 64-bit xids), as pg_worlds keeps a cache's
//! frontier: parsed once, tested as `pg_visible_in_snapshot` tests it.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub xmin: u64,
    pub xmax: u64,
    /// in progress when it was taken (sorted, as Postgres writes them)
    pub xip: Vec<u64>,
}

impl Snapshot {
    /// None for anything but `xmin:xmax:xip,...` (a time cut `@...` included).
    pub fn parse(s: &str) -> Option<Snapshot> {
        let mut parts = s.splitn(3, ':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let xip = match parts.next()? {
            "" => Vec::new(),
            l => l.split(',').map(|x| x.parse().ok()).collect::<Option<Vec<u64>>>()?,
        };
        (xmin <= xmax).then_some(Snapshot { xmin, xmax, xip })
    }

    /// Was a transaction finished (committed, if it did) when the snapshot was taken?
    /// (`pg_visible_in_snapshot`)
    pub fn visible(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && !self.xip.contains(&xid))
    }
}

/// The xmin of a snapshot's text, 0 when it isn't one.
pub fn xmin_of(s: &str) -> u64 {
    Snapshot::parse(s).map(|s| s.xmin).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_text() {
        assert_eq!(Snapshot::parse("745:750:746,748"), Some(Snapshot { xmin: 745, xmax: 750, xip: vec![746, 748] }));
        assert_eq!(Snapshot::parse("1:1:"), Some(Snapshot { xmin: 1, xmax: 1, xip: vec![] }));
        assert_eq!(Snapshot::parse("@2026-01-01 00:00:00+00"), None);
        assert_eq!(Snapshot::parse("9:3:"), None);
        assert_eq!(Snapshot::parse(""), None);
        assert_eq!(xmin_of("745:750:746"), 745);
        assert_eq!(xmin_of("@x"), 0);
    }

    #[test]
    fn visibility_as_pg_visible_in_snapshot() {
        let s = Snapshot::parse("745:750:746,748").unwrap();
        assert!(s.visible(700));
        assert!(s.visible(744));
        assert!(s.visible(745)); // finished, not in progress
        assert!(!s.visible(746)); // in progress
        assert!(s.visible(747));
        assert!(!s.visible(748));
        assert!(s.visible(749));
        assert!(!s.visible(750)); // not yet started
        assert!(!s.visible(9000));
    }
}
