//! The rules of a shared cache (RFC 9111): what may be stored (§3), for how long (§4.2.1, with
//! the heuristic of §4.2.2), how old a stored answer is (§4.2.3), whether it may answer a
//! request as it is, stale, or only after revalidation (§4.2, §4.2.4, RFC 5861), the secondary
//! key from `Vary` (§4.1), and the `Cache-Status` field that says what happened (RFC 9211).
//! Times are seconds since the Unix epoch.

use crate::Directives;

/// A head's fields, as the cache reads them.
pub trait Fields {
    /// Every line of the field `name` (case-insensitive), in order.
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a;

    /// Every field line, name and value, in order.
    fn all(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    fn first<'a>(&'a self, name: &'a str) -> Option<&'a [u8]> {
        self.lines(name).next()
    }

    fn has(&self, name: &str) -> bool {
        self.lines(name).next().is_some()
    }
}

impl Fields for [(&str, &[u8])] {
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    fn all(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|(n, v)| (n.as_bytes(), *v))
    }
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// Only GET and HEAD answers are stored.
    Method,
    /// A status the cache does not store (interim, partial, or not understood).
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private`: meant for one user's cache.
    Private,
    /// The request carried `Authorization` and the response did not say it may be shared.
    Authorization,
    /// `Set-Cookie` on a response not marked `public`: one user's state.
    SetCookie,
    /// `Vary: *` can never match a later request.
    VaryAll,
    /// Neither explicit freshness nor a status that may be stored without it.
    NoFreshness,
    /// Larger than the cache's `max_object_size`.
    TooLarge,
    /// A body whose length is not declared (weir stores only what it can size first).
    UnknownLength,
}

impl NotStorable {
    /// The `Cache-Status` detail for it.
    pub fn detail(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::SetCookie => "set-cookie",
            NotStorable::VaryAll => "vary-star",
            NotStorable::NoFreshness => "no-freshness",
            NotStorable::TooLarge => "too-large",
            NotStorable::UnknownLength => "unknown-length",
        }
    }
}

/// Statuses a cache may store without explicit freshness (RFC 9110 §15.1), less 206 (weir
/// stores whole answers and serves ranges from them).
fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Statuses whose caching rules weir implements, for `must-understand` (§5.2.2.3): the
/// heuristically cacheable ones and the redirects it stores with explicit freshness.
fn understood(status: u16) -> bool {
    heuristically_cacheable(status) || matches!(status, 302 | 303 | 307)
}

/// Whether a shared cache may store this response to this request (§3, §3.5); `asked` and
/// `answered` are their `Cache-Control` directives, parsed once by the caller. Any final
/// status may be stored with explicit freshness, a heuristically cacheable one without; 206
/// and 304 never (weir stores whole answers).
pub fn storable(
    method: &str,
    status: u16,
    (request, asked): (&(impl Fields + ?Sized), &Directives),
    (response, answered): (&(impl Fields + ?Sized), &Directives),
) -> Result<(), NotStorable> {
    if method != "GET" && method != "HEAD" {
        return Err(NotStorable::Method);
    }
    if !(200..=999).contains(&status) || matches!(status, 206 | 304) {
        return Err(NotStorable::Status);
    }
    // `must-understand` limits storing to statuses weir knows, and then overrides the
    // response's `no-store` that accompanies it for older caches.
    if answered.must_understand && !understood(status) {
        return Err(NotStorable::Status);
    }
    if asked.no_store || (answered.no_store && !answered.must_understand) {
        return Err(NotStorable::NoStore);
    }
    if answered.private {
        return Err(NotStorable::Private);
    }
    if request.has("authorization")
        && !(answered.public || answered.must_revalidate || answered.s_maxage.is_some())
    {
        return Err(NotStorable::Authorization);
    }
    // The response's fields that decide, in one pass: three lookups by name, no longer
    // inlined once this function grew, cost a miss about 150 instructions more (callgrind).
    let (mut set_cookie, mut vary_all, mut expires) = (false, false, false);
    for (name, value) in response.all() {
        match name.len() {
            10 => set_cookie |= name.eq_ignore_ascii_case(b"set-cookie"),
            4 if name.eq_ignore_ascii_case(b"vary") => {
                vary_all |= value.split(|&b| b == b',').any(|n| n.trim_ascii() == b"*");
            }
            7 => expires |= name.eq_ignore_ascii_case(b"expires"),
            _ => {}
        }
    }
    if set_cookie && !answered.public {
        return Err(NotStorable::SetCookie);
    }
    if vary_all {
        return Err(NotStorable::VaryAll);
    }
    let explicit =
        answered.public || answered.max_age.is_some() || answered.s_maxage.is_some() || expires;
    if !explicit && !heuristically_cacheable(status) {
        return Err(NotStorable::NoFreshness);
    }
    Ok(())
}

/// Whether a `304`'s field `name` replaces the stored one when it freshens a stored answer
/// (§3.2, §4.3.4): not the fields that describe the stored body as it was received (its
/// coding, digest and range, and `ETag`, which names that body; `Content-Length` is written
/// per answer), which a 304 carries no body to back.
pub fn updated_by_304(name: &[u8]) -> bool {
    const KEPT: [&[u8]; 5] = [
        b"content-encoding",
        b"content-length",
        b"content-md5",
        b"content-range",
        b"etag",
    ];
    !KEPT.iter().any(|kept| kept.eq_ignore_ascii_case(name))
}

/// The longest heuristic lifetime weir gives (a tenth of the time since `Last-Modified`).
pub const HEURISTIC_CAP: u64 = 24 * 3600;

fn http_date(value: Option<&[u8]>) -> Option<u64> {
    http_date_secs(value?)
}

/// Seconds since the Unix epoch of an HTTP date (`Date`, `Expires`, `Last-Modified`,
/// `If-Modified-Since`, ...); `None` when it does not parse.
pub fn http_date_secs(value: &[u8]) -> Option<u64> {
    // The last date parsed on this thread: an origin's `Date` changes once a second, and
    // parsing it was a tenth of a miss's policy work (callgrind).
    thread_local! {
        static LAST: std::cell::RefCell<(Vec<u8>, Option<u64>)> = const {
            std::cell::RefCell::new((Vec::new(), None))
        };
    }
    let parse = |value: &[u8]| {
        let text = std::str::from_utf8(value).ok()?;
        let time = httpdate::parse_http_date(text.trim()).ok()?;
        time.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs())
    };
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != value {
            *last = (value.to_vec(), parse(value));
        }
        last.1
    })
}

/// How long the response stays fresh after it was made (§4.2.1): `s-maxage`, else `max-age`,
/// else `Expires` minus `Date` (an invalid `Expires` means already stale), else the heuristic
/// for a status that allows one or an answer marked `public` (§4.2.2): a tenth of the time
/// since `Last-Modified`, at most a day.
/// `received` stands in for a missing `Date`; `d` is the response's `Cache-Control`.
pub fn freshness_lifetime(
    status: u16,
    (response, d): (&(impl Fields + ?Sized), &Directives),
    received: u64,
) -> u64 {
    if let Some(s) = d.s_maxage {
        return s;
    }
    if let Some(m) = d.max_age {
        return m;
    }
    let date = http_date(response.first("date")).unwrap_or(received);
    if let Some(expires) = response.first("expires") {
        return http_date(Some(expires)).map_or(0, |e| e.saturating_sub(date));
    }
    if heuristically_cacheable(status) || d.public {
        if let Some(modified) = http_date(response.first("last-modified")) {
            return (date.saturating_sub(modified) / 10).min(HEURISTIC_CAP);
        }
    }
    0
}

/// The response's `Age` (§5.1): 0 when absent, `None` unless it is one line of one
/// delta-seconds value (a list, a second line, a sign, a fraction or a parameter are all
/// taken as an age not known).
fn age_field(response: &(impl Fields + ?Sized)) -> Option<u64> {
    let mut lines = response.lines("age");
    let Some(line) = lines.next() else {
        return Some(0);
    };
    if lines.next().is_some() {
        return None;
    }
    crate::cache_control::parse_seconds(line.trim_ascii())
}

/// What the cache keeps beside a stored response to judge it later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// When the request that fetched it was sent, and when the response arrived.
    pub request_time: u64,
    pub response_time: u64,
    /// `Date` (or `response_time`), and `Age` as received.
    pub date: u64,
    pub age: u64,
    pub lifetime: u64,
    /// `no-cache`: revalidate before every use.
    pub no_cache: bool,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage`: never served stale (§5.2.2.2,
    /// §5.2.2.8, §5.2.2.10), not even on error.
    pub no_stale: bool,
    pub stale_while_revalidate: u64,
    pub stale_if_error: u64,
}

impl Stored {
    /// `d` is the response's `Cache-Control`.
    pub fn new(
        status: u16,
        (response, d): (&(impl Fields + ?Sized), &Directives),
        request_time: u64,
        response_time: u64,
    ) -> Stored {
        // An `Age` that does not parse leaves the answer stale (its age is unknown); §5.1
        // allows ignoring it, but an upstream cache may have held the answer for any time.
        let (age, lifetime) = match age_field(response) {
            Some(age) => (
                age,
                freshness_lifetime(status, (response, d), response_time),
            ),
            None => (0, 0),
        };
        Stored {
            request_time,
            response_time,
            date: http_date(response.first("date")).unwrap_or(response_time),
            age,
            lifetime,
            no_cache: d.no_cache,
            no_stale: d.must_revalidate || d.proxy_revalidate || d.s_maxage.is_some(),
            stale_while_revalidate: d.stale_while_revalidate.unwrap_or(0),
            stale_if_error: d.stale_if_error.unwrap_or(0),
        }
    }

