//! HTTP/1.1 requests from the control thread to one node, a connection each, over TLS for an
//! `https://` node (the service's `tls` settings): discovery (`_nodes/http`), the shard map,
//! and the spool's replay (`_mget`, `_bulk`). Not the workers' path: these are rare, and their
//! answers are read whole.

use crate::http::codec::{ChunkEvent, ChunkedDecoder};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::{UpstreamProtocol, UpstreamServer, UpstreamTls};

/// How the control thread reaches a service's nodes: with the service's credentials, and for
/// `https://` nodes, its TLS settings (the client config built once per compile).
#[derive(Clone, Default)]
pub struct NodeAccess {
    authorization: Option<String>,
    tls: Option<(Arc<rustls::ClientConfig>, UpstreamTls)>,
}

impl std::fmt::Debug for NodeAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAccess")
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl NodeAccess {
    /// The access of Elasticsearch service `cfg`; TLS when any of its servers is https://,
    /// with `workers_tls` (the config its workers use) when that one speaks HTTP/1.1 too.
    pub fn new(
        cfg: &weir_config::Service,
        workers_tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<NodeAccess, String> {
        let tls = match workers_tls {
            Some(config) if cfg.protocol == UpstreamProtocol::Http1 => {
                Some((config.clone(), cfg.tls.clone()))
            }
            _ if cfg.servers.iter().any(|s| s.tls) => {
                let config = crate::listen::tls::client_config(&cfg.tls, UpstreamProtocol::Http1)?;
                Some((config, cfg.tls.clone()))
            }
            _ => None,
        };
        Ok(NodeAccess {
            authorization: cfg
                .elasticsearch
                .as_ref()
                .and_then(|es| es.authorization.clone()),
            tls,
        })
    }
}

/// An answer larger than this is refused.
const MAX_ANSWER: usize = 256 << 20;

/// `GET path` on `server`: the body of its 200 answer.
pub async fn get(
    server: &UpstreamServer,
    access: &NodeAccess,
    path: &str,
) -> Result<Vec<u8>, String> {
    match request(server, access, "GET", path, None).await? {
        (200, body) => Ok(body),
        (status, _) => Err(format!("status {status}")),
    }
}

/// `method target` on `server`, with a body and its content type, and the service's
/// `Authorization` if it has one: the answer's status and body.
pub async fn request(
    server: &UpstreamServer,
    access: &NodeAccess,
    method: &str,
    target: &str,
    body: Option<(&str, &[u8])>,
) -> Result<(u16, Vec<u8>), String> {
    let conn = TcpStream::connect((server.host.as_str(), server.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = request_bytes(
        server,
        access.authorization.as_deref(),
        method,
        target,
        body,
    );
    let answer = if server.tls {
        let Some((config, settings)) = &access.tls else {
            return Err("an https:// node, but no TLS settings".into());
        };
        let name = crate::listen::tls::server_name(settings, &server.host)?;
        let connector = tokio_rustls::TlsConnector::from(config.clone());
        let tls = connector
            .connect(name, conn)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        exchange(tls, &request).await?
    } else {
        exchange(conn, &request).await?
    };
    parse_answer(&answer)
}

/// `method target` on each server in turn, each within `limit`, until one gives an answer
/// whose status `taken` accepts: that answer, or the last failure.
pub async fn first_answer(
    servers: &[UpstreamServer],
    access: &NodeAccess,
    (method, target): (&str, &str),
    body: Option<(&str, &[u8])>,
    limit: std::time::Duration,
    taken: impl Fn(u16) -> bool,
) -> Result<(u16, Vec<u8>), String> {
    let mut last = String::from("no server to ask");
    for server in servers {
        let asked = request(server, access, method, target, body);
        match tokio::time::timeout(limit, asked).await {
            Ok(Ok((status, answer))) if taken(status) => return Ok((status, answer)),
            Ok(Ok((status, _))) => last = format!("{}: status {status}", server.url),
            Ok(Err(e)) => last = format!("{}: {e}", server.url),
            Err(_) => last = format!("{}: no answer within {limit:?}", server.url),
        }
    }
    Err(last)
}

/// The request's bytes (`Connection: close`: the answer ends with the connection).
fn request_bytes(
    server: &UpstreamServer,
    authorization: Option<&str>,
    method: &str,
    target: &str,
    body: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n",
        server.authority
    )
    .into_bytes();
    if let Some(authorization) = authorization {
        request.extend_from_slice(format!("Authorization: {authorization}\r\n").as_bytes());
    }
    if let Some((content_type, body)) = body {
        let fields = format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        );
        request.extend_from_slice(fields.as_bytes());
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(body);
    } else {
        request.extend_from_slice(b"\r\n");
    }
    request
}

/// Writes the request and reads the answer until the node closes the connection.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    request: &[u8],
) -> Result<Vec<u8>, String> {
    conn.write_all(request)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let read = (&mut conn)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut answer)
        .await;
    match read {
        Ok(_) => Ok(answer),
        // A TLS peer that closes without close_notify: the answer's own framing is checked.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => Ok(answer),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// The status and body of a whole answer.
fn parse_answer(answer: &[u8]) -> Result<(u16, Vec<u8>), String> {
    if answer.len() > MAX_ANSWER {
        return Err("the answer is too large".into());
    }
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err("no complete answer".into());
    };
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let body = &answer[split + 4..];
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status in the answer")?;
    if head.contains("\r\ntransfer-encoding: chunked") {
        return Ok((status, dechunk(body)?));
    }
    let declared = head
        .split("\r\n")
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| body.len() < n) {
        return Err("the answer ended early".into());
    }
    Ok((status, body.to_vec()))
}

fn dechunk(mut input: &[u8]) -> Result<Vec<u8>, String> {
    let mut decoder = ChunkedDecoder::default();
    let mut body = Vec::new();
    loop {
        match decoder.decode(input) {
            Ok((ChunkEvent::Data(start, end), used)) => {
                body.extend_from_slice(&input[start..end]);
                input = &input[used..];
            }
            Ok((ChunkEvent::End(..), _)) => return Ok(body),
            Ok((ChunkEvent::NeedMore, _)) => return Err("the answer ended early".into()),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_answers_are_joined() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"3\r\nabc\r\n").is_err());
    }
}
