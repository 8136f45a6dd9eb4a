//! `Cache-Control` (RFC 9111 §5.2, RFC 5861): the directives of every field line of a request
//! or a response, read once. Unknown directives are ignored, as the RFC requires; a
//! directive whose argument does not parse counts as absent (or, for `max-age`, as stale:
//! §4.2.1 says an invalid freshness value means the response is stale).

/// The directives weir acts on. Durations are in seconds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Directives {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub no_store: bool,
    /// `no-cache`: stored, but revalidated before every use.
    pub no_cache: bool,
    /// `no-cache="field, ..."` (§5.2.2.4): the listed fields are not stored, and the rest is
    /// used as it is (`listed_fields` reads the names). Not a request directive: ignored there.
    pub no_cache_fields: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub must_understand: bool,
    pub no_transform: bool,
    /// RFC 5861: served stale for this long while a revalidation runs.
    pub stale_while_revalidate: Option<u64>,
    /// RFC 5861: served stale for this long when the origin fails.
    pub stale_if_error: Option<u64>,
    /// Request only: `max-stale` (with no value: any staleness).
    pub max_stale: Option<u64>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
}

impl Directives {
    /// Reads the directives of every field line, as bytes: directive names are ASCII, and a
    /// line that is not UTF-8 may still name some.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for line in lines {
            for item in list_items(line) {
                let (name, value) = match item.iter().position(|&b| b == b'=') {
                    Some(i) => (
                        item[..i].trim_ascii(),
                        Some(unquote(item[i + 1..].trim_ascii())),
                    ),
                    None => (item.trim_ascii(), None),
                };
                let seconds = || value.and_then(parse_seconds);
                // Lowercased on the stack: no directive weir knows is longer than 24 bytes.
                let mut lower = [0u8; 24];
                let Some(folded) = lower.get_mut(..name.len()) else {
                    continue;
                };
                folded.copy_from_slice(name);
                folded.make_ascii_lowercase();
                match &*folded {
                    // An invalid max-age makes the response stale (§4.2.1): zero.
                    b"max-age" => d.max_age = Some(seconds().unwrap_or(0)),
                    b"s-maxage" => d.s_maxage = Some(seconds().unwrap_or(0)),
                    b"no-store" => d.no_store = true,
                    // An empty list names nothing: taken as the unqualified form.
                    b"no-cache" => match value {
                        Some(list) if !list.trim_ascii().is_empty() => d.no_cache_fields = true,
                        _ => d.no_cache = true,
                    },
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" => d.must_revalidate = true,
                    b"proxy-revalidate" => d.proxy_revalidate = true,
                    b"must-understand" => d.must_understand = true,
                    b"no-transform" => d.no_transform = true,
                    b"stale-while-revalidate" => d.stale_while_revalidate = seconds(),
                    b"stale-if-error" => d.stale_if_error = seconds(),
                    b"max-stale" => d.max_stale = Some(seconds().unwrap_or(u64::MAX)),
                    b"min-fresh" => d.min_fresh = seconds(),
                    b"only-if-cached" => d.only_if_cached = true,
                    _ => {}
                }
            }
        }
        d
    }
}

/// The field names the directive `name` (such as `no-cache`) lists in its argument, over every
/// line, as written (compare them without case).
pub fn listed_fields<'a>(lines: impl IntoIterator<Item = &'a [u8]>, name: &str) -> Vec<&'a [u8]> {
    let mut names = Vec::new();
    for line in lines {
        for item in list_items(line) {
            let Some((directive, list)) = item
                .iter()
                .position(|&b| b == b'=')
                .map(|i| (item[..i].trim_ascii(), unquote(item[i + 1..].trim_ascii())))
            else {
                continue;
            };
            if directive.eq_ignore_ascii_case(name.as_bytes()) {
                let listed = list.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                names.extend(listed.filter(|n| !n.is_empty()));
            }
        }
    }
    names
}

/// The non-empty items of a comma-separated list; commas inside quotes do not split.
fn list_items(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(text);
    std::iter::from_fn(move || loop {
        let current = rest?;
        let mut quoted = false;
        let end = current.iter().position(|&b| {
            if b == b'"' {
                quoted = !quoted;
            }
            b == b',' && !quoted
        });
        let item = match end {
            Some(i) => {
                rest = Some(&current[i + 1..]);
                &current[..i]
            }
            None => {
                rest = None;
                current
            }
        };
        if !item.trim_ascii().is_empty() {
            return Some(item);
        }
    })
}

fn unquote(v: &[u8]) -> &[u8] {
    v.strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
        .unwrap_or(v)
}

/// Delta-seconds (§1.2.2): digits only; too large a value is taken as 2^31 as the RFC says.
pub(crate) fn parse_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = v.iter().try_fold(0u64, |n, &digit| {
        n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    });
    Some(value.unwrap_or(1 << 31).min(1 << 31))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> Directives {
        Directives::parse(lines.iter().map(|l| l.as_bytes()))
    }

    #[test]
    fn reads_the_directives_of_every_line() {
        let d = parse(&[
            "public, max-age=60",
            "S-MaxAge=\"120\", stale-while-revalidate=30",
        ]);
        assert!(d.public);
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(120));
        assert_eq!(d.stale_while_revalidate, Some(30));
        let d = parse(&["no-cache=\"set-cookie, x-a\", private, no-store"]);
        assert!(d.no_cache_fields && !d.no_cache && d.private && d.no_store);
        assert_eq!(d.max_age, None);
        let d = parse(&["no-cache=\"x-a\"", "No-Cache"]);
        assert!(d.no_cache_fields && d.no_cache);
        assert!(parse(&["no-cache=\"\""]).no_cache);
    }

    #[test]
    fn reads_the_fields_a_directive_lists() {
        let lines = [
            &b"max-age=60, no-cache=\"Set-Cookie, x-a\""[..],
            b"NO-CACHE=x-b, private=\"x-c\", no-cache",
        ];
        assert_eq!(
            listed_fields(lines, "no-cache"),
            [&b"Set-Cookie"[..], b"x-a", b"x-b"]
        );
        assert_eq!(listed_fields(lines, "private"), [&b"x-c"[..]]);
        assert!(listed_fields([&b"no-cache"[..]], "no-cache").is_empty());
    }

    #[test]
    fn bad_values_are_safe() {
        // An invalid max-age means stale; an invalid stale-if-error grants nothing.
        let d = parse(&["max-age=soon, stale-if-error=-1, max-stale"]);
        assert_eq!(d.max_age, Some(0));
        assert_eq!(d.stale_if_error, None);
        assert_eq!(d.max_stale, Some(u64::MAX));
        assert_eq!(
            parse(&["max-age=99999999999999999999"]).max_age,
            Some(1 << 31)
        );
        assert_eq!(parse(&["\u{0}garbage,,  ,"]), Directives::default());
        // A line that is not UTF-8 still names its directives.
        let d = Directives::parse([&b"max-age=60, \xff\xfe, no-store"[..]]);
        assert_eq!((d.max_age, d.no_store), (Some(60), true));
        assert_eq!(parse(&["max-age=\"30\" , s-maxage = 5"]).s_maxage, Some(5));
    }
}
