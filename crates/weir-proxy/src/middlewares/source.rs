//! Which address a policy middleware takes as the client's: Traefik's IP strategies
//! (pkg/ip/strategy.go), shared by `ip_allow_list` and the policies that key on a source
//! (Traefik's source extractor, pkg/middlewares/extractor.go).

use crate::http::codec::RequestHead;
use std::hash::BuildHasher;
use std::io::Write;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};
use weir_config::{IpRanges, IpStrategy, SourceCriterion};

/// What a strategy or source criterion picked, as Traefik's return it: an address, or text
/// (an `X-Forwarded-For` entry, a header's value, the host; empty when there is none), read
/// as an address only when checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Picked<'a> {
    Addr(IpAddr),
    Text(&'a [u8]),
}

impl Picked<'_> {
    /// The address Traefik's checker reads: an entry's `host:port` or `[host]:port` loses its
    /// port; `None` for what is not an address (every allow list then refuses).
    pub(crate) fn addr(self) -> Option<IpAddr> {
        match self {
            Picked::Addr(ip) => Some(ip),
            Picked::Text(text) => {
                let text = std::str::from_utf8(text).ok()?;
                parse_addr(split_host_port(text).unwrap_or(text))
            }
        }
    }
}

/// The client address `strategy` picks for `req`, which came from `peer`.
pub(crate) fn pick<'a>(strategy: &IpStrategy, req: &'a RequestHead, peer: IpAddr) -> Picked<'a> {
    match strategy {
        IpStrategy::RemoteAddr { ipv6_subnet } => {
            // A dual-stack listener's IPv4 client is IPv4, as Go's remote address says.
            let peer = peer.to_canonical();
            Picked::Addr(match (peer, ipv6_subnet) {
                (IpAddr::V6(v6), Some(bits)) => IpAddr::V6(mask(v6, *bits)),
                _ => peer,
            })
        }
        IpStrategy::Depth { depth, ipv6_subnet } => {
            let entry = forwarded(req)
                .rsplit(|&b| b == b',')
                .nth((*depth as usize).saturating_sub(1))
                .map_or(&b""[..], <[u8]>::trim_ascii);
            match ipv6_subnet {
                Some(bits) => masked_entry(entry, *bits),
                None => Picked::Text(entry),
            }
        }
        IpStrategy::Excluded(excluded) => first_not_excluded(forwarded(req), excluded),
    }
}

impl<'a> Picked<'a> {
    /// The source as a map key: text as it is; an address as text (Traefik keys on strings),
    /// spelled in `buffer` (an address fits 45 bytes).
    pub(crate) fn as_key(self, buffer: &'a mut [u8; 45]) -> &'a [u8] {
        match self {
            Picked::Text(text) => text,
            // IPv4, by far the most common, without the formatting machinery.
            Picked::Addr(IpAddr::V4(v4)) => {
                let mut end = 0;
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        buffer[end] = b'.';
                        end += 1;
                    }
                    end += decimal(octet, &mut buffer[end..]);
                }
                &buffer[..end]
            }
            Picked::Addr(ip) => {
                let mut cursor = std::io::Cursor::new(&mut buffer[..]);
                let _ = write!(cursor, "{ip}");
                let end = cursor.position() as usize;
                &buffer[..end]
            }
        }
    }
}

/// `n` in decimal at the start of `out` (room for 3 digits); how many digits it took.
fn decimal(n: u8, out: &mut [u8]) -> usize {
    let digits = [n / 100, n / 10 % 10, n % 10];
    let skip = match n {
        100.. => 0,
        10.. => 1,
        _ => 2,
    };
    for (slot, digit) in out.iter_mut().zip(&digits[skip..]) {
        *slot = b'0' + digit;
    }
    3 - skip
}

/// How many locks a per-source policy's state is split over, so workers seldom wait for each
/// other.
pub(crate) const SHARDS: usize = 16;

/// A per-source policy's state (`S`: a map by source), in shards shared by the workers.
pub(crate) struct Shards<S> {
    hasher: foldhash::fast::FixedState,
    shards: Box<[Mutex<S>]>,
}

