//! The Traefik v3 rule languages, joined by `&&`, `||`, `!` and parentheses: HTTP routers'
//! (`Host`, `HostRegexp`, `Path`, `PathPrefix`, `PathRegexp`, `Method`, `Header`,
//! `HeaderRegexp`, `Query`, `QueryRegexp`, `ClientIP`) and TCP routers' (`HostSNI`,
//! `HostSNIRegexp`, `ALPN`, `ClientIP`). Parsing yields an expression tree with regexes and CIDRs
//! already compiled; errors carry the character offset in the rule text.

use regex::Regex;
use std::fmt;
use std::net::IpAddr;

/// A rule over matchers `M`: [`Matcher`] for HTTP routers, [`TcpMatcher`] for TCP ones.
#[derive(Debug, Clone)]
pub enum Rule<M = Matcher> {
    And(Box<Rule<M>>, Box<Rule<M>>),
    Or(Box<Rule<M>>, Box<Rule<M>>),
    Not(Box<Rule<M>>),
    Match(M),
}

impl<M> Rule<M> {
    /// Whether the rule holds when each matcher is decided by `test`.
    pub fn eval(&self, test: &impl Fn(&M) -> bool) -> bool {
        match self {
            Rule::And(a, b) => a.eval(test) && b.eval(test),
            Rule::Or(a, b) => a.eval(test) || b.eval(test),
            Rule::Not(a) => !a.eval(test),
            Rule::Match(m) => test(m),
        }
    }

    /// Whether some matcher in the rule satisfies `test`.
    pub fn any_matcher(&self, test: &impl Fn(&M) -> bool) -> bool {
        match self {
            Rule::And(a, b) | Rule::Or(a, b) => a.any_matcher(test) || b.any_matcher(test),
            Rule::Not(a) => a.any_matcher(test),
            Rule::Match(m) => test(m),
        }
    }
}

/// What a TCP router's rule can look at: the TLS ClientHello's server name and ALPN
/// protocols (read without consuming them), and the client's address.
#[derive(Debug, Clone)]
pub enum TcpMatcher {
    /// `HostSNI(`*`)` matches every connection, TLS or not; other patterns need an SNI.
    HostSni(HostPattern),
    HostSniRegexp(Regex),
    /// One of the protocols the client offers by ALPN.
    Alpn(String),
    ClientIp(Cidr),
}

#[derive(Debug, Clone)]
pub enum Matcher {
    Host(HostPattern),
    HostRegexp(Regex),
    Path(String),
    PathPrefix(String),
    PathRegexp(Regex),
    /// Upper-cased method name, compared exactly with the request's.
    Method(String),
    Header(String, String),
    HeaderRegexp(String, Regex),
    /// Some decoded value of the key equals the value; `Query(key)` alone means the value `""`
    /// (`?key` or `?key=`), as in Traefik.
    Query(String, String),
    QueryRegexp(String, Regex),
    ClientIp(Cidr),
}

/// What a `Host` matcher accepts, on the canonical host (see [`canonical_host`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// `*.example.com`: exactly one label in front of `.example.com` (stored with the dot).
    OneLabelUnder(String),
    /// `*`: any host.
    Any,
}

impl HostPattern {
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => host == h,
            HostPattern::OneLabelUnder(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            HostPattern::Any => !host.is_empty(),
        }
    }
}

