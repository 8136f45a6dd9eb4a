//! `strip_prefix`: removes the first listed prefix the path starts with, and records it in
//! `X-Forwarded-Prefix` (a `static` folder redirect behind it keeps the prefix).

use crate::http::codec::RequestHead;

pub(super) fn on_request(prefixes: &[String], req: &mut RequestHead) {
    let path = req.path();
    let Some(prefix) = prefixes.iter().find(|p| path.starts_with(p.as_str())) else {
        return;
    };
    let rest = &path[prefix.len()..];
    let new_path = if rest.starts_with('/') {
        rest.to_string()
    } else {
        format!("/{rest}")
    };
    let prefix = prefix.trim_end_matches('/').to_string();
    req.set_path(&new_path);
    req.head.set("x-forwarded-prefix", prefix.as_bytes());
}
