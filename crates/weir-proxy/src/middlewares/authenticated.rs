//! What the authentication middlewares (`basic_auth`, `digest_auth`) share: their refusal,
//! and what they do to a request whose user they let through.

use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};

/// A 401 with `challenge` as its `WWW-Authenticate`, and go-http-auth's body.
pub(super) fn refusal(challenge: String) -> LocalError {
    let mut refusal = LocalError::new(401, ErrorKind::Unauthorized, "401 Unauthorized");
    refusal.headers.push(("www-authenticate".into(), challenge));
    refusal
}

/// How an authenticated request goes upstream: its user named in `header_field`, its
/// `Authorization` removed when `remove_header`.
#[derive(Debug)]
pub(super) struct PassUser {
    header_field: Option<String>,
    remove_header: bool,
}

impl PassUser {
    pub(super) fn new(header_field: &Option<String>, remove_header: bool) -> PassUser {
        PassUser {
            header_field: header_field.clone(),
            remove_header,
        }
    }

    /// `header_field` replaces whatever the client sent under that name, in any case of it.
    pub(super) fn apply(&self, req: &mut RequestHead, user: &str) {
        if let Some(field) = &self.header_field {
            req.head.set(field, user.as_bytes());
        }
        if self.remove_header {
            req.head.remove("authorization");
        }
    }
}