    /// The stored response's age now, to be sent as `Age`.
    pub fn age_at(&self, now: u64) -> u64 {
        current_age(self, now)
    }

    /// Whether it may answer a request with these directives now (§4.2, §4.2.4, RFC 5861).
    pub fn usable(&self, now: u64, request: &Directives) -> Usable {
        let age = current_age(self, now);
        if self.no_cache || request.no_cache {
            return Usable::Revalidate;
        }
        let fresh_for = self.lifetime.saturating_sub(age) as i64;
        let too_old = request.max_age.is_some_and(|max| age > max)
            || request
                .min_fresh
                .is_some_and(|min| (fresh_for as u64) < min);
        if age < self.lifetime && !too_old {
            return Usable::Fresh { ttl: fresh_for };
        }
        if self.no_stale || too_old {
            return Usable::Revalidate;
        }
        let staleness = age.saturating_sub(self.lifetime);
        if request.max_stale.is_some_and(|max| staleness <= max) {
            return Usable::Stale {
                ttl: -(staleness as i64),
            };
        }
        // A window of N seconds admits staleness 0 to N-1: without the directive (0), an
        // answer that just turned stale is not served.
        if staleness < self.stale_while_revalidate {
            return Usable::StaleWhileRevalidate {
                ttl: -(staleness as i64),
            };
        }
        Usable::Revalidate
    }

