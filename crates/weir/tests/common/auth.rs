//! What the authentication middlewares' tests share: their users-file cases, and `weir check`
//! on bad settings.

use super::*;

/// `weir check` on `config` written to `path`: whether it passed, and what it said.
pub fn check_config(path: &std::path::Path, config: &str) -> (bool, String) {
    std::fs::write(path, config).unwrap();
    let out = weir_check(path);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), text)
}

/// For each case, a config (from `config_of`, written to `path`) that `weir check` refuses,
/// naming `path:PLACE` for each of the case's places (`LINE:COLUMN: message`).
pub fn assert_check_refuses_at(
    path: &std::path::Path,
    config_of: impl Fn(&str) -> String,
    cases: &[(&str, Vec<String>)],
) {
    for (body, places) in cases {
        let (ok, text) = check_config(path, &config_of(body));
        assert!(!ok, "{body}");
        for place in places {
            let line = format!("{}:{place}", path.display());
            assert!(text.contains(&line), "{body}: no `{line}` in {text}");
        }
    }
}

/// One of Traefik's `Test*AuthUsersFromFile` cases: its name, the users file, `users`, the
/// names and passwords let through, the realm (empty: the default).
pub type UsersFileCase<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);

/// A middleware's settings for a users-file case: `file` written to a file of its own,
/// `users: given`, and `realm` unless empty.
pub fn users_file_settings(file: &str, given: &str, realm: &str) -> String {
    let users = temp_dir("auth-file").join("auth-users");
    std::fs::write(&users, file).unwrap();
    let realm_key = if realm.is_empty() {
        String::new()
    } else {
        format!(", realm: \"{realm}\"")
    };
    format!(
        "{{ users_file: \"{}\", users: {given}{realm_key} }}",
        users.display()
    )
}
