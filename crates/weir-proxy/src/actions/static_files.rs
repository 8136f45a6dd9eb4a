//! The `static` action: maps the request path (after the request filters) to a file under
//! `root` and answers with it: MIME type, validators (`ETag`, `Last-Modified`) and conditional
//! requests, byte ranges (one, several as `multipart/byteranges`, 416), precompressed
//! `.br`/`.zst`/`.gz` siblings, index files, directory listings. Nothing outside `root` is
//! ever opened: the path is decoded strictly (no encoded `/`, NUL, backslash or invalid
//! UTF-8; `..` may not climb above the root) and every open is `openat2` beneath the root's
//! descriptor, so a symlink leaving the root fails unless `follow_symlinks`. Files are opened
//! through the worker's open-file cache; reads are blocking, as nginx's default (`aio off`).

use crate::http::codec::{RequestHead, ResponseHead};
use crate::http::compress;
use crate::http::conditional::{
    if_range_holds, multipart_body, parse_ranges, precondition, precondition_failed,
    range_not_satisfiable, Ranges, Validators,
};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::file_body::{FileBody, FileHandle};
use crate::http::local::LocalResponse;
use crate::io::open_files::{Missing, OpenFile, OpenFiles};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use bytes::Bytes;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::borrow::Cow;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use weir_config::{Encoding, StaticFiles};

/// Bytes a `multipart/byteranges` answer may assemble in memory.
const MAX_MULTIPART_BYTES: u64 = 16 << 20;
/// The precompressed siblings looked for, in order of preference on equal q-values.
const PRECOMPRESSED: [(Encoding, &str); 3] = [
    (Encoding::Br, ".br"),
    (Encoding::Zstd, ".zst"),
    (Encoding::Gzip, ".gz"),
];

/// A compiled `static` action: its settings and the root folder's descriptor.
pub struct StaticSite {
    pub config: StaticFiles,
    root: OwnedFd,
    /// This site's entries in a worker's open-file cache.
    id: u64,
    /// The route strips a prefix first (`strip_prefix`, which sets `X-Forwarded-Prefix`): a
    /// redirect puts it back. Known when the route is compiled, so requests carry nothing.
    pub behind_strip_prefix: bool,
}

impl std::fmt::Debug for StaticSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "static {}", self.config.root.display())
    }
}

impl StaticSite {
    pub fn open(config: &StaticFiles) -> Result<StaticSite, String> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let root = File::open(&config.root)
            .map_err(|e| format!("static root {}: {e}", config.root.display()))?;
        Ok(StaticSite {
            config: config.clone(),
            root: root.into(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            behind_strip_prefix: false,
        })
    }

