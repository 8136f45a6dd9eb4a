//! An etcd v3 client over etcd's JSON gateway (HTTP/1.1, or HTTPS: `/v3/kv/range`,
//! `/v3/watch`, `/v3/auth/authenticate`), blocking, for the provider's own thread: read a key with the
//! store's revision, then follow its changes from the next revision; and for the ACME
//! thread's storage, keys read, written (on a lease), created only if absent and deleted.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_config::{EtcdProvider, UpstreamProtocol, UpstreamTls};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// For a read of the key (not for a watch, which may be quiet for as long as nothing changes).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A watch event or an answer larger than this is refused (a config document is far smaller).
const MAX_MESSAGE: usize = 16 << 20;

/// The key as read: its value (none when the key is absent) and the store's revision then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRead {
    pub revision: i64,
    pub value: Option<String>,
}

/// A change to the watched key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put { revision: i64, value: String },
    Deleted { revision: i64 },
}

pub struct Etcd {
    config: EtcdProvider,
    /// For `https://` endpoints.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The key operations' last token and the endpoint that gave it, reused: the ACME
    /// thread asks every second, and each authentication costs etcd a password hash.
    key_token: Mutex<Option<(String, String)>>,
}

impl Etcd {
    /// Errors (an unreadable CA file) read `LINE:COLUMN: message`.
    pub fn new(config: EtcdProvider) -> Result<Etcd, String> {
        let https = config.endpoints.iter().any(|e| e.starts_with("https://"));
        let tls = match (&config.tls, https) {
            (Some(settings), _) => Some(settings.clone()),
            (None, true) => Some(UpstreamTls::default()),
            (None, false) => None,
        };
        let tls = match tls {
            Some(settings) => {
                let http = crate::listen::tls::client_config(&settings, UpstreamProtocol::Http1)?;
                Some(http)
            }
            None => None,
        };
        Ok(Etcd {
            config,
            tls,
            key_token: Mutex::new(None),
        })
    }

    /// The key's value and revision from the first endpoint that answers.
    pub fn read(&self) -> Result<KeyRead, String> {
        let body = serde_json::json!({ "key": BASE64.encode(&self.config.key) }).to_string();
        let answer = self.ask("/v3/kv/range", &body)?;
        let revision = number(&answer["header"]["revision"]);
        let value = match answer["kvs"].get(0) {
            Some(kv) => Some(text_of(&kv["value"])?),
            None => None,
        };
        Ok(KeyRead { revision, value })
    }

    /// Follows the key's changes from `revision` on, calling `each` for every one, until the
    /// stream ends (an error, or etcd compacted past `revision`: read again then).
    pub fn watch(&self, revision: i64, mut each: impl FnMut(Change)) -> Result<(), String> {
        let body = serde_json::json!({
            "create_request": {
                "key": BASE64.encode(&self.config.key),
                "start_revision": revision.to_string(),
            }
        })
        .to_string();
        let (mut stream, endpoint) = self.connect_any()?;
        let token = self.token(&endpoint)?;
        send(&mut stream, &endpoint, "/v3/watch", &body, token.as_deref())?;
        let _ = stream.tcp().set_read_timeout(None);
        let mut reader = ChunkedReader::new(stream)?;
        loop {
            let message = reader.next_message()?;
            let result = &message["result"];
            if let Some(e) = message.get("error") {
                return Err(format!("watch: {e}"));
            }
            if result["canceled"].as_bool() == Some(true)
                || result.get("compact_revision").is_some()
            {
                return Err("watch canceled by etcd (compacted?)".into());
            }
            for event in result["events"].as_array().into_iter().flatten() {
                let kv = &event["kv"];
                let revision = number(&kv["mod_revision"]);
                match event["type"].as_str() {
                    Some("DELETE") => each(Change::Deleted { revision }),
                    _ => each(Change::Put {
                        revision,
                        value: text_of(&kv["value"])?,
                    }),
                }
            }
        }
    }

    /// One request answered whole, from the first endpoint that answers.
    fn ask(&self, path: &str, body: &str) -> Result<Json, String> {
        let (mut stream, endpoint) = self.connect_any()?;
        let token = self.token(&endpoint)?;
        send(&mut stream, &endpoint, path, body, token.as_deref())?;
        ChunkedReader::new(stream)?.whole()
    }