    /// Whether it may answer when the origin fails (RFC 5861 `stale-if-error`, from the
    /// stored response or the request).
    pub fn usable_on_error(&self, now: u64, request: &Directives) -> bool {
        if self.no_stale {
            return false;
        }
        let staleness = current_age(self, now).saturating_sub(self.lifetime);
        let allowed = self.stale_if_error.max(request.stale_if_error.unwrap_or(0));
        staleness < allowed
    }
}

/// How a stored response may be used for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usable {
    /// Fresh, for `ttl` more seconds.
    Fresh { ttl: i64 },
    /// Stale by `-ttl` seconds, and the client said that is fine (`max-stale`).
    Stale { ttl: i64 },
    /// Stale by `-ttl` seconds, inside `stale-while-revalidate`: answer with it and
    /// revalidate in the background.
    StaleWhileRevalidate { ttl: i64 },
    /// Only after the origin confirms it (a conditional request).
    Revalidate,
}

/// The current age of a stored response (§4.2.3).
pub fn current_age(stored: &Stored, now: u64) -> u64 {
    let apparent_age = stored.response_time.saturating_sub(stored.date);
    let response_delay = stored.response_time.saturating_sub(stored.request_time);
    let corrected_age_value = stored.age + response_delay;
    let corrected_initial_age = apparent_age.max(corrected_age_value);
    let resident_time = now.saturating_sub(stored.response_time);
    corrected_initial_age + resident_time
}

