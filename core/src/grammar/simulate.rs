//! SIMULATE n WORLDS [FROM base] AS prefix RUN 'script' SCORE 'select ...' [ASC | DESC] [KEEP k | KEEP ALL]
//! [SEED s] [THREADS t] (the clauses after SCORE in any order, each once), and REPLAY WORLD w [AS name].
use super::*;

/// A SIMULATE statement's parts (the checks that need no database: `Simulation::check`).
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    pub n: i64,
    pub base: Option<WorldRef>,
    pub prefix: String,
    pub script: String,
    pub score: String,
    /// highest score first (DESC, the default)
    pub descending: bool,
    /// worlds kept, best first; None: KEEP ALL (the default)
    pub keep: Option<i64>,
    pub seed: i64,
    pub threads: Option<i64>,
}

/// At most this many worlds (54000 past it).
pub const MAX_WORLDS: i64 = 1_048_576;
/// The script and the score together, at most (22023 past it).
pub const MAX_TEXT: usize = 32 * 1024;

impl Simulation {
    /// The spec's 22023 and 54000, before anything is forked.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.n <= 0 {
            return Err(("22023", format!("SIMULATE needs at least 1 world, not {}", self.n)));
        }
        if self.n > MAX_WORLDS {
            return Err(("54000", format!("SIMULATE of {} worlds is more than {MAX_WORLDS}", self.n)));
        }
        if self.script.len() + self.score.len() > MAX_TEXT {
            return Err(("22023", format!("the script and the score are {} bytes together, over 32 KB", self.script.len() + self.score.len())));
        }
        if self.script.trim().is_empty() {
            return Err(("22023", "the RUN script is empty".into()));
        }
        if let Some(k) = self.keep {
            if k < 0 {
                return Err(("22023", format!("KEEP {k}: keep 0 or more worlds")));
            }
        }
        if let Some(t) = self.threads {
            if t < 1 {
                return Err(("22023", format!("THREADS {t}: at least 1")));
            }
        }
        Ok(())
    }

    /// World i's name.
    pub fn world_name(&self, i: i64) -> String {
        format!("{}_{i}", self.prefix)
    }

    /// World i's seed ($2): SEED plus the world's index (SEED 0: the index itself).
    pub fn world_seed(&self, i: i64) -> i64 {
        self.seed.wrapping_add(i)
    }

    /// Worlds alive at once at most: KEEP k keeps k while one more runs.
    pub fn room_needed(&self) -> i64 {
        match self.keep {
            Some(k) => (k + 1).min(self.n),
            None => self.n,
        }
    }
}