    /// A token for the configured user, when there is one.
    fn token(&self, endpoint: &str) -> Result<Option<String>, String> {
        if self.config.username.is_empty() {
            return Ok(None);
        }
        let body = serde_json::json!({
            "name": self.config.username,
            "password": self.config.password,
        })
        .to_string();
        let mut stream = self.connect(endpoint)?;
        send(&mut stream, endpoint, "/v3/auth/authenticate", &body, None)?;
        let answer = ChunkedReader::new(stream)?.whole()?;
        match answer["token"].as_str() {
            Some(token) => Ok(Some(token.to_string())),
            None => Err(format!("{endpoint}: authentication refused: {answer}")),
        }
    }

    /// A connection to the first endpoint that answers, and that endpoint as `host:port`.
    fn connect_any(&self) -> Result<(EtcdStream, String), String> {
        let mut why = String::from("no endpoint");
        for endpoint in &self.config.endpoints {
            let bare = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"))
                .unwrap_or(endpoint)
                .trim_end_matches('/');
            match self.connect(bare) {
                Ok(stream) => return Ok((stream, bare.to_string())),
                Err(e) => why = e,
            }
        }
        Err(why)
    }

    /// A connection to `endpoint` (`host:port`), through TLS when the provider has it.
    fn connect(&self, endpoint: &str) -> Result<EtcdStream, String> {
        let fail = |e: std::io::Error| format!("{endpoint}: {e}");
        let addr = endpoint
            .to_socket_addrs()
            .map_err(fail)?
            .next()
            .ok_or_else(|| format!("{endpoint}: no address"))?;
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(fail)?;
        stream.set_read_timeout(Some(READ_TIMEOUT)).map_err(fail)?;
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Ok(EtcdStream::Plain(stream));
        };
        let default = UpstreamTls::default();
        let settings = self.config.tls.as_ref().unwrap_or(&default);
        let name = crate::listen::tls::endpoint_server_name(settings, endpoint)?;
        let session = rustls::ClientConnection::new(tls.clone(), name)
            .map_err(|e| format!("{endpoint}: TLS: {e}"))?;
        Ok(EtcdStream::Tls(Box::new(rustls::StreamOwned::new(
            session, stream,
        ))))
    }
}

/// Keys at large, for the ACME storage (`/v3/kv/*`, `/v3/lease/*`); a `lease` of 0 is none.
impl Etcd {
    /// `ask` with the cached token, made again once when etcd no longer knows it (a
    /// restarted member forgets its simple tokens).
    fn ask_keys(&self, path: &str, body: &str) -> Result<Json, String> {
        if self.config.username.is_empty() {
            return self.ask(path, body);
        }
        let mut retried = false;
        loop {
            let (mut stream, endpoint) = self.connect_any()?;
            let cached = match self.key_token.lock() {
                Ok(cached) => cached.clone().filter(|(at, _)| *at == endpoint),
                Err(_) => None,
            };
            let token = match cached {
                Some((_, token)) => token,
                None => {
                    let token = self.token(&endpoint)?.unwrap_or_default();
                    if let Ok(mut cached) = self.key_token.lock() {
                        *cached = Some((endpoint.clone(), token.clone()));
                    }
                    token
                }
            };
            send(&mut stream, &endpoint, path, body, Some(&token))?;
            match ChunkedReader::new(stream).and_then(ChunkedReader::whole) {
                Err(e) if !retried && e.contains("invalid auth token") => {
                    retried = true;
                    if let Ok(mut cached) = self.key_token.lock() {
                        *cached = None;
                    }
                }
                answer => return answer,
            }
        }
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let body = serde_json::json!({ "key": BASE64.encode(key) }).to_string();
        let answer = self.ask_keys("/v3/kv/range", &body)?;
        answer["kvs"]
            .get(0)
            .map(|kv| bytes_of(&kv["value"]))
            .transpose()
    }