    /// Opens `rel` (a clean relative path, `""` for the root) beneath the root.
    fn open_file(&self, rel: &str) -> Result<File, Missing> {
        let path = if rel.is_empty() { "." } else { rel };
        let opened = if self.config.follow_symlinks {
            File::open(self.config.root.join(path)).map(OwnedFd::from)
        } else {
            // The kernel refuses any resolution (`..`, an absolute or climbing symlink)
            // that would leave the root.
            rustix::fs::openat2(
                &self.root,
                path,
                OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(std::io::Error::from)
            .or_else(|e| match e.raw_os_error() {
                // No openat2 (Linux before 5.6, or valgrind): resolve the path in user
                // space and check it still lies under the root before opening it.
                Some(code) if code == rustix::io::Errno::NOSYS.raw_os_error() => {
                    self.open_checked(path)
                }
                _ => Err(e),
            })
        };
        match opened {
            Ok(fd) => Ok(File::from(fd)),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(Missing::Forbidden),
            Err(_) => Err(Missing::NotFound),
        }
    }

    /// `open_file` without `openat2`: the canonical path must lie under the canonical root.
    fn open_checked(&self, path: &str) -> std::io::Result<OwnedFd> {
        let root = self.config.root.canonicalize()?;
        let target = root.join(path).canonicalize()?;
        if !target.starts_with(&root) {
            return Err(std::io::ErrorKind::NotFound.into());
        }
        File::open(target).map(OwnedFd::from)
    }

    fn lookup(&self, files: &OpenFiles, now: Instant, rel: &str) -> Result<Rc<OpenFile>, Missing> {
        files.get(self.id, rel, now, || self.open_file(rel))
    }
}

/// Why a request path cannot name a file.
#[derive(Debug, PartialEq, Eq)]
enum BadPath {
    /// Malformed or climbing above the root: 400.
    Invalid,
    /// A hidden name while `dotfiles` is off: 404.
    Hidden,
}

/// Decodes a request path into clean segments under the root: percent-escapes decoded
/// (an encoded `/` or NUL refused), valid UTF-8, no backslash, `.` dropped, `..` applied
/// without climbing above the root. Returns the segments joined by `/`, and whether the
/// path ended with `/`.
fn clean_path(raw: &str, dotfiles: bool) -> Result<(Cow<'_, str>, bool), BadPath> {
    // The common case, nothing to decode or resolve: the path is the name. Byte scans, not
    // `str::contains`: whether that was inlined changed with unrelated code (+440
    // instructions per request, callgrind).
    let path = raw.as_bytes();
    let plain = path.first() == Some(&b'/')
        && !path.iter().any(|b| matches!(b, b'%' | b'\\' | 0))
        && !path
            .windows(2)
            .any(|pair| pair[0] == b'/' && matches!(pair[1], b'.' | b'/'));
    if plain {
        let trailing_slash = raw.ends_with('/');
        let name = raw[1..].strip_suffix('/').unwrap_or(&raw[1..]);
        return Ok((Cow::Borrowed(name), trailing_slash));
    }
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(BadPath::Invalid)?;
            let text = std::str::from_utf8(hex).map_err(|_| BadPath::Invalid)?;
            let byte = u8::from_str_radix(text, 16).map_err(|_| BadPath::Invalid)?;
            if byte == b'/' || byte == 0 {
                return Err(BadPath::Invalid);
            }
            decoded.push(byte);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(decoded).map_err(|_| BadPath::Invalid)?;
    if text.contains(['\\', '\0']) || !text.starts_with('/') {
        return Err(BadPath::Invalid);
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in text.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or(BadPath::Invalid)?;
            }
            hidden if hidden.starts_with('.') && !dotfiles => return Err(BadPath::Hidden),
            name => segments.push(name),
        }
    }
    Ok((Cow::Owned(segments.join("/")), text.ends_with('/')))
}

/// Runs the `static` action for one request.
pub(crate) fn serve<'r>(
    site: &StaticSite,
    files: &OpenFiles,
    now: Instant,
    req: &RequestHead,
) -> Reply<'r> {
    if !matches!(req.method(), "GET" | "HEAD") {
        let allow = "GET, HEAD";
        let message = "static files answer GET and HEAD only";
        let refusal = LocalError::new(405, ErrorKind::MethodNotAllowed { allow }, message);
        return Reply::error(refusal);
    }
    let config = &site.config;
    let (rel, trailing_slash) = match clean_path(req.path(), config.dotfiles) {
        Ok(clean) => clean,
        Err(BadPath::Invalid) => return text(400, "invalid path"),
        Err(BadPath::Hidden) => return not_found(site, files, now, req),
    };
    let mut found = match site.lookup(files, now, &rel) {
        Ok(found) => found,
        Err(Missing::Forbidden) => return text(403, "forbidden"),
        Err(Missing::NotFound) => return not_found(site, files, now, req),
    };
    let mut name = rel.clone();
    if found.is_dir {
        if !trailing_slash {
            // As nginx does: a folder is addressed with its trailing slash, on the path the
            // client asked for (a stripped prefix is put back). Leading slashes collapse to
            // one: `//host/dir` would send the client to `host`.
            let prefix = match site.behind_strip_prefix {
                true => req.head.get("x-forwarded-prefix").unwrap_or_default(),
                false => b"",
            };
            // `strip_prefix_regex` records its prefix with the `/` that ends it.
            let prefix = String::from_utf8_lossy(prefix);
            let asked = format!("{}{}", prefix.trim_end_matches('/'), req.path());
            let mut location = format!("/{}/", asked.trim_start_matches('/'));
            if let Some(query) = req.target().split_once('?').map(|(_, q)| q) {
                location = format!("{location}?{query}");
            }
            return Reply::local(Cow::Owned(LocalResponse::redirect(301, &location)));
        }
        let index = config.index.iter().find_map(|index| {
            let path = if rel.is_empty() {
                index.clone()
            } else {
                format!("{rel}/{index}")
            };
            match site.lookup(files, now, &path) {
                Ok(file) if !file.is_dir => Some((path, file)),
                _ => None,
            }
        });
        match index {
            Some((path, file)) => {
                name = Cow::Owned(path);
                found = file;
            }
            None if config.autoindex => return listing(site, &rel, req),
            None => return text(403, "directory listing is off"),
        }
    }
    let mut encoding = None;
    if config.precompressed && req.head.get("accept-encoding").is_some() {
        let offered = PRECOMPRESSED.map(|(e, _)| e);
        for accepted in compress::acceptable(req.head.get_all("accept-encoding"), &offered) {
            let suffix = PRECOMPRESSED
                .iter()
                .find(|(e, _)| *e == accepted)
                .map_or("", |(_, s)| *s);
            if let Ok(variant) = site.lookup(files, now, &format!("{name}{suffix}")) {
                if !variant.is_dir {
                    found = variant;
                    encoding = Some(accepted);
                    break;
                }
            }
        }
    }
    answer_file(site, req, &found, 200, || content_type(&name), encoding)
}

