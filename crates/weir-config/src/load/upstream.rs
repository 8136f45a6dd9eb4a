//! What HTTP, TCP and UDP services read the same way: the `servers` list, one server's
//! `{ url | address, weight }`, and `load_balancer`.

use super::{Fields, Loader};
use crate::model::*;
use crate::yaml::{Node, Pos, Value};

impl Loader<'_> {
    /// The service's `servers` list, each entry read by `server`; `example` is an entry's
    /// contents, for the error when the list is missing.
    pub(super) fn servers<S>(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        example: &str,
        mut server: impl FnMut(&mut Self, &Node) -> Option<S>,
    ) -> Vec<S> {
        let Some(list) = f.get("servers") else {
            self.error(
                f.pos,
                format!("{what} needs `servers`, e.g. `servers: [{{ {example} }}]`"),
            );
            return Vec::new();
        };
        let Value::Seq(items) = &list.value else {
            self.error(
                list.pos,
                format!("`servers` must be a list, found {}", list.kind_name()),
            );
            return Vec::new();
        };
        items.iter().filter_map(|item| server(self, item)).collect()
    }

    /// One entry of `servers`, `{ KEY: TEXT, weight: N }`: the text, where it is, and the
    /// weight (1 when not given). `needs` is said when KEY is missing.
    pub(super) fn server_entry(
        &mut self,
        node: &Node,
        key: &str,
        needs: &str,
    ) -> Option<(String, Pos, u32)> {
        let f = self.fields(node, "a server", &[key, "weight"])?;
        let Some(text_node) = f.get(key) else {
            self.error(f.pos, needs);
            return None;
        };
        let text = self.string(text_node, &format!("`{key}`"))?;
        let weight = match f.get("weight") {
            Some(w) => self.uint(w, "`weight`", 1, 10_000)? as u32,
            None => 1,
        };
        Some((text, text_node.pos, weight))
    }

    /// `load_balancer:` (round_robin when not given); `None` after an error. consistent_hash
    /// hashes on the client's address for TCP and UDP, on `hash_key` for HTTP.
    pub(super) fn load_balancer(&mut self, f: &Fields<'_>) -> Option<Balancer> {
        let Some(lb) = f.get("load_balancer") else {
            return Some(Balancer::RoundRobin);
        };
        let s = self.string(lb, "`load_balancer`")?;
        match s.as_str() {
            "round_robin" => Some(Balancer::RoundRobin),
            "least_conn" => Some(Balancer::LeastConn),
            "random" => Some(Balancer::Random),
            "p2c" => Some(Balancer::P2c),
            "consistent_hash" => Some(Balancer::ConsistentHash),
            _ => {
                self.error(
                    lb.pos,
                    format!(
                        "unknown load balancer `{s}`{}; expected one of: {}",
                        super::suggest::did_you_mean(&s, Balancer::NAMES.split(", ")),
                        Balancer::NAMES
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::load::tests::errors;

    /// HTTP, TCP and UDP services read `servers`, a server's entry and `load_balancer` with the
    /// same functions, each with its own words; a TCP or UDP service stops at its first error
    /// (`idle` in `f` is not reached), an HTTP service goes on.
    #[test]
    fn servers_and_balancers_of_every_kind_of_service() {
        let yaml = concat!(
            "entrypoints:\n",
            "  web: { address: \"127.0.0.1:0\" }\n",
            "services:\n",
            "  a: {}\n",
            "  b: { servers: x, load_balancer: fast, timeouts: { connect: soon, read: later } }\n",
            "  c: { servers: [{ weight: 2 }, { url: \"http://x\", weight: 0 }, 3], keepalive: { idle_timeout: x } }\n",
            "tcp:\n",
            "  services:\n",
            "    d: {}\n",
            "    e: { servers: x, load_balancer: fast }\n",
            "    f: { servers: [{ weight: 2 }, { address: \"x:1\", weight: 0 }], timeouts: { connect: soon, idle: later } }\n",
            "    g: { servers: [{ address: \"x\" }], timeouts: { idle: later } }\n",
            "udp:\n",
            "  services:\n",
            "    h: {}\n",
            "    i: { servers: [{ address: \"x:1\", url: y }], load_balancer: [1] }\n",
        );
        let expected = [
            "t.yaml:4:6: service `a` needs `servers`, e.g. `servers: [{ url: \"http://127.0.0.1:9000\" }]`",
            "t.yaml:5:17: `servers` must be a list, found a scalar",
            "t.yaml:5:35: unknown load balancer `fast`; expected one of: round_robin, least_conn, random, p2c, consistent_hash",
            "t.yaml:5:62: `connect` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `soon`",
            "t.yaml:5:74: `read` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `later`",
            "t.yaml:6:18: a server needs a `url`, e.g. \"http://127.0.0.1:9000\"",
            "t.yaml:6:60: `weight` must be a whole number from 1 to 10000, found `0`",
            "t.yaml:6:65: a server must be a mapping, found a scalar",
            "t.yaml:6:96: `idle_timeout` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `x`",
            "t.yaml:9:8: tcp service `d` needs `servers`, e.g. `servers: [{ address: \"127.0.0.1:6379\" }]`",
            "t.yaml:10:19: `servers` must be a list, found a scalar",
            "t.yaml:10:37: unknown load balancer `fast`; expected one of: round_robin, least_conn, random, p2c, consistent_hash",
            "t.yaml:11:20: a tcp server needs an `address`, e.g. \"127.0.0.1:6379\"",
            "t.yaml:11:61: `weight` must be a whole number from 1 to 10000, found `0`",
            "t.yaml:11:88: `connect` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `soon`",
            "t.yaml:12:31: `x` is not a server address; expected HOST:PORT",
            "t.yaml:12:57: `idle` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `later`",
            "t.yaml:15:8: udp service `h` needs `servers`, e.g. `servers: [{ address: \"127.0.0.1:53\" }]`",
            "t.yaml:16:38: unknown key `url` in a server; expected one of: address, weight",
            "t.yaml:16:64: `load_balancer` must be a string, found a list",
        ];
        assert_eq!(errors(yaml), expected);
    }
}
