//! Plain HTTP/1.1 requests from the control thread to one node, a connection each: discovery
//! (`_nodes/http`), the shard map, and the spool's replay (`_bulk`). Not the workers' path:
//! these are rare, and their answers are read whole.

use crate::codec::{ChunkEvent, ChunkedDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::UpstreamServer;

/// An answer larger than this is refused.
const MAX_ANSWER: usize = 256 << 20;

/// `GET path` on `server`: the body of its 200 answer.
pub async fn get(
    server: &UpstreamServer,
    authorization: Option<&str>,
    path: &str,
) -> Result<Vec<u8>, String> {
    match request(server, authorization, "GET", path, None).await? {
        (200, body) => Ok(body),
        (status, _) => Err(format!("status {status}")),
    }
}

/// `method target` on `server`, with a body and its content type, and the service's
/// `Authorization` if it has one: the answer's status and body.
pub async fn request(
    server: &UpstreamServer,
    authorization: Option<&str>,
    method: &str,
    target: &str,
    body: Option<(&str, &[u8])>,
) -> Result<(u16, Vec<u8>), String> {
    let mut conn = TcpStream::connect((server.host.as_str(), server.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
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
    conn.write_all(&request)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    (&mut conn)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
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
