//! `replace_path`: replaces the whole path and records the one the client sent, escapes as
//! sent, in `X-Replaced-Path` (Traefik's `replacepath`).

use crate::http::codec::RequestHead;

pub(super) fn on_request(path: &str, req: &mut RequestHead) {
    let replaced = req.path().to_string();
    req.set_path(path);
    req.head.set("x-replaced-path", replaced.as_bytes());
}