    /// Every key starting with `prefix`, and its value.
    pub fn get_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        let body = serde_json::json!({
            "key": BASE64.encode(prefix),
            "range_end": BASE64.encode(prefix_end(prefix.as_bytes())),
        })
        .to_string();
        let answer = self.ask_keys("/v3/kv/range", &body)?;
        let mut found = Vec::new();
        for kv in answer["kvs"].as_array().into_iter().flatten() {
            let key = String::from_utf8_lossy(&bytes_of(&kv["key"])?).into_owned();
            found.push((key, bytes_of(&kv["value"])?));
        }
        Ok(found)
    }

    pub fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<(), String> {
        let body = serde_json::json!({
            "key": BASE64.encode(key),
            "value": BASE64.encode(value),
            "lease": lease.to_string(),
        })
        .to_string();
        self.ask_keys("/v3/kv/put", &body).map(|_| ())
    }

    /// Puts `key` in a transaction only if it does not exist (its create revision is 0);
    /// whether this call created it.
    pub fn create_if_absent(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, String> {
        let body = serde_json::json!({
            "compare": [{
                "key": BASE64.encode(key),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": "0",
            }],
            "success": [{ "request_put": {
                "key": BASE64.encode(key),
                "value": BASE64.encode(value),
                "lease": lease.to_string(),
            }}],
        })
        .to_string();
        let answer = self.ask_keys("/v3/kv/txn", &body)?;
        Ok(answer["succeeded"].as_bool() == Some(true))
    }

    pub fn delete(&self, key: &str) -> Result<(), String> {
        let body = serde_json::json!({ "key": BASE64.encode(key) }).to_string();
        self.ask_keys("/v3/kv/deleterange", &body).map(|_| ())
    }

    /// A lease of `ttl`; the keys put on it are deleted when it expires or is revoked.
    pub fn grant_lease(&self, ttl: Duration) -> Result<i64, String> {
        let body = serde_json::json!({ "TTL": ttl.as_secs().to_string() }).to_string();
        let answer = self.ask_keys("/v3/lease/grant", &body)?;
        match number(&answer["ID"]) {
            0 => Err(format!("no lease granted: {answer}")),
            id => Ok(id),
        }
    }

    pub fn revoke_lease(&self, lease: i64) -> Result<(), String> {
        let body = serde_json::json!({ "ID": lease.to_string() }).to_string();
        match self.ask_keys("/v3/lease/revoke", &body) {
            // Expired already: its keys are gone all the same.
            Err(e) if e.contains("requested lease not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// The end of the range of keys starting with `prefix` (etcd's `--prefix`): the prefix with
/// its last byte below 0xff raised by one.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every key.
    vec![0]
}

/// A base64 `bytes` field (absent: empty).
fn bytes_of(value: &Json) -> Result<Vec<u8>, String> {
    BASE64
        .decode(value.as_str().unwrap_or_default())
        .map_err(|e| format!("a value not in base64: {e}"))
}

/// A connection to etcd: plain, or TLS (the handshake made by the first read or write).
enum EtcdStream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl EtcdStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            EtcdStream::Plain(stream) => stream,
            EtcdStream::Tls(stream) => stream.get_ref(),
        }
    }
}

impl Read for EtcdStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            EtcdStream::Plain(stream) => stream.read(buf),
            EtcdStream::Tls(stream) => stream.read(buf),
        }
    }
}

impl Write for EtcdStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            EtcdStream::Plain(stream) => stream.write(buf),
            EtcdStream::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            EtcdStream::Plain(stream) => stream.flush(),
            EtcdStream::Tls(stream) => stream.flush(),
        }
    }
}