/// The secondary key of a response for the request that fetched it (§4.1): the request's
/// values of each field the response's `Vary` names, in the order named. `None` for
/// `Vary: *`. Values are compared with whitespace around commas removed.
pub fn secondary_key(
    response: &(impl Fields + ?Sized),
    request: &(impl Fields + ?Sized),
) -> Option<Vec<u8>> {
    let mut names: Vec<String> = Vec::new();
    for line in response.lines("vary") {
        for name in line.split(|&b| b == b',') {
            let name = String::from_utf8_lossy(name.trim_ascii()).to_ascii_lowercase();
            if name == "*" {
                return None;
            }
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let mut key = Vec::new();
    for name in &names {
        key.extend_from_slice(name.as_bytes());
        key.push(b':');
        for (i, value) in request.lines(name).enumerate() {
            if i > 0 {
                key.push(b',');
            }
            for (j, part) in value.split(|&b| b == b',').enumerate() {
                if j > 0 {
                    key.push(b',');
                }
                key.extend_from_slice(part.trim_ascii());
            }
        }
        key.push(b'\n');
    }
    Some(key)
}

/// What the cache did with a request, for `Cache-Status` (RFC 9211).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Answered from the store; `ttl` seconds of freshness left (negative: stale by that).
    Hit { ttl: i64 },
    /// Went to the origin: `fwd` says why (`uri-miss`, `vary-miss`, `stale`, `request`,
    /// `bypass`), `fwd_status` is the origin's status, `stored` whether the answer was kept.
    Forward {
        fwd: &'a str,
        fwd_status: u16,
        stored: bool,
        detail: Option<&'static str>,
    },
}

/// The `Cache-Status` value for `outcome`, as cache `name`.
pub fn cache_status(name: &str, outcome: Outcome<'_>) -> String {
    let mut value = String::with_capacity(64);
    value.push_str(name);
    match outcome {
        Outcome::Hit { ttl } => {
            value.push_str("; hit; ttl=");
            push_int(&mut value, ttl);
        }
        Outcome::Forward {
            fwd,
            fwd_status,
            stored,
            detail,
        } => {
            value.push_str("; fwd=");
            value.push_str(fwd);
            value.push_str("; fwd-status=");
            push_int(&mut value, i64::from(fwd_status));
            if stored {
                value.push_str("; stored");
            }
            if let Some(detail) = detail {
                value.push_str("; detail=");
                value.push_str(detail);
            }
        }
    }
    value
}

/// Appends `n` in decimal (without the formatting machinery: this runs on every answer).
fn push_int(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    let mut digits = [0u8; 20];
    let mut left = n.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (left % 10) as u8;
        left /= 10;
        if left == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Head<'a> = Vec<(&'a str, &'a [u8])>;

    fn head<'a>(fields: &[(&'a str, &'a str)]) -> Head<'a> {
        fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
    }

    const NOW: u64 = 1_700_000_000;

    /// A head's `Cache-Control`, parsed.
    fn cc_of(h: &[(&str, &[u8])]) -> Directives {
        Directives::parse(h.lines("cache-control"))
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }

    #[test]
    fn what_may_be_stored() {
        let plain = head(&[]);
        let ok = |method, status, req: &Head, res: &Head| {
            storable(
                method,
                status,
                (&req[..], &cc_of(req)),
                (&res[..], &cc_of(res)),
            )
        };
        let cc = |v| head(&[("cache-control", v)]);
        assert_eq!(ok("GET", 200, &plain, &plain), Ok(()));
        assert_eq!(
            ok("POST", 200, &plain, &cc("max-age=60")),
            Err(NotStorable::Method)
        );
        assert_eq!(
            ok("GET", 206, &plain, &cc("max-age=60")),
            Err(NotStorable::Status)
        );
        // Any other final status with explicit freshness (RFC 9111 §3), even one weir does
        // not know; none without it.
        for status in [299, 303, 400, 500, 503, 599] {
            assert_eq!(ok("GET", status, &plain, &cc("max-age=60")), Ok(()));
            assert_eq!(
                ok("GET", status, &plain, &plain),
                Err(NotStorable::NoFreshness)
            );
        }
        assert_eq!(
            ok("GET", 304, &plain, &cc("max-age=60")),
            Err(NotStorable::Status)
        );
        assert_eq!(
            ok("GET", 101, &plain, &cc("max-age=60")),
            Err(NotStorable::Status)
        );
        // must-understand: only a status weir knows, and then no-store does not hold.
        assert_eq!(
            ok("GET", 599, &plain, &cc("max-age=60, must-understand")),
            Err(NotStorable::Status)
        );
        assert_eq!(
            ok(
                "GET",
                200,
                &plain,
                &cc("max-age=60, must-understand, no-store")
            ),
            Ok(())
        );
        assert_eq!(
            ok(
                "GET",
                200,
                &cc("no-store"),
                &cc("max-age=60, must-understand")
            ),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            ok("GET", 200, &cc("no-store"), &plain),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            ok("GET", 200, &plain, &cc("no-store")),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            ok("GET", 200, &plain, &cc("private, max-age=60")),
            Err(NotStorable::Private)
        );
        // A redirect that is not heuristically cacheable needs explicit freshness.
        assert_eq!(
            ok("GET", 302, &plain, &plain),
            Err(NotStorable::NoFreshness)
        );
        assert_eq!(ok("GET", 302, &plain, &cc("max-age=5")), Ok(()));
        // Authorization: only when the response says it may be shared.
        let auth = head(&[("authorization", "Bearer x")]);
        assert_eq!(
            ok("GET", 200, &auth, &cc("max-age=60")),
            Err(NotStorable::Authorization)
        );
        assert_eq!(ok("GET", 200, &auth, &cc("public, max-age=60")), Ok(()));
        assert_eq!(ok("GET", 200, &auth, &cc("s-maxage=60")), Ok(()));
        assert_eq!(ok("GET", 200, &auth, &cc("must-revalidate")), Ok(()));
        let cookie = head(&[("set-cookie", "a=b"), ("cache-control", "max-age=60")]);
        assert_eq!(ok("GET", 200, &plain, &cookie), Err(NotStorable::SetCookie));
        let vary = head(&[("vary", "accept-encoding, *")]);
        assert_eq!(ok("GET", 200, &plain, &vary), Err(NotStorable::VaryAll));
        // Names in any case; Expires is explicit freshness; public lets Set-Cookie be stored.
        let shouting = head(&[("VARY", "Accept"), ("Vary", " * ")]);
        assert_eq!(ok("GET", 200, &plain, &shouting), Err(NotStorable::VaryAll));
        let expires = head(&[("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")]);
        assert_eq!(ok("GET", 302, &plain, &expires), Ok(()));
        let public = head(&[("Set-Cookie", "a=b"), ("Cache-Control", "public")]);
        assert_eq!(ok("GET", 200, &plain, &public), Ok(()));
    }

    #[test]
    fn freshness_lifetime_follows_the_order_of_the_rfc() {
        let d = date(NOW);
        let life = |fields: &[(&str, &str)]| {
            let h = head(fields);
            freshness_lifetime(200, (&h[..], &cc_of(&h)), NOW)
        };
        assert_eq!(life(&[("cache-control", "max-age=60, s-maxage=600")]), 600);
        assert_eq!(
            life(&[("cache-control", "max-age=60"), ("expires", &date(NOW + 9))]),
            60
        );
        assert_eq!(life(&[("date", &d), ("expires", &date(NOW + 90))]), 90);
        // An invalid Expires ("0") means already expired.
        assert_eq!(life(&[("date", &d), ("expires", "0")]), 0);
        // Heuristic: a tenth of the time since Last-Modified, capped at a day.
        assert_eq!(
            life(&[("date", &d), ("last-modified", &date(NOW - 1000))]),
            100
        );
        assert_eq!(
            life(&[("date", &d), ("last-modified", &date(NOW - 10_000_000))]),
            HEURISTIC_CAP
        );
        // Not for a status that needs explicit freshness.
        let modified = date(NOW - 1000);
        let redirect = head(&[("date", &d), ("last-modified", &modified)]);
        assert_eq!(
            freshness_lifetime(302, (&redirect[..], &cc_of(&redirect)), NOW),
            0
        );
        // Unless marked `public`, which makes any status explicitly cacheable.
        let public = head(&[
            ("date", &d),
            ("last-modified", &modified),
            ("cache-control", "public"),
        ]);
        assert_eq!(
            freshness_lifetime(599, (&public[..], &cc_of(&public)), NOW),
            100
        );
        assert_eq!(life(&[]), 0);
    }

    #[test]
    fn age_counts_the_trip_and_the_time_in_store() {
        // The origin said Age: 10, the trip took 2 s, and it has been stored for 30 s.
        let now = date(NOW);
        let res = head(&[
            ("date", &now),
            ("age", "10"),
            ("cache-control", "max-age=60"),
        ]);
        let stored = Stored::new(200, (&res[..], &cc_of(&res)), NOW - 2, NOW);
        assert_eq!(stored.age_at(NOW + 30), 42);
        // A Date in the future (clock skew) does not make it younger than its Age.
        let later = date(NOW + 100);
        let skewed = head(&[("date", &later), ("age", "5")]);
        assert_eq!(
            Stored::new(200, (&skewed[..], &cc_of(&skewed)), NOW, NOW).age_at(NOW),
            5
        );
    }

    #[test]
    fn an_age_that_does_not_parse_leaves_the_answer_stale() {
        let now = date(NOW);
        let stored = |ages: &[&str]| {
            let mut fields = vec![("date", now.as_str()), ("cache-control", "max-age=3600")];
            fields.extend(ages.iter().map(|age| ("age", *age)));
            let res = head(&fields);
            Stored::new(200, (&res[..], &cc_of(&res)), NOW, NOW)
        };
        let none = Directives::default();
        assert_eq!(stored(&[]).usable(NOW, &none), Usable::Fresh { ttl: 3600 });
        assert_eq!(
            stored(&[" 60 "]).usable(NOW, &none),
            Usable::Fresh { ttl: 3540 }
        );
        assert_eq!(stored(&["99999999999"]).age, 1 << 31);
        let unknown: [&[&str]; 8] = [
            &["abc"],
            &["-7200"],
            &["7200.0"],
            &["0, 0"],
            &["0,7200"],
            &["7200;foo=bar"],
            &[""],
            &["0", "0"],
        ];
        for ages in unknown {
            let s = stored(ages);
            assert_eq!((s.age, s.lifetime), (0, 0), "{ages:?}");
            assert_eq!(s.usable(NOW, &none), Usable::Revalidate, "{ages:?}");
        }
    }

    #[test]
    fn usable_fresh_stale_and_revalidate() {
        let none = Directives::default();
        let stored = |cc: &str| {
            let now = date(NOW);
            let res = head(&[("date", &now), ("cache-control", cc)]);
            Stored::new(200, (&res[..], &cc_of(&res)), NOW, NOW)
        };
        let s = stored("max-age=60, stale-while-revalidate=30, stale-if-error=300");
        assert_eq!(s.usable(NOW + 10, &none), Usable::Fresh { ttl: 50 });
        assert_eq!(
            s.usable(NOW + 70, &none),
            Usable::StaleWhileRevalidate { ttl: -10 }
        );
        assert_eq!(s.usable(NOW + 100, &none), Usable::Revalidate);
        // A window of 30 s ends 30 s after the answer turned stale.
        assert_eq!(
            s.usable(NOW + 89, &none),
            Usable::StaleWhileRevalidate { ttl: -29 }
        );
        assert_eq!(s.usable(NOW + 90, &none), Usable::Revalidate);
        // Without stale-while-revalidate or stale-if-error, an answer just turned stale
        // (age equal to its lifetime) is neither served nor kept for errors.
        let plain = stored("max-age=60");
        assert_eq!(plain.usable(NOW + 60, &none), Usable::Revalidate);
        assert!(!plain.usable_on_error(NOW + 60, &none));
        let expired = {
            let now = date(NOW);
            let res = head(&[("date", &now), ("expires", &now)]);
            Stored::new(200, (&res[..], &cc_of(&res)), NOW, NOW)
        };
        assert_eq!(expired.usable(NOW, &none), Usable::Revalidate);
        assert!(s.usable_on_error(NOW + 300, &none));
        assert!(!s.usable_on_error(NOW + 400, &none));
        // must-revalidate: never stale, not even on error.
        let strict =
            stored("max-age=60, must-revalidate, stale-while-revalidate=30, stale-if-error=300");
        assert_eq!(strict.usable(NOW + 70, &none), Usable::Revalidate);
        assert!(!strict.usable_on_error(NOW + 70, &none));
        // no-cache: stored, but always revalidated.
        assert_eq!(
            stored("no-cache, max-age=60").usable(NOW, &none),
            Usable::Revalidate
        );
        // The request's own limits.
        let ask = |cc: &str| Directives::parse([cc.as_bytes()]);
        let s = stored("max-age=60");
        assert_eq!(s.usable(NOW + 30, &ask("max-age=10")), Usable::Revalidate);
        assert_eq!(s.usable(NOW + 30, &ask("min-fresh=40")), Usable::Revalidate);
        assert_eq!(s.usable(NOW + 30, &ask("no-cache")), Usable::Revalidate);
        assert_eq!(
            s.usable(NOW + 65, &ask("max-stale=10")),
            Usable::Stale { ttl: -5 }
        );
        assert_eq!(s.usable(NOW + 65, &ask("max-stale=2")), Usable::Revalidate);
    }

    #[test]
    fn a_304_updates_all_but_the_fields_of_the_stored_body() {
        for name in [
            "Cache-Control",
            "expires",
            "content-type",
            "content-location",
            "x-a",
        ] {
            assert!(updated_by_304(name.as_bytes()), "{name}");
        }
        for name in [
            "Content-Encoding",
            "content-length",
            "content-md5",
            "content-range",
            "ETag",
        ] {
            assert!(!updated_by_304(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn vary_builds_the_secondary_key() {
        let res = head(&[
            ("vary", "Accept-Encoding, accept-language"),
            ("vary", "accept-encoding"),
        ]);
        let gzip = head(&[("accept-encoding", "gzip,  br"), ("accept-language", "en")]);
        let gzip_spaced = head(&[("accept-encoding", "gzip, br"), ("accept-language", "en")]);
        let none = head(&[]);
        let key = |req: &Head| secondary_key(&res[..], &req[..]);
        assert_eq!(key(&gzip), key(&gzip_spaced));
        assert_ne!(key(&gzip), key(&none));
        assert_eq!(
            key(&gzip).unwrap(),
            b"accept-encoding:gzip,br\naccept-language:en\n"
        );
        assert_eq!(secondary_key(&head(&[("vary", "*")])[..], &gzip[..]), None);
        assert_eq!(secondary_key(&none[..], &gzip[..]), Some(Vec::new()));
    }

    #[test]
    fn cache_status_values() {
        assert_eq!(
            cache_status("weir", Outcome::Hit { ttl: 42 }),
            "weir; hit; ttl=42"
        );
        for (ttl, text) in [(0, "0"), (-7, "-7"), (i64::MIN + 1, "-9223372036854775807")] {
            assert_eq!(
                cache_status("weir", Outcome::Hit { ttl }),
                format!("weir; hit; ttl={text}")
            );
        }
        let miss = Outcome::Forward {
            fwd: "uri-miss",
            fwd_status: 200,
            stored: true,
            detail: None,
        };
        assert_eq!(
            cache_status("weir", miss),
            "weir; fwd=uri-miss; fwd-status=200; stored"
        );
        let refused = Outcome::Forward {
            fwd: "uri-miss",
            fwd_status: 200,
            stored: false,
            detail: Some(NotStorable::Private.detail()),
        };
        assert_eq!(
            cache_status("weir", refused),
            "weir; fwd=uri-miss; fwd-status=200; detail=private"
        );
    }
}