/// The value `setseed()` takes (in [-1, 1]) for a world's seed: the same seed, the same random() sequence.
pub fn random_seed(seed: i64) -> f64 {
    // splitmix64: neighbouring seeds give unrelated sequences
    let mut z = (seed as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// One world's outcome, for ranking: (score, index); a failed world has no score.
/// Best first: by score (DESC or ASC), then by index; a NaN score after every number (either way), failed
/// worlds last, by index. (The workers rank with the same order in SQL: the score, negated for DESC,
/// ascending with NULLS LAST, where Postgres puts NaN after every number.)
pub fn better(a: (Option<f64>, i64), b: (Option<f64>, i64), descending: bool) -> bool {
    match (a.0, b.0) {
        (Some(x), Some(y)) if x.is_nan() != y.is_nan() => y.is_nan(),
        (Some(x), Some(y)) if !x.is_nan() && x != y => {
            if descending { x > y } else { x < y }
        }
        (Some(_), None) => true,
        (None, Some(_)) => false,
        _ => a.1 < b.1,
    }
}

/// `better` as an ordering for sorting outcomes best first.
pub fn rank(a: (Option<f64>, i64), b: (Option<f64>, i64), descending: bool) -> std::cmp::Ordering {
    if better(a, b, descending) {
        std::cmp::Ordering::Less
    } else if better(b, a, descending) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}

#[derive(Clone, Copy, PartialEq)]
enum SimClause {
    Order,
    Keep,
    Seed,
    Threads,
}

impl Parser<'_> {
    /// After SIMULATE.
    pub(super) fn simulate(&mut self) -> Parsed<Statement> {
        let n = self.integer()?;
        self.expect_word("worlds")?;
        let base = if self.eat_word("from") { Some(self.world_name()?) } else { None };
        self.expect_word("as")?;
        let t = self.peek().clone();
        let prefix = self.world_name()?;
        crate::names::check_world_name(&prefix).map_err(|(state, message)| self.error_at(&t, state, message))?;
        self.expect_word("run")?;
        let script = self.string()?;
        self.expect_word("score")?;
        let score = self.string()?;
        let mut sim = Simulation { n, base, prefix, script, score, descending: true, keep: None, seed: 0, threads: None };
        let mut seen: Vec<SimClause> = Vec::new();
        while !self.at_end() {
            let t = self.peek().clone();
            let clause = match &t.tok {
                Tok::Word(w) if w == "asc" || w == "desc" => SimClause::Order,
                Tok::Word(w) if w == "keep" => SimClause::Keep,
                Tok::Word(w) if w == "seed" => SimClause::Seed,
                Tok::Word(w) if w == "threads" => SimClause::Threads,
                _ => return Err(self.syntax_error(&t)),
            };
            if seen.contains(&clause) {
                return Err(self.error_at(&t, "42601", format!("{} is given twice", &self.text[t.start..t.end].to_ascii_uppercase())));
            }
            seen.push(clause);
            self.next();
            match clause {
                SimClause::Order => sim.descending = is_word(&t, "desc"),
                SimClause::Keep => sim.keep = if self.eat_word("all") { None } else { Some(self.integer()?) },
                SimClause::Seed => sim.seed = self.integer()?,
                SimClause::Threads => sim.threads = Some(self.integer()?),
            }
        }
        Ok(Statement::Simulate(Box::new(sim)))
    }

    /// After REPLAY: WORLD w [AS name].
    pub(super) fn replay(&mut self) -> Parsed<Statement> {
        self.expect_word("world")?;
        let world = self.world_name()?;
        let keep_as = if self.eat_word("as") { Some(self.new_world_name()?) } else { None };
        Ok(Statement::Replay { world, keep_as })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Statement};
    use super::*;

    fn sim(text: &str) -> Simulation {
        match parse(text) {
            Ok(Statement::Simulate(s)) => *s,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn the_spec_example() {
        let s = sim("simulate 1000 worlds from main as trial
              run $$update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100$$
              score $$select sum(p * sold) from prices$$
              keep 10 seed 42;");
        assert_eq!((s.n, s.base.as_deref(), s.prefix.as_str(), s.keep, s.seed, s.descending), (1000, Some("main"), "trial", Some(10), 42, true));
        assert!(s.script.starts_with("update prices"));
        assert_eq!(s.score, "select sum(p * sold) from prices");
        assert_eq!(s.world_name(7), "trial_7");
        assert_eq!(s.world_seed(7), 49);
        assert_eq!(s.room_needed(), 11);
        assert_eq!(s.check(), Ok(()));
    }

    #[test]
    fn clauses_in_any_order_once_each() {
        let s = sim("SIMULATE 3 WORLDS AS t RUN 'x' SCORE 'select 1' THREADS 2 SEED 5 ASC KEEP ALL");
        assert_eq!((s.threads, s.seed, s.descending, s.keep, s.base.as_deref()), (Some(2), 5, false, None, None));
        assert_eq!(s.room_needed(), 3);
        assert_eq!(parse("simulate 3 worlds as t run 'x' score 'select 1' keep 1 keep 2").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("simulate 3 worlds as t run 'x' score 'select 1' asc desc").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("simulate 3 worlds as t score 'select 1'").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("simulate worlds as t run 'x' score 'y'").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("simulate 3 worlds as \"a@b\" run 'x' score 'y'").unwrap_err().sqlstate, "42602");
    }

    #[test]
    fn the_spec_errors_before_anything_forks() {
        assert_eq!(sim("simulate 0 worlds as t run 'x' score 'select 1'").check().unwrap_err().0, "22023");
        assert_eq!(sim("simulate 1048577 worlds as t run 'x' score 'select 1'").check().unwrap_err().0, "54000");
        assert_eq!(sim("simulate 1048576 worlds as t run 'x' score 'select 1'").check(), Ok(()));
        let big = format!("simulate 1 worlds as t run '{}' score 'select 1'", "x".repeat(33 * 1024));
        assert_eq!(sim(&big).check().unwrap_err().0, "22023");
    }

    #[test]
    fn replay() {
        assert_eq!(parse("replay world trial_3").unwrap(), Statement::Replay { world: "trial_3".into(), keep_as: None });
        assert_eq!(parse("REPLAY WORLD trial_3 AS again").unwrap(), Statement::Replay { world: "trial_3".into(), keep_as: Some("again".into()) });
    }

    #[test]
    fn seeds_and_ranking() {
        for seed in [-5i64, 0, 1, 42, i64::MAX] {
            let r = random_seed(seed);
            assert!((-1.0..=1.0).contains(&r));
            assert_eq!(r, random_seed(seed));
        }
        assert_ne!(random_seed(1), random_seed(2));
        assert!(better((Some(2.0), 5), (Some(1.0), 0), true));
        assert!(better((Some(1.0), 5), (Some(2.0), 0), false));
        assert!(better((Some(1.0), 0), (Some(1.0), 5), true), "ties: the lower index first");
        assert!(better((Some(-1e9), 9), (None, 0), true), "failed worlds last");
        assert!(better((None, 1), (None, 2), true));
        for desc in [true, false] {
            assert!(better((Some(-1e300), 9), (Some(f64::NAN), 0), desc), "NaN after every number");
            assert!(better((Some(f64::NAN), 9), (None, 0), desc), "but before the failed");
            assert!(better((Some(f64::NAN), 1), (Some(f64::NAN), 2), desc), "NaNs by index");
            assert!(!better((Some(f64::NAN), 2), (Some(f64::NAN), 1), desc));
        }
        let mut v = vec![(None, 0), (Some(1.0), 3), (Some(2.0), 2), (Some(1.0), 1)];
        v.sort_by(|a, b| rank(*a, *b, true));
        assert_eq!(v, vec![(Some(2.0), 2), (Some(1.0), 1), (Some(1.0), 3), (None, 0)]);
    }
}
