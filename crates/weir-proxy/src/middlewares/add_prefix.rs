//! `add_prefix`: puts a prefix before the path.

use crate::http::codec::RequestHead;

pub(super) fn on_request(prefix: &str, req: &mut RequestHead) {
    let new_path = format!("{}{}", prefix.trim_end_matches('/'), req.path());
    req.set_path(&new_path);
}