impl<S: Default> Shards<S> {
    pub(crate) fn new() -> Shards<S> {
        Shards {
            hasher: foldhash::fast::FixedState::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl<S> Shards<S> {
    /// The shard `source` belongs to, locked (no lock is held across an await).
    pub(crate) fn lock(&self, source: &[u8]) -> MutexGuard<'_, S> {
        let index = self.hasher.hash_one(source) as usize % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every shard, one at a time (tests count what is kept).
    #[cfg(test)]
    pub(crate) fn each(&self) -> impl Iterator<Item = MutexGuard<'_, S>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The source a per-source policy counts `req` under (Traefik's source extractor).
pub(crate) fn source_key<'a>(
    criterion: &SourceCriterion,
    req: &'a RequestHead,
    peer: IpAddr,
) -> Picked<'a> {
    match criterion {
        SourceCriterion::Ip(strategy) => pick(strategy, req, peer),
        SourceCriterion::RequestHeader(name) => {
            Picked::Text(req.head.get(name).unwrap_or_default())
        }
        SourceCriterion::RequestHost => Picked::Text(req.host().as_bytes()),
    }
}

/// The first `X-Forwarded-For` field line (Go's `Header.Get`).
fn forwarded(req: &RequestHead) -> &[u8] {
    req.head.get("x-forwarded-for").unwrap_or_default()
}

/// The rightmost non-empty entry that does not parse as an address in `excluded`.
fn first_not_excluded<'a>(list: &'a [u8], excluded: &IpRanges) -> Picked<'a> {
    for entry in list.rsplit(|&b| b == b',').map(<[u8]>::trim_ascii) {
        if entry.is_empty() {
            continue;
        }
        let parsed = std::str::from_utf8(entry).ok().and_then(parse_addr);
        if !parsed.is_some_and(|ip| excluded.contains(ip)) {
            return Picked::Text(entry);
        }
    }
    Picked::Text(b"")
}

/// An entry that is an IPv6 address (an IPv4-mapped one too), as the first address of its
/// `bits`-bit subnet; any other entry as it is.
fn masked_entry(entry: &[u8], bits: u8) -> Picked<'_> {
    let parsed = std::str::from_utf8(entry).ok().and_then(parse_addr);
    match parsed {
        Some(IpAddr::V6(v6)) => Picked::Addr(IpAddr::V6(mask(v6, bits))),
        _ => Picked::Text(entry),
    }
}

fn mask(ip: Ipv6Addr, bits: u8) -> Ipv6Addr {
    let keep = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
    Ipv6Addr::from(u128::from(ip) & keep)
}

/// An address as Go's `netip.ParseAddr` reads one: dotted IPv4 without leading zeros, or
/// IPv6 with an optional non-empty zone (`%eth0`), which is dropped.
fn parse_addr(text: &str) -> Option<IpAddr> {
    match text.split_once('%') {
        Some((v6, zone)) if !zone.is_empty() && v6.contains(':') => {
            v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
        }
        Some(_) => None,
        None => text.parse().ok(),
    }
}