/// The answer for a file: conditionals, then ranges, then the whole file.
fn answer_file<'r>(
    site: &StaticSite,
    req: &RequestHead,
    file: &Rc<OpenFile>,
    status: u16,
    content_type: impl Fn() -> String,
    encoding: Option<Encoding>,
) -> Reply<'r> {
    let config = &site.config;
    let headers = || {
        let mut headers: Vec<(String, String)> = vec![
            ("content-type".into(), content_type()),
            ("etag".into(), file.etag.clone()),
            ("last-modified".into(), file.last_modified.clone()),
        ];
        if let Some(encoding) = encoding {
            headers.push(("content-encoding".into(), encoding.token().into()));
        }
        if config.precompressed {
            headers.push(("vary".into(), "Accept-Encoding".into()));
        }
        if let Some(cache_control) = &config.cache_control {
            headers.push(("cache-control".into(), cache_control.clone()));
        }
        headers
    };
    if status != 200 {
        return file_reply(
            ResponseHead::local(status, &headers(), file.len as usize),
            file,
            0,
            file.len,
        );
    }
    let validators = Validators {
        etag: Some(file.etag.as_bytes()),
        modified: Some(file.mtime),
    };
    if let Some(code) = precondition(req, &validators) {
        if code != 304 {
            return Reply::error(precondition_failed());
        }
        // A 304 carries the validators and caching headers, no body.
        let mut headers = headers();
        headers.retain(|(n, _)| n != "content-type" && n != "content-encoding");
        return Reply::local(Cow::Owned(LocalResponse::new(304, headers, Bytes::new())));
    }
    if let Some(range) = req
        .head
        .get("range")
        .filter(|_| if_range_holds(req, &validators))
    {
        let mut headers = headers();
        headers.push(("accept-ranges".into(), "bytes".into()));
        match parse_ranges(range, file.len) {
            Ranges::Ignore => {}
            Ranges::Unsatisfiable => return Reply::error(range_not_satisfiable(file.len)),
            Ranges::One(start, end) => {
                headers.push((
                    "content-range".into(),
                    format!("bytes {start}-{}/{}", end - 1, file.len),
                ));
                let head = ResponseHead::local(206, &headers, (end - start) as usize);
                return file_reply(head, file, start, end - start);
            }
            Ranges::Many(ranges) => return multipart(headers, file, &ranges),
        }
    }
    let head = file.full_answer.get_or_init(|| {
        let mut headers = headers();
        headers.push(("accept-ranges".into(), "bytes".into()));
        Rc::new(LocalResponse::head_for(200, headers, file.len))
    });
    Reply {
        head: ReplyHead::Shared(head.clone()),
        body: ReplyBody::File(FileBody {
            file: FileHandle::Worker(file.file.clone()),
            offset: 0,
            len: file.len,
            mapped: None,
        }),
        upstream: None,
        body_filter: None,
    }
}

fn file_reply<'r>(head: ResponseHead, file: &Rc<OpenFile>, offset: u64, len: u64) -> Reply<'r> {
    Reply {
        head: ReplyHead::Response(head),
        body: ReplyBody::File(FileBody {
            file: FileHandle::Worker(file.file.clone()),
            offset,
            len,
            mapped: None,
        }),
        upstream: None,
        body_filter: None,
    }
}

/// Several ranges: a `multipart/byteranges` body assembled in memory (bounded; beyond the
/// bound the whole file is sent instead).
fn multipart<'r>(
    mut headers: Vec<(String, String)>,
    file: &Rc<OpenFile>,
    ranges: &[(u64, u64)],
) -> Reply<'r> {
    let total: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    if total > MAX_MULTIPART_BYTES {
        let head = ResponseHead::local(200, &headers, file.len as usize);
        return file_reply(head, file, 0, file.len);
    }
    let part_type = headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let read = |buf: &mut [u8], start| read_exact_at(&file.file, buf, start);
    let Ok((body, content_type)) = multipart_body(&part_type, file.len, ranges, read) else {
        return text(500, "the file could not be read");
    };
    headers.retain(|(n, _)| n != "content-type");
    headers.push(("content-type".into(), content_type));
    let head = ResponseHead::local(206, &headers, body.len());
    Reply {
        head: ReplyHead::Response(head),
        body: ReplyBody::Bytes(body.into()),
        upstream: None,
        body_filter: None,
    }
}