/// The form hosts are compared in, for rules and requests alike: lowercased, without a port,
/// without one trailing dot, and IPv6 literals without brackets (`[::1]:8080` → `::1`).
pub fn canonical_host(raw: &str) -> std::borrow::Cow<'_, str> {
    // Runs on every request: one scan for the first colon decides the shape.
    let host = match raw.as_bytes().first() {
        Some(b'[') => raw[1..].split(']').next().unwrap_or(raw),
        // A byte scan: hosts are short, and `str::find(':')` costs about 80 instructions of
        // set-up per call (callgrind).
        _ => match raw.bytes().position(|b| b == b':') {
            None => raw,
            // More colons: a bare IPv6 literal, whose colons are not a port.
            Some(i) if raw.as_bytes()[i + 1..].contains(&b':') => raw,
            Some(i) if raw[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &raw[..i],
            Some(_) => raw,
        },
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

/// Translates what Go's RE2 (Traefik's regex engine) accepts and Rust's `regex` does not: a `{`
/// that does not start a repetition (`{2}`, `{2,}`, `{2,5}`) is a literal brace in Go, so it is
/// escaped here (`/{path:(css|js)}` matches a literal `{path:css}`). Character classes and
/// escaped characters are copied as they are.
pub fn from_go_syntax(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.char_indices().peekable();
    let mut in_class = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A `]` right after `[` or `[^` is a literal member, not the end.
                if let Some(&(_, '^')) = chars.peek() {
                    out.push('^');
                    chars.next();
                }
                if let Some(&(_, ']')) = chars.peek() {
                    out.push(']');
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '{' if !in_class && !starts_repetition(&pattern[i + 1..]) => out.push_str("\\{"),
            '}' if !in_class && !closes_repetition(&out) => out.push_str("\\}"),
            _ => out.push(c),
        }
    }
    out
}

/// Whether the text after a `{` is `n}`, `n,}` or `n,m}`.
fn starts_repetition(rest: &str) -> bool {
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    match rest.strip_prefix(',') {
        None => rest.starts_with('}'),
        Some(more) => more
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .starts_with('}'),
    }
}

/// Whether a `}` closes a repetition opened in `out` (an unescaped `{` then digits and commas).
fn closes_repetition(out: &str) -> bool {
    let body = out.trim_end_matches(|c: char| c.is_ascii_digit() || c == ',');
    body.ends_with('{') && !body.ends_with("\\{") && body.len() < out.len()
}

/// An IP network: `10.0.0.0/8`, `::1/128`, or a bare address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(
                u32::from(net) as u128,
                u32::from(ip) as u128,
                self.prefix,
                32,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(net), u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }
}

fn prefix_eq(net: u128, ip: u128, prefix: u8, bits: u32) -> bool {
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix as u32;
    (net >> shift) == (ip >> shift)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// Character offset into the rule text.
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.offset + 1)
    }
}

const HTTP_MATCHERS: [&str; 11] = [
    "Host",
    "HostRegexp",
    "Path",
    "PathPrefix",
    "PathRegexp",
    "Method",
    "Header",
    "HeaderRegexp",
    "Query",
    "QueryRegexp",
    "ClientIP",
];

const TCP_MATCHERS: [&str; 4] = ["HostSNI", "HostSNIRegexp", "ALPN", "ClientIP"];

/// The spellings Traefik accepts for a matcher name.
fn spellings(canonical: &str) -> impl Iterator<Item = String> + '_ {
    let lower = canonical.to_ascii_lowercase();
    let mut title = lower.clone();
    title[..1].make_ascii_uppercase();
    [
        canonical.to_string(),
        lower,
        canonical.to_ascii_uppercase(),
        title,
    ]
    .into_iter()
}

/// Parses an HTTP router's rule.
pub fn parse(text: &str) -> Result<Rule, RuleError> {
    parse_with(text, &HTTP_MATCHERS, http_matcher)
}

/// Parses a TCP router's rule.
pub fn parse_tcp(text: &str) -> Result<Rule<TcpMatcher>, RuleError> {
    parse_with(text, &TCP_MATCHERS, tcp_matcher)
}

/// A matcher's name (as canonically spelled) and its arguments with their offsets.
type MatcherBuilder<M> = fn(&str, usize, &[(String, usize)]) -> Result<M, RuleError>;

