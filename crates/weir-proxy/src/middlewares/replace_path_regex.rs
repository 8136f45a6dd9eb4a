//! `replace_path_regex`: rewrites a path the expression matches, and records the original in
//! `X-Replaced-Path`.

use crate::http::codec::RequestHead;

pub(super) fn on_request(regex: &regex::Regex, replacement: &str, req: &mut RequestHead) {
    let path = req.path().to_string();
    if regex.is_match(&path) {
        let new_path = regex.replace(&path, replacement).into_owned();
        req.set_path(&new_path);
        req.head.set("x-replaced-path", path.as_bytes());
    }
}