fn send(
    stream: &mut EtcdStream,
    endpoint: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> Result<(), String> {
    let auth = token
        .map(|t| format!("authorization: {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {endpoint}\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{endpoint}: {e}"))
}

/// int64 fields come as JSON strings from the gateway (and are left out when 0).
fn number(value: &Json) -> i64 {
    match value {
        Json::String(text) => text.parse().unwrap_or(0),
        Json::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// A base64 `bytes` field as UTF-8 text (absent: empty).
fn text_of(value: &Json) -> Result<String, String> {
    String::from_utf8(bytes_of(value)?).map_err(|_| "the document is not UTF-8".to_string())
}

/// An HTTP/1.1 response read as it comes: its head checked, then its body, chunked or not,
/// as JSON messages, one per line (as the gateway streams them).
struct ChunkedReader {
    stream: EtcdStream,
    /// Read from the socket, not yet decoded.
    raw: Vec<u8>,
    /// The body decoded so far, not yet handed out.
    body: Vec<u8>,
    chunked: bool,
    /// In a chunked body: data bytes left of the current chunk, then its CRLF's.
    chunk_left: usize,
    crlf_left: usize,
    ended: bool,
}

impl ChunkedReader {
    fn new(mut stream: EtcdStream) -> Result<ChunkedReader, String> {
        let mut raw = Vec::with_capacity(4096);
        let head_end = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            if raw.len() > 64 * 1024 || fill(&mut stream, &mut raw)? == 0 {
                return Err("no response head".into());
            }
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).unwrap_or_default().to_string();
        let chunked = head.contains("transfer-encoding: chunked");
        let rest = raw.split_off(head_end + 4);
        let mut reader = ChunkedReader {
            stream,
            raw: rest,
            body: Vec::new(),
            chunked,
            chunk_left: 0,
            crlf_left: 0,
            ended: false,
        };
        if status != "200" {
            let body = reader.whole_text().unwrap_or_default();
            return Err(format!("etcd answered {status}: {}", body.trim()));
        }
        Ok(reader)
    }

    /// The whole body as one JSON value.
    fn whole(mut self) -> Result<Json, String> {
        let text = self.whole_text()?;
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))
    }

    fn whole_text(&mut self) -> Result<String, String> {
        while !self.ended {
            self.decode_more()?;
        }
        Ok(String::from_utf8_lossy(&self.body).into_owned())
    }

    /// The next line of the body as JSON.
    fn next_message(&mut self) -> Result<Json, String> {
        loop {
            if let Some(at) = self.body.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.body.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).map_err(|e| format!("not JSON: {e}"));
            }
            if self.ended {
                return Err("the watch stream ended".into());
            }
            if self.body.len() > MAX_MESSAGE {
                return Err("a watch message over 16 MiB".into());
            }
            self.decode_more()?;
        }
    }

    /// Moves more of the body into `body`, reading from the socket when needed.
    fn decode_more(&mut self) -> Result<(), String> {
        if !self.chunked {
            if !self.raw.is_empty() {
                self.body.append(&mut self.raw);
                return Ok(());
            }
            if fill(&mut self.stream, &mut self.raw)? == 0 {
                self.ended = true;
            }
            return Ok(());
        }
        loop {
            if self.chunk_left > 0 {
                if self.raw.is_empty() {
                    break;
                }
                let take = self.chunk_left.min(self.raw.len());
                self.body.extend(self.raw.drain(..take));
                self.chunk_left -= take;
                self.crlf_left = usize::from(self.chunk_left == 0) * 2;
                return Ok(());
            }
            if self.crlf_left > 0 {
                let take = self.crlf_left.min(self.raw.len());
                self.raw.drain(..take);
                self.crlf_left -= take;
                if self.crlf_left > 0 {
                    break;
                }
            }
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let size_text = String::from_utf8_lossy(&self.raw[..line_end]).to_string();
            let size_hex = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| format!("a bad chunk size {size_text:?}"))?;
            self.raw.drain(..line_end + 2);
            if size == 0 {
                self.ended = true;
                return Ok(());
            }
            if size > MAX_MESSAGE {
                return Err("a chunk over 16 MiB".into());
            }
            self.chunk_left = size;
        }
        if fill(&mut self.stream, &mut self.raw)? == 0 {
            self.ended = true;
        }
        Ok(())
    }
}

fn fill(stream: &mut EtcdStream, buf: &mut Vec<u8>) -> Result<usize, String> {
    let mut chunk = [0u8; 16384];
    let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_range_ends_past_every_key_starting_with_it() {
        assert_eq!(prefix_end(b"/weir/acme/answers/"), b"/weir/acme/answers0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        // Nothing but 0xff: every key, as etcd's `--prefix` of it.
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