fn parse_with<M>(
    text: &str,
    names: &'static [&'static str],
    build: MatcherBuilder<M>,
) -> Result<Rule<M>, RuleError> {
    let tokens = tokenize(text)?;
    let mut parser = RuleParser {
        tokens,
        next: 0,
        end: text.chars().count(),
        names,
        build,
        depth: 0,
    };
    let rule = parser.or()?;
    match parser.peek() {
        None => Ok(rule),
        Some((tok, at)) => Err(RuleError {
            offset: at,
            message: format!(
                "unexpected {}, expected `&&`, `||` or the end of the rule",
                tok
            ),
        }),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    LParen,
    RParen,
    Comma,
    And,
    Or,
    Not,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(name) => write!(f, "`{name}`"),
            Token::Str(s) => write!(f, "string `{s}`"),
            Token::LParen => f.write_str("`(`"),
            Token::RParen => f.write_str("`)`"),
            Token::Comma => f.write_str("`,`"),
            Token::And => f.write_str("`&&`"),
            Token::Or => f.write_str("`||`"),
            Token::Not => f.write_str("`!`"),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, RuleError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                i += 1;
                continue;
            }
            '(' => tokens.push((Token::LParen, start)),
            ')' => tokens.push((Token::RParen, start)),
            ',' => tokens.push((Token::Comma, start)),
            '!' => tokens.push((Token::Not, start)),
            '&' | '|' => {
                if chars.get(i + 1) != Some(&c) {
                    return Err(RuleError {
                        offset: start,
                        message: format!("expected `{c}{c}`"),
                    });
                }
                i += 1;
                tokens.push((if c == '&' { Token::And } else { Token::Or }, start));
            }
            '`' | '"' => {
                let close = chars[i + 1..]
                    .iter()
                    .position(|&ch| ch == c)
                    .ok_or(RuleError {
                        offset: start,
                        message: format!("unterminated string, expected a closing {c}"),
                    })?;
                let s: String = chars[i + 1..i + 1 + close].iter().collect();
                i += close + 1;
                tokens.push((Token::Str(s), start));
            }
            c if c.is_ascii_alphabetic() => {
                let mut end = i;
                while end < chars.len() && chars[end].is_ascii_alphanumeric() {
                    end += 1;
                }
                tokens.push((Token::Ident(chars[i..end].iter().collect()), start));
                i = end;
                continue;
            }
            other => {
                return Err(RuleError {
                    offset: start,
                    message: format!("unexpected character `{other}`"),
                })
            }
        }
        i += 1;
    }
    Ok(tokens)
}

struct RuleParser<M> {
    tokens: Vec<(Token, usize)>,
    next: usize,
    end: usize,
    /// The matcher names of the rule's language.
    names: &'static [&'static str],
    build: MatcherBuilder<M>,
    /// `(` and `!` levels open around the token being read.
    depth: usize,
}

/// Deepest nesting of `(` and `!` in a rule: the parser recurses once per level, and a few
/// thousand levels overflowed a thread's stack.
const MAX_NESTING: usize = 100;

impl<M> RuleParser<M> {
    fn peek(&self) -> Option<(&Token, usize)> {
        self.tokens.get(self.next).map(|(t, at)| (t, *at))
    }

    fn bump(&mut self) -> Option<(Token, usize)> {
        let tok = self.tokens.get(self.next).cloned();
        self.next += 1;
        tok
    }

    fn expect(&mut self, want: Token, what: &str) -> Result<usize, RuleError> {
        match self.bump() {
            Some((tok, at)) if tok == want => Ok(at),
            Some((tok, at)) => Err(RuleError {
                offset: at,
                message: format!("expected {what}, found {tok}"),
            }),
            None => Err(RuleError {
                offset: self.end,
                message: format!("expected {what}, found the end of the rule"),
            }),
        }
    }