/// The host of `host:port` or `[host]:port` as Go's `net.SplitHostPort` splits it (the port
/// unchecked); `None` where Go reports an error (a bare IPv6 address, no port).
fn split_host_port(text: &str) -> Option<&str> {
    let last_colon = text.rfind(':')?;
    let (host, after_host) = if let Some(rest) = text.strip_prefix('[') {
        let end = rest.find(']')? + 1;
        // The closing bracket must be followed by the last colon.
        if end + 1 != last_colon {
            return None;
        }
        (&text[1..end], end + 1)
    } else {
        let host = &text[..last_colon];
        if host.contains(':') {
            return None;
        }
        (host, 0)
    };
    let brackets_left = text[usize::from(text.starts_with('['))..].contains('[')
        || text[after_host..].contains(']');
    (!brackets_left).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address's key is its text as Rust (and Go) write it: IPv4 written by hand, IPv6 by
    /// the formatter.
    #[test]
    fn address_keys_are_the_addresses_text() {
        let mut addresses: Vec<IpAddr> = [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.9.99",
            "192.168.100.1",
            "::1",
            "2001:db8::7",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        addresses.extend((0..=255u8).map(|n| IpAddr::from([n, n / 3, 255 - n, n % 10])));
        for ip in addresses {
            let mut buffer = [0u8; 45];
            assert_eq!(
                Picked::Addr(ip).as_key(&mut buffer),
                ip.to_string().as_bytes()
            );
        }
    }
    use crate::http::codec::parse_request;
    use bytes::BytesMut;

    const IPV6_BASIC: &str = "::abcd:ffff:c0a8:1";

    fn request(forwarded_for: Option<&str>) -> RequestHead {
        let xff = forwarded_for.map_or(String::new(), |v| format!("X-Forwarded-For: {v}\r\n"));
        let text = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n{xff}\r\n");
        parse_request(&mut BytesMut::from(text.as_str()))
            .expect("valid")
            .expect("whole")
    }

    fn text(picked: Picked<'_>) -> String {
        match picked {
            Picked::Addr(ip) => ip.to_string(),
            Picked::Text(entry) => String::from_utf8_lossy(entry).into_owned(),
        }
    }

    fn ranges(list: &[&str]) -> IpRanges {
        IpRanges(
            list.iter()
                .map(|s| weir_config::rule::Cidr::parse(s).expect("network"))
                .collect(),
        )
    }

    /// pkg/ip strategy_test.go `TestRemoteAddrStrategy_GetIP` (the peer has no zone in
    /// weir, so the zone cases do not apply; a subnet over 128 is a config error).
    #[test]
    fn remote_addr_strategy() {
        let req = request(None);
        let cases: [(&str, Option<u8>, &str); 5] = [
            ("192.0.2.1", None, "192.0.2.1"),
            (IPV6_BASIC, None, IPV6_BASIC),
            ("192.0.2.1", Some(24), "192.0.2.1"),
            (IPV6_BASIC, Some(80), "::abcd:0:0:0"),
            // An IPv4 client of a dual-stack listener is IPv4: no subnet applies.
            ("::ffff:192.0.2.1", Some(80), "192.0.2.1"),
        ];
        for (peer, ipv6_subnet, expected) in cases {
            let strategy = IpStrategy::RemoteAddr { ipv6_subnet };
            let picked = pick(&strategy, &req, peer.parse().unwrap());
            assert_eq!(text(picked), expected, "{peer} {ipv6_subnet:?}");
        }
    }

    /// pkg/ip strategy_test.go `TestDepthStrategy_GetIP`, with spaces, missing entries and
    /// entries that are not addresses.
    #[test]
    fn depth_strategy() {
        let cases: [(u32, Option<&str>, Option<u8>, &str); 9] = [
            (
                3,
                Some("10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1"),
                None,
                "10.0.0.3",
            ),
            (2, Some(""), None, ""),
            (2, None, None, ""),
            (2, Some("10.0.0.2,10.0.0.1"), None, "10.0.0.2"),
            (2, Some("10.0.0.3,10.0.0.2,10.0.0.1"), Some(80), "10.0.0.2"),
            (
                2,
                Some("10.0.0.3,::abcd:ffff:c0a8:1,10.0.0.1"),
                Some(80),
                "::abcd:0:0:0",
            ),
            (3, Some("10.0.0.2,10.0.0.1"), None, ""),
            (
                2,
                Some(" 10.0.0.3 , \t10.0.0.2 ,10.0.0.1"),
                None,
                "10.0.0.2",
            ),
            (1, Some("10.0.0.2, foo"), Some(64), "foo"),
        ];
        for (depth, xff, ipv6_subnet, expected) in cases {
            let req = request(xff);
            let strategy = IpStrategy::Depth { depth, ipv6_subnet };
            let picked = pick(&strategy, &req, "127.0.0.1".parse().unwrap());
            assert_eq!(text(picked), expected, "{depth} {xff:?}");
        }
    }

    /// pkg/ip strategy_test.go `TestTrustedIPsStrategy_GetIP` (Traefik's PoolStrategy), and
    /// an entry that is not an address, which is never excluded.
    #[test]
    fn excluded_ips_strategy() {
        let all = ["10.0.0.4", "10.0.0.3", "10.0.0.2", "10.0.0.1"];
        let cases: [(&[&str], &str, &str); 6] = [
            (&all, "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", ""),
            (&all[2..], "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", "10.0.0.3"),
            (
                &["10.0.0.1/24"],
                "127.0.0.1,10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1",
                "127.0.0.1",
            ),
            (&["10.0.0.1/24"], "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", ""),
            (&["10.0.0.1/24"], "8.8.8.8, , 10.0.0.2 ,", "8.8.8.8"),
            (&["10.0.0.1/24"], "8.8.8.8,bogus,10.0.0.2", "bogus"),
        ];
        for (excluded, xff, expected) in cases {
            let req = request(Some(xff));
            let strategy = IpStrategy::Excluded(ranges(excluded));
            let picked = pick(&strategy, &req, "127.0.0.1".parse().unwrap());
            assert_eq!(text(picked), expected, "{excluded:?} {xff}");
        }
    }

    /// extractor.go: an IP strategy's pick, a header's first value, the host as sent.
    #[test]
    fn source_keys() {
        let text = "GET / HTTP/1.1\r\nHost: api.test:8080\r\nX-Tenant: a\r\nX-Tenant: b\r\n\
                    X-Forwarded-For: 10.0.0.2, 10.0.0.1\r\n\r\n";
        let req = parse_request(&mut BytesMut::from(text))
            .expect("valid")
            .expect("whole");
        let peer = "192.0.2.7".parse().unwrap();
        let key = |criterion: SourceCriterion| self::text(source_key(&criterion, &req, peer));
        let remote = IpStrategy::RemoteAddr { ipv6_subnet: None };
        assert_eq!(key(SourceCriterion::Ip(remote)), "192.0.2.7");
        let depth = IpStrategy::Depth {
            depth: 2,
            ipv6_subnet: None,
        };
        assert_eq!(key(SourceCriterion::Ip(depth)), "10.0.0.2");
        assert_eq!(key(SourceCriterion::RequestHeader("x-tenant".into())), "a");
        assert_eq!(key(SourceCriterion::RequestHeader("x-user".into())), "");
        assert_eq!(key(SourceCriterion::RequestHost), "api.test:8080");
    }

    /// pkg/ip checker_test.go `TestIsAuthorized` and `TestContainsBrokenIPs`: what the checker
    /// reads as an address (a port is dropped, an octal-looking IPv4 is not an address).
    #[test]
    fn what_the_checker_reads_as_an_address() {
        let cases: [(&str, Option<&str>); 14] = [
            ("10.2.3.1:123", Some("10.2.3.1")),
            ("1.2.3.1:123", Some("1.2.3.1")),
            ("0127.2.3.1:123", None),
            ("[::1]:80", Some("::1")),
            ("[fe80::1%eth0]:80", Some("fe80::1")),
            ("fe80::1%eth0", Some("fe80::1")),
            ("::1", Some("::1")),
            ("1.2.3.4:", Some("1.2.3.4")),
            ("[::1]", None),
            ("foo", None),
            ("10.0.0.350", None),
            ("fe:::80", None),
            ("", None),
            ("\\&$§&/(", None),
        ];
        for (entry, expected) in cases {
            let addr = Picked::Text(entry.as_bytes()).addr();
            assert_eq!(addr.map(|a| a.to_string()).as_deref(), expected, "{entry}");
        }
        assert_eq!(split_host_port("[::1]x:80"), None);
        assert_eq!(split_host_port("a]:80"), None);
        assert_eq!(parse_addr("1.2.3.4%eth0"), None);
        assert_eq!(parse_addr("fe80::1%"), None);
    }

    /// pkg/ip checker_test.go `TestContainsIsAllowed`.
    #[test]
    fn ranges_contain_as_traefik_s_checker() {
        let cases: [(&[&str], &[&str], &[&str]); 4] = [
            (
                &["1.2.3.4/24", "8.8.8.8/8"],
                &[
                    "1.2.3.1",
                    "1.2.3.255",
                    "8.8.4.4",
                    "8.0.0.1",
                    "8.255.255.255",
                ],
                &["1.2.16.1", "1.2.32.1", "127.0.0.1", "4.4.4.4", "4.8.8.8"],
            ),
            (
                &["8.8.8.8"],
                &["8.8.8.8"],
                &["8.8.8.7", "8.8.8.9", "8.8.8.0", "8.8.8.255", "4.4.4.4"],
            ),
            (
                &["2a03:4000:6:d080::42/128"],
                &["2a03:4000:6:d080::42"],
                &["2a03:4000:6:d080::1", "2a03:4000:6:d080::43"],
            ),
            (
                &["2a03:4000:6:d080::/64", "fe80::/16", "1.2.3.4/24"],
                &[
                    "2a03:4000:6:d080:dead:beef:ffff:ffff",
                    "fe80:aa00:00bb:4232:ff00:eeee:00ff:1111",
                    "fe80:aa00:00bb:4232:ff00:eeee:00ff:1111%vEthernet",
                    "fe80::fe80",
                    "1.2.3.156",
                ],
                &[
                    "2a03:4000:7:d080::",
                    "2a03:4000:7:d080::1%vmnet1",
                    "4242::1",
                    "1.2.16.1",
                ],
            ),
        ];
        for (trusted, pass, reject) in cases {
            let ranges = ranges(trusted);
            let contains = |ip: &str| parse_addr(ip).is_some_and(|ip| ranges.contains(ip));
            for ip in pass {
                assert!(contains(ip), "{ip} should pass {trusted:?}");
            }
            for ip in reject {
                assert!(!contains(ip), "{ip} should not pass {trusted:?}");
            }
        }
    }
}
