//! The spec's rules for a new world's name ("Names and moments"). Only names being given are checked:
//! a world made before a rule existed still loads, and is referred to by its name as it is.

/// MERGE's own words: a bare one after MERGE WORLD is read as a clause, so no world may be named one.
pub const MERGE_WORDS: [&str; 9] = ["using", "ours", "theirs", "confirm", "by", "resolve", "dry", "into", "only"];

/// Checks a name for a new world. On failure returns the SQLSTATE and a message naming the name:
/// 42602 for an empty name or one with `@` (which marks a moment, 'name@when'); 42939 for a name
/// starting with `_tx_` (transactions' hidden worlds) or one of MERGE's own words, in any case.
pub fn check_world_name(name: &str) -> Result<(), (&'static str, String)> {
    if name.is_empty() {
        return Err(("42602", "a world name can't be empty".into()));
    }
    if name.trim().is_empty() {
        return Err(("42602", "a world name can't be only spaces".into()));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(("42622", format!("world name is {} bytes long; at most {MAX_NAME_BYTES}", name.len())));
    }
    if looks_like_id(name) {
        // an ID works wherever a name does: a name of that form would be read as another world's ID
        return Err(("42602", format!("world name {} has the form of a world ID, which names can't take", quoted(name))));
    }
    if name.contains('@') {
        return Err((
            "42602",
            format!("world name {} can't contain @: it marks a moment, as in 'name@when'", quoted(name)),
        ));
    }
    // Any case: "_TX_1" would read too much like a transaction's world to be worth allowing.
    if name.as_bytes().get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"_tx_")) {
        return Err((
            "42939",
            format!("world name {} is reserved: names starting with _tx_ are transactions' own worlds", quoted(name)),
        ));
    }
    if MERGE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(name)) {
        return Err(("42939", format!("world name {} is reserved: it is one of MERGE's own words", quoted(name))));
    }
    Ok(())
}

/// Names are compared and indexed whole; past this a name is almost surely a mistake.
pub const MAX_NAME_BYTES: usize = 1024;

/// The form of a world's ID: `w`, six hex digits (its number), `-`, ten hex digits. No name has it
/// (check_world_name refuses one), so a text of this form is looked up as an ID, any other as a name.
pub fn looks_like_id(name: &str) -> bool {
    let b = name.as_bytes();
    let hex = |s: &[u8]| s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    b.len() == 18 && b[0] == b'w' && b[7] == b'-' && hex(&b[1..7]) && hex(&b[8..])
}

/// The name in double quotes, as SQL would write it, so the message shows it unambiguously.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Result columns as JSON keys: a name seen before gets the first free `_1`, `_2`, ... suffix (JSON keeps
/// one value per key: `now.status, old.status` would otherwise lose one).
pub fn unique_column_names(names: &[String]) -> Vec<String> {
    let mut taken: std::collections::HashSet<String> = names.iter().cloned().collect();
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .map(|n| {
            if seen.insert(n.clone()) {
                return n.clone();
            }
            let fresh = (1..).map(|i| format!("{n}_{i}")).find(|c| !taken.contains(c)).unwrap();
            taken.insert(fresh.clone());
            seen.insert(fresh.clone());
            fresh
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str) -> Option<&'static str> {
        check_world_name(name).err().map(|(s, _)| s)
    }

    #[test]
    fn ordinary_names_pass() {
        for n in
            ["agent_7", "agent-7", "Agent 7", "main", "über", "tx_1", "_t", "a_tx_", "ours2", "target", "at", "bye"]
        {
            assert_eq!(check_world_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn empty_or_at_sign_is_42602() {
        assert_eq!(state(""), Some("42602"));
        assert_eq!(state("main@-1 hour"), Some("42602"));
        assert_eq!(state("@"), Some("42602"));
        let (_, m) = check_world_name("a@b").unwrap_err();
        assert!(m.contains("\"a@b\""), "{m}");
    }

    #[test]
    fn transaction_prefix_is_42939() {
        assert_eq!(state("_tx_"), Some("42939"));
        assert_eq!(state("_tx_42"), Some("42939"));
        assert_eq!(state("_TX_42"), Some("42939"));
        let (_, m) = check_world_name("_tx_9").unwrap_err();
        assert!(m.contains("\"_tx_9\"") && m.contains("transactions"), "{m}");
    }

    #[test]
    fn merge_words_are_reserved_in_any_case() {
        for w in MERGE_WORDS {
            assert_eq!(state(w), Some("42939"), "{w}");
            assert_eq!(state(&w.to_uppercase()), Some("42939"), "{w}");
        }
        assert_eq!(state("Ours"), Some("42939"));
        assert_eq!(
            check_world_name("ours"),
            Err(("42939", "world name \"ours\" is reserved: it is one of MERGE's own words".to_string()))
        );
    }

    #[test]
    fn blank_long_and_id_shaped_names_are_refused() {
        assert_eq!(check_world_name("   ").unwrap_err().0, "42602");
        assert_eq!(check_world_name(&"x".repeat(MAX_NAME_BYTES + 1)).unwrap_err().0, "42622");
        assert!(check_world_name(&"x".repeat(MAX_NAME_BYTES)).is_ok());
        assert_eq!(check_world_name("w000021-b61d96dab5").unwrap_err().0, "42602");
        // near misses are ordinary names
        assert!(check_world_name("w000021-b61d96dab").is_ok());
        assert!(check_world_name("w00002g-b61d96dab5").is_ok());
        assert!(check_world_name(" padded ").is_ok());
    }

    #[test]
    fn quotes_in_a_name_are_doubled_in_the_message() {
        let (_, m) = check_world_name("a\"b@c").unwrap_err();
        assert!(m.contains("\"a\"\"b@c\""), "{m}");
    }

    #[test]
    fn multibyte_start_does_not_panic() {
        assert_eq!(check_world_name("ü_tx_"), Ok(()));
        assert_eq!(check_world_name("_tü"), Ok(()));
        assert_eq!(check_world_name("_txü"), Ok(()));
    }

    #[test]
    fn duplicate_result_columns_get_suffixes() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(unique_column_names(&v(&["id", "status", "status"])), v(&["id", "status", "status_1"]));
        assert_eq!(unique_column_names(&v(&["a", "a", "a_1", "a"])), v(&["a", "a_2", "a_1", "a_3"]));
        assert_eq!(unique_column_names(&v(&["x", "y"])), v(&["x", "y"]));
    }
}

/// The longest agent name: a role name (NAMEDATALEN - 1 bytes).
pub const MAX_AGENT_NAME_BYTES: usize = 63;

/// Checks an agent's name (spec, "Agents"): letters, digits, `_` and `-`, at most a role name's length;
/// `guest` and `system` are the database's own (any case). On failure: 22023 and a message naming it.
pub fn check_agent_name(name: &str) -> Result<(), (&'static str, String)> {
    if name.is_empty() {
        return Err(("22023", "an agent name can't be empty".into()));
    }
    if name.len() > MAX_AGENT_NAME_BYTES {
        return Err(("22023", format!("agent name is {} bytes long; at most {MAX_AGENT_NAME_BYTES}", name.len())));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(("22023", format!("agent name {} may hold only letters, digits, _ and -", quoted(name))));
    }
    if ["guest", "system"].iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Err(("22023", format!("agent name {} is reserved: it is the database's own", quoted(name))));
    }
    Ok(())
}