    fn or(&mut self) -> Result<Rule<M>, RuleError> {
        let mut left = self.and()?;
        while matches!(self.peek(), Some((Token::Or, _))) {
            self.next += 1;
            left = Rule::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Rule<M>, RuleError> {
        let mut left = self.unary()?;
        while matches!(self.peek(), Some((Token::And, _))) {
            self.next += 1;
            left = Rule::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Rule<M>, RuleError> {
        let matchers = self.names.join(", ");
        match self.bump() {
            Some((Token::Not, at)) => Ok(Rule::Not(Box::new(self.nested(at, Self::unary)?))),
            Some((Token::LParen, at)) => {
                let inner = self.nested(at, Self::or)?;
                self.expect(Token::RParen, "`)`")?;
                Ok(inner)
            }
            Some((Token::Ident(name), at)) => self.matcher(&name, at),
            Some((tok, at)) => Err(RuleError {
                offset: at,
                message: format!("expected a matcher ({matchers}), `!` or `(`, found {tok}"),
            }),
            None => Err(RuleError {
                offset: self.end,
                message: format!("expected a matcher ({matchers}), found the end of the rule"),
            }),
        }
    }

    /// `inner` one level deeper, refused past [`MAX_NESTING`] (at the `(` or `!` at `at`).
    fn nested(
        &mut self,
        at: usize,
        inner: fn(&mut Self) -> Result<Rule<M>, RuleError>,
    ) -> Result<Rule<M>, RuleError> {
        if self.depth == MAX_NESTING {
            return Err(RuleError {
                offset: at,
                message: format!("rule nested more than {MAX_NESTING} deep in `(` and `!`"),
            });
        }
        self.depth += 1;
        let rule = inner(self);
        self.depth -= 1;
        rule
    }

    fn matcher(&mut self, written: &str, at: usize) -> Result<Rule<M>, RuleError> {
        // Traefik accepts each name as written in its docs, all lowercase, all uppercase, or
        // capitalised (`PathPrefix`, `pathprefix`, `PATHPREFIX`, `Pathprefix`).
        let Some(name) = self
            .names
            .iter()
            .find(|canonical| spellings(canonical).any(|s| s == written))
            .copied()
        else {
            return Err(RuleError {
                offset: at,
                message: format!(
                    "unknown matcher `{written}`{}, expected one of {}",
                    crate::load::suggest::did_you_mean(written, self.names.iter().copied()),
                    self.names.join(", ")
                ),
            });
        };
        self.expect(Token::LParen, &format!("`(` after `{name}`"))?;
        let mut args: Vec<(String, usize)> = Vec::new();
        loop {
            match self.bump() {
                Some((Token::Str(s), pos)) => args.push((s, pos)),
                Some((tok, pos)) => {
                    return Err(RuleError {
                        offset: pos,
                        message: format!(
                            "expected a quoted string argument to `{name}`, found {tok}"
                        ),
                    })
                }
                None => {
                    return Err(RuleError {
                        offset: self.end,
                        message: format!(
                            "expected an argument to `{name}`, found the end of the rule"
                        ),
                    })
                }
            }
            match self.bump() {
                Some((Token::Comma, _)) => continue,
                Some((Token::RParen, _)) => break,
                Some((tok, pos)) => {
                    return Err(RuleError {
                        offset: pos,
                        message: format!("expected `,` or `)`, found {tok}"),
                    })
                }
                None => {
                    return Err(RuleError {
                        offset: self.end,
                        message: "expected `)`, found the end of the rule".into(),
                    })
                }
            }
        }
        let arity: &[usize] = match name {
            "Header" | "HeaderRegexp" | "QueryRegexp" => &[2],
            "Query" => &[1, 2],
            _ => &[1],
        };
        if !arity.contains(&args.len()) {
            let want = arity
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(RuleError {
                offset: at,
                message: format!("`{name}` takes {want} argument(s), found {}", args.len()),
            });
        }
        // Traefik refuses empty arguments to every matcher.
        if let Some((_, pos)) = args.iter().find(|(text, _)| text.is_empty()) {
            return Err(RuleError {
                offset: *pos,
                message: format!("`{name}` does not take an empty argument"),
            });
        }
        Ok(Rule::Match((self.build)(name, at, &args)?))
    }
}

fn regex_arg((text, pos): &(String, usize)) -> Result<Regex, RuleError> {
    Regex::new(&from_go_syntax(text)).map_err(|e| RuleError {
        offset: *pos,
        message: format!(
            "invalid regular expression `{text}`: {}",
            crate::regex_error::one_line(&e)
        ),
    })
}

fn cidr_arg((text, pos): &(String, usize)) -> Result<Cidr, RuleError> {
    Cidr::parse(text).ok_or(RuleError {
        offset: *pos,
        message: format!("`{text}` is not an IP address or CIDR, expected e.g. `10.0.0.0/8`"),
    })
}

/// `*`, `*.example.com` or an exact name, as `Host` and `HostSNI` take them.
fn host_pattern_arg(name: &str, (host, pos): &(String, usize)) -> Result<HostPattern, RuleError> {
    if !host.is_ascii() {
        return Err(RuleError {
            offset: *pos,
            message: format!(
                "`{name}` takes ASCII only; write an internationalised name in its xn-- form"
            ),
        });
    }
    Ok(match host.as_str() {
        "*" => HostPattern::Any,
        _ => match host.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') && !suffix.contains('*') => {
                HostPattern::OneLabelUnder(canonical_host(suffix).into_owned())
            }
            _ => HostPattern::Exact(canonical_host(host).into_owned()),
        },
    })
}

fn http_matcher(name: &str, _at: usize, args: &[(String, usize)]) -> Result<Matcher, RuleError> {
    let path = |(text, pos): &(String, usize)| {
        if text.starts_with('/') {
            Ok(text.clone())
        } else {
            Err(RuleError {
                offset: *pos,
                message: format!("path `{text}` must start with `/`"),
            })
        }
    };
    Ok(match name {
        "Host" => Matcher::Host(host_pattern_arg(name, &args[0])?),
        // Matched case-sensitively against the canonical (lowercased) host, as Traefik does.
        "HostRegexp" => {
            if !args[0].0.is_ascii() {
                host_pattern_arg(name, &args[0])?;
            }
            Matcher::HostRegexp(regex_arg(&args[0])?)
        }
        "Path" => Matcher::Path(path(&args[0])?),
        "PathPrefix" => Matcher::PathPrefix(path(&args[0])?),
        "PathRegexp" => Matcher::PathRegexp(regex_arg(&args[0])?),
        "Method" => Matcher::Method(args[0].0.to_ascii_uppercase()),
        "Header" => Matcher::Header(args[0].0.clone(), args[1].0.clone()),
        "HeaderRegexp" => Matcher::HeaderRegexp(args[0].0.clone(), regex_arg(&args[1])?),
        "Query" => Matcher::Query(
            args[0].0.clone(),
            args.get(1).map(|a| a.0.clone()).unwrap_or_default(),
        ),
        "QueryRegexp" => Matcher::QueryRegexp(args[0].0.clone(), regex_arg(&args[1])?),
        _ => Matcher::ClientIp(cidr_arg(&args[0])?),
    })
}

fn tcp_matcher(name: &str, _at: usize, args: &[(String, usize)]) -> Result<TcpMatcher, RuleError> {
    Ok(match name {
        "HostSNI" => TcpMatcher::HostSni(host_pattern_arg(name, &args[0])?),
        // Matched against the lowercased server name.
        "HostSNIRegexp" => TcpMatcher::HostSniRegexp(regex_arg(&args[0])?),
        "ALPN" => TcpMatcher::Alpn(args[0].0.clone()),
        _ => TcpMatcher::ClientIp(cidr_arg(&args[0])?),
    })
}

/// Removes a `:port` suffix from a host, keeping bracketed IPv6 literals whole.
pub fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &host[..i],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> RuleError {
        parse(text).unwrap_err()
    }

    #[test]
    fn precedence_and_binds_tighter_than_or() {
        let rule = parse("Host(`a`) || Host(`b`) && !Path(`/x`)").unwrap();
        let Rule::Or(_, right) = rule else {
            panic!("expected Or at top")
        };
        assert!(matches!(*right, Rule::And(_, _)));
    }

    #[test]
    fn parentheses_group() {
        let rule = parse("(Host(`a`) || Host(`b`)) && Path(`/x`)").unwrap();
        assert!(matches!(rule, Rule::And(_, _)));
    }

    fn host_pattern(rule: &str) -> HostPattern {
        let Rule::Match(Matcher::Host(h)) = parse(rule).unwrap() else {
            panic!("{rule}")
        };
        h
    }

    #[test]
    fn hosts_are_canonical() {
        let exact = |h: &str| HostPattern::Exact(h.to_string());
        assert_eq!(
            host_pattern("Host(`API.Example.com:8080`)"),
            exact("api.example.com")
        );
        assert_eq!(host_pattern("Host(`example.com.`)"), exact("example.com"));
        assert_eq!(host_pattern("Host(`::1`)"), exact("::1"));
        assert_eq!(host_pattern("Host(`[::1]:8080`)"), exact("::1"));
        assert_eq!(host_pattern("Host(`*`)"), HostPattern::Any);
        let one = host_pattern("Host(`*.Example.com`)");
        assert_eq!(one, HostPattern::OneLabelUnder(".example.com".into()));
        assert!(one.matches("api.example.com"));
        assert!(!one.matches("a.b.example.com") && !one.matches("example.com"));
        assert_eq!(canonical_host("[::1]:8080"), "::1");
        assert_eq!(canonical_host("Example.COM.:80"), "example.com");
    }

    #[test]
    fn regexes_accept_what_go_accepts() {
        assert_eq!(from_go_syntax("/{path:(css|js)}"), "/\\{path:(css|js)\\}");
        assert_eq!(from_go_syntax("^a{2,3}b{4}c{5,}$"), "^a{2,3}b{4}c{5,}$");
        assert_eq!(from_go_syntax("[{}]x\\{"), "[{}]x\\{");
        let Rule::Match(Matcher::PathRegexp(re)) =
            parse("PathRegexp(`^/{path:(css|js)}$`)").unwrap()
        else {
            panic!()
        };
        assert!(re.is_match("/{path:css}") && !re.is_match("/css"));
        // What neither engine accepts is still an error.
        assert!(parse("PathRegexp(`(unclosed`)").is_err());
    }

    #[test]
    fn matcher_names_take_traefiks_spellings() {
        for name in ["PathPrefix", "pathprefix", "PATHPREFIX", "Pathprefix"] {
            assert!(parse(&format!("{name}(`/a`)")).is_ok(), "{name}");
        }
        assert!(parse("pathPrefix(`/a`)").is_err());
        assert!(parse("clientip(`10.0.0.0/8`) && HOSTREGEXP(`^a$`)").is_ok());
    }

    #[test]
    fn empty_and_non_ascii_arguments_are_refused() {
        for rule in [
            "HostRegexp(``)",
            "Query(`q`, ``)",
            "Header(`X`, ``)",
            "Method(``)",
            "Host(`bücher.example`)",
            "HostRegexp(`^bü`)",
        ] {
            let e = parse(rule).unwrap_err();
            assert!(e.offset > 0, "{rule}: {e:?}");
        }
    }

    #[test]
    fn double_quotes_are_accepted() {
        assert!(parse(r#"Header("X-A", "1") && Query("k")"#).is_ok());
    }

    #[test]
    fn errors_carry_offsets() {
        assert_eq!(err("Hots(`a`)").offset, 0);
        assert!(err("Hots(`a`)")
            .message
            .starts_with("unknown matcher `Hots` (did you mean `Host`?), expected one of Host,"));
        // Nothing close: no guess.
        assert!(err("Xyzzy(`a`)")
            .message
            .starts_with("unknown matcher `Xyzzy`, expected one of"));
        assert_eq!(err("Host(`a`) && ").offset, 13);
        assert_eq!(err("Host(`a`) & Path(`/`)").offset, 10);
        assert_eq!(err("Path(`x`)").offset, 5);
        assert_eq!(err("PathRegexp(`(`)").offset, 11);
        assert_eq!(err("Host(`a`, `b`)").offset, 0);
        assert_eq!(err("ClientIP(`10.0.0.0/33`)").offset, 9);
        assert_eq!(err("Host(`a`) Path(`/`)").offset, 10);
        assert_eq!(err("Host(`a`").offset, 8);
        assert_eq!(err("(Host(`a`)").offset, 10);
        assert_eq!(err("Host(`a)").offset, 5);
    }

    #[test]
    fn cidr_contains() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        // Found probing the fuzz target rule with inputs past its length limit: 4,000 `(`
        // overflowed the stack (the control thread's, on a reload).
        let deep = format!("{}Host(`a`){}", "(".repeat(100_000), ")".repeat(100_000));
        let e = parse(&deep).unwrap_err();
        assert_eq!(e.offset, 100, "{e}");
        assert!(e.message.contains("nested more than 100 deep"), "{e}");
        assert!(parse_tcp(&format!("{}HostSNI(`a`)", "!".repeat(100_000))).is_err());
        let edge = format!("{}Host(`a`){}", "(!".repeat(50), ")".repeat(50));
        assert!(parse(&edge).is_ok());
        assert!(parse(&format!("!{edge}")).is_err());
    }

    #[test]
    fn strip_port_keeps_ipv6() {
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("a.b"), "a.b");
    }
}