/// Reads exactly `buf.len()` bytes at `offset` (blocking, like nginx without `aio`).
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// The `not_found` page with status 404, or a plain 404.
fn not_found<'r>(
    site: &StaticSite,
    files: &OpenFiles,
    now: Instant,
    req: &RequestHead,
) -> Reply<'r> {
    if let Some(page) = &site.config.not_found {
        if let Ok(file) = site.lookup(files, now, page) {
            if !file.is_dir {
                return answer_file(site, req, &file, 404, || content_type(page), None);
            }
        }
    }
    text(404, "not found")
}

/// A path refused, not found or not read.
fn text<'r>(status: u16, message: &'static str) -> Reply<'r> {
    Reply::error(LocalError::new(status, ErrorKind::File, message))
}

/// The MIME type from the extension, with `charset=utf-8` for text.
fn content_type(name: &str) -> String {
    let mime = mime_guess::from_path(name)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let texty = mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript" | "application/json" | "image/svg+xml" | "application/xml"
        );
    if texty {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    }
}

/// An HTML listing of a folder (`autoindex`), names escaped.
fn listing<'r>(site: &StaticSite, rel: &str, req: &RequestHead) -> Reply<'r> {
    let dir = site
        .config
        .root
        .join(if rel.is_empty() { "." } else { rel });
    let Ok(read) = std::fs::read_dir(&dir) else {
        return text(403, "forbidden");
    };
    let mut names: Vec<(String, bool)> = read
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let is_dir = entry.file_type().ok()?.is_dir();
            (site.config.dotfiles || !name.starts_with('.')).then_some((name, is_dir))
        })
        .collect();
    names.sort();
    let title = html_escape(req.path());
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1><ul>\n<li><a href=\"../\">../</a></li>\n"
    );
    for (name, is_dir) in names {
        let slash = if is_dir { "/" } else { "" };
        html.push_str(&format!(
            "<li><a href=\"{}{slash}\">{}{slash}</a></li>\n",
            html_escape(&percent_encode(&name)),
            html_escape(&name)
        ));
    }
    html.push_str("</ul></body></html>\n");
    let answer = LocalResponse::new(
        200,
        vec![("content-type".into(), "text/html; charset=utf-8".into())],
        html,
    );
    Reply::local(Cow::Owned(answer))
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes everything but unreserved characters, for a link to a file name.
fn percent_encode(name: &str) -> String {
    crate::http::ascii::percent_encode(name, |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_or_refused() {
        let ok = |p: &'static str| clean_path(p, false);
        assert_eq!(ok("/a/b.txt"), Ok(("a/b.txt".into(), false)));
        assert_eq!(ok("/a/./b/../c/"), Ok(("a/c".into(), true)));
        assert_eq!(ok("/"), Ok(("".into(), true)));
        assert_eq!(ok("/a%20b"), Ok(("a b".into(), false)));
        assert_eq!(ok("/caf%C3%A9"), Ok(("café".into(), false)));
        for bad in [
            "/../etc/passwd",
            "/a/../../etc",
            "/%2e%2e/etc",
            "/a%2fb",
            "/a%2F..%2F..%2Fetc",
            "/a\\..\\b",
            "/a%5c..",
            "/a%00b",
            "/%c0%ae%c0%ae/etc",
            "/%e0%80%af",
            "/a%zz",
            "/a%2",
            "relative",
        ] {
            assert_eq!(ok(bad), Err(BadPath::Invalid), "{bad}");
        }
        assert_eq!(ok("/.env"), Err(BadPath::Hidden));
        assert_eq!(ok("/a/.git/config"), Err(BadPath::Hidden));
        assert_eq!(ok("/%2egit"), Err(BadPath::Hidden));
        assert_eq!(
            clean_path("/.well-known/x", true),
            Ok((".well-known/x".into(), false))
        );
    }

    #[test]
    fn types_and_escaping() {
        assert_eq!(content_type("a/index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("x.json"), "application/json; charset=utf-8");
        assert_eq!(content_type("x.png"), "image/png");
        assert_eq!(content_type("x.unknownext"), "application/octet-stream");
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(percent_encode("a b<.txt"), "a%20b%3C.txt");
    }
}
