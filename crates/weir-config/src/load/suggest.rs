//! "Did you mean": the closest of the allowed keys or defined names to a misspelt one, and the
//! hint for a file written for Traefik.

/// ` (did you mean `CANDIDATE`?)` for the candidate closest to `written`, when one is close
/// enough to be a slip (a third of its letters, at least one, ignoring case) and no other is as
/// close (`XS256` could be any of four algorithms), else nothing.
pub(crate) fn did_you_mean<'c>(
    written: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> String {
    let written_lower = written.to_lowercase();
    let limit = (written.chars().count() / 3).max(1);
    let mut close: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(&written_lower, &c.to_lowercase()), c))
        .filter(|(distance, c)| *distance <= limit && *c != written)
        .collect();
    close.sort_by_key(|(distance, _)| *distance);
    match close.as_slice() {
        [(best, c), (next, _), ..] if next > best => format!(" (did you mean `{c}`?)"),
        [(_, c)] => format!(" (did you mean `{c}`?)"),
        _ => String::new(),
    }
}

/// Levenshtein distance in characters (insertions, deletions, substitutions), with an adjacent
/// swap counted as one edit (`rotuers`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for swaps), the previous, the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut current = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            current[j] = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                current[j] = current[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut previous, current);
    }
    previous[b.len()]
}

/// Top-level keys of Traefik's static (`entryPoints`, `certificatesResolvers`) and dynamic
/// (`http`) configuration that weir does not have (its `providers` is weir's too).
const TRAEFIK_KEYS: &[&str] = &["entryPoints", "http", "certificatesResolvers"];

/// The hint for a top-level key that says the file was written for Traefik, if it is one.
pub(super) fn traefik_hint(key: &str) -> Option<&'static str> {
    TRAEFIK_KEYS.contains(&key).then_some(
        "this looks like a Traefik configuration; weir reads its own format \
         (docs/configuration.md): Traefik's `entryPoints` are `entrypoints`, and `http.routers`, \
         `http.services` and `http.middlewares` are `routers`, `services` and `middlewares` at \
         the top level",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_edits_and_swaps() {
        assert_eq!(edit_distance("servr", "server"), 1);
        assert_eq!(edit_distance("rotuers", "routers"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn suggests_only_a_close_candidate() {
        let keys = ["server", "entrypoints", "routers", "services"];
        assert_eq!(did_you_mean("servr", keys), " (did you mean `server`?)");
        assert_eq!(
            did_you_mean("entryPoints", keys),
            " (did you mean `entrypoints`?)"
        );
        assert_eq!(did_you_mean("rotuers", keys), " (did you mean `routers`?)");
        assert_eq!(did_you_mean("zzz", keys), "");
        // A tie is no guess.
        let algorithms = ["HS256", "RS256", "PS256", "ES256"];
        assert_eq!(did_you_mean("XS256", algorithms), "");
        assert_eq!(
            did_you_mean("RS257", algorithms),
            " (did you mean `RS256`?)"
        );
        assert_eq!(
            did_you_mean("RS265", algorithms),
            " (did you mean `RS256`?)"
        );
        assert_eq!(did_you_mean("lb", ["load_balancer", "servers"]), "");
    }
}
