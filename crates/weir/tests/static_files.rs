//! The `static` action on the real binary, with curl and raw sockets as clients: types,
//! validators and conditional requests, ranges (one, several, unsatisfiable, If-Range),
//! precompressed siblings, folders, and a traversal corpus that must never reach a file
//! outside the root. A 1 GiB file goes through `sendfile` and arrives intact.

mod common;
use common::*;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Site {
    weir: Weir,
    root: PathBuf,
    outside: PathBuf,
}

fn site(extra: &str) -> Site {
    let base = temp_dir("static");
    let root = base.join("www");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("<b>&tag")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET outside the root\n").unwrap();
    std::fs::write(root.join("index.html"), "<h1>home</h1>\n".repeat(100)).unwrap();
    std::fs::write(root.join("app.js"), "console.log('weir');\n".repeat(50)).unwrap();
    std::fs::write(root.join("app.js.gz"), b"not really gzip, but the sibling").unwrap();
    std::fs::write(root.join("digits.txt"), "0123456789".repeat(10)).unwrap();
    std::fs::write(root.join("docs/index.html"), "docs index\n").unwrap();
    std::fs::write(root.join(".env"), "SECRET=dotfile\n").unwrap();
    std::fs::write(root.join("404.html"), "custom not found\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("escape")).unwrap();
    std::os::unix::fs::symlink("digits.txt", root.join("inside-link")).unwrap();
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  files:\n    rule: \"PathPrefix(`/`)\"\n    static: {{ root: \"{}\", cache_control: \"max-age=60\", not_found: 404.html{extra} }}\n",
        root.display()
    ));
    Site {
        weir,
        root,
        outside,
    }
}

/// curl with `--path-as-is`; returns the head and the body.
fn curl(site: &Site, path: &str, args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "-D", "/dev/stderr"])
        .args(args)
        .arg(format!("http://{}{path}", site.weir.addr()))
        .output()
        .expect("curl must be installed");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.stdout,
    )
}

fn status(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn files_types_validators_and_conditionals() {
    let site = site("");
    let (head, body) = curl(&site, "/", &[]);
    assert_eq!(status(&head), 200, "{head}");
    assert_eq!(body, "<h1>home</h1>\n".repeat(100).as_bytes());
    assert_eq!(
        header_value(&head, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header_value(&head, "cache-control"), Some("max-age=60"));
    assert_eq!(header_value(&head, "accept-ranges"), Some("bytes"));
    let etag = header_value(&head, "etag").unwrap().to_string();
    let modified = header_value(&head, "last-modified").unwrap().to_string();
    assert!(etag.starts_with('"'), "a strong ETag: {etag}");
    let (head, _) = curl(&site, "/app.js", &["-H", "accept-encoding: br"]);
    let js = header_value(&head, "content-type").unwrap_or_default();
    assert!(
        js.contains("javascript") && js.ends_with("charset=utf-8"),
        "{head}"
    );

    // Conditionals (RFC 9110 §13.2.2).
    let cond = |h: &str| status(&curl(&site, "/index.html", &["-H", h]).0);
    assert_eq!(cond(&format!("if-none-match: {etag}")), 304);
    assert_eq!(cond(&format!("if-none-match: \"other\", W/{etag}")), 304);
    assert_eq!(cond("if-none-match: \"other\""), 200);
    assert_eq!(cond(&format!("if-modified-since: {modified}")), 304);
    assert_eq!(
        cond("if-modified-since: Sun, 06 Nov 1994 08:49:37 GMT"),
        200
    );
    assert_eq!(cond("if-match: \"other\""), 412);
    assert_eq!(cond(&format!("if-match: {etag}")), 200);
    assert_eq!(
        cond("if-unmodified-since: Sun, 06 Nov 1994 08:49:37 GMT"),
        412
    );
    // curl's own revalidation: -z sends If-Modified-Since from a date.
    let (head, body) = curl(&site, "/index.html", &["-z", &modified]);
    assert_eq!(status(&head), 304, "{head}");
    assert!(body.is_empty());
    assert_eq!(header_value(&head, "etag"), Some(etag.as_str()));

    // HEAD: the same head, no body; other methods: 405 with Allow.
    let mut c = Conn::open(site.weir.addr());
    c.send(
        b"HEAD /index.html HTTP/1.1\r\nHost: t\r\n\r\nGET /digits.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let r = c.read(true).unwrap();
    assert_eq!((r.status, r.header("content-length")), (200, Some("1400")));
    // Had HEAD sent a body, the next answer would not parse as this one.
    assert_eq!(c.read(false).unwrap().text(), "0123456789".repeat(10));
    let (head, _) = curl(&site, "/index.html", &["-X", "POST"]);
    assert_eq!(status(&head), 405);
    assert_eq!(header_value(&head, "allow"), Some("GET, HEAD"));

    // Precompressed sibling when accepted, with Vary; the plain file otherwise.
    let (head, body) = curl(&site, "/app.js", &["-H", "accept-encoding: gzip, br"]);
    assert_eq!(
        header_value(&head, "content-encoding"),
        Some("gzip"),
        "{head}"
    );
    assert_eq!(header_value(&head, "vary"), Some("Accept-Encoding"));
    assert_eq!(body, b"not really gzip, but the sibling");
    let (head, body) = curl(&site, "/app.js", &["-H", "accept-encoding: gzip;q=0"]);
    assert!(header_value(&head, "content-encoding").is_none(), "{head}");
    assert_eq!(body.len(), "console.log('weir');\n".len() * 50);
}

#[test]
fn ranges_one_several_unsatisfiable_and_if_range() {
    let site = site("");
    let digits = "0123456789".repeat(10);
    let (head, body) = curl(&site, "/digits.txt", &["-r", "10-19"]);
    assert_eq!(status(&head), 206, "{head}");
    assert_eq!(
        header_value(&head, "content-range"),
        Some("bytes 10-19/100")
    );
    assert_eq!(body, b"0123456789");
    let (_, body) = curl(&site, "/digits.txt", &["-r", "-5"]);
    assert_eq!(body, b"56789");
    let (head, body) = curl(&site, "/digits.txt", &["-r", "0-1,50-52"]);
    assert_eq!(status(&head), 206);
    let content_type = header_value(&head, "content-type").unwrap();
    let boundary = content_type
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(content_type);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("content-range: bytes 0-1/100\r\n\r\n01\r\n"),
        "{text}"
    );
    assert!(
        text.contains("content-range: bytes 50-52/100\r\n\r\n012\r\n"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with(&format!("--{boundary}--")),
        "{text}"
    );
    let (head, _) = curl(&site, "/digits.txt", &["-r", "100-200"]);
    assert_eq!(status(&head), 416);
    assert_eq!(header_value(&head, "content-range"), Some("bytes */100"));
    // If-Range: the range only while the validator matches.
    let etag = header_value(&curl(&site, "/digits.txt", &["-I"]).0, "etag")
        .unwrap()
        .to_string();
    let if_range = format!("if-range: {etag}");
    let (head, _) = curl(&site, "/digits.txt", &["-r", "0-4", "-H", &if_range]);
    assert_eq!(status(&head), 206);
    let (head, body) = curl(
        &site,
        "/digits.txt",
        &["-r", "0-4", "-H", "if-range: \"old\""],
    );
    assert_eq!(status(&head), 200);
    assert_eq!(body, digits.as_bytes());
}

#[test]
fn folders_listing_and_not_found() {
    let site = site(", autoindex: true");
    let (head, _) = curl(&site, "/docs?x=1", &[]);
    assert_eq!(status(&head), 301);
    assert_eq!(header_value(&head, "location"), Some("/docs/?x=1"));
    let (_, body) = curl(&site, "/docs/", &[]);
    assert_eq!(body, b"docs index\n");
    // A folder without an index is listed, names escaped, dotfiles hidden.
    let (head, body) = curl(&site, "/empty/", &[]);
    assert_eq!(status(&head), 200, "{head}");
    assert!(String::from_utf8_lossy(&body).contains("Index of /empty/"));
    // Once the root's index is gone (the open-file cache sees it within a second) it is listed.
    std::fs::remove_file(site.root.join("index.html")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let (_, body) = curl(&site, "/", &[]);
    let html = String::from_utf8_lossy(&body);
    assert!(html.contains("&lt;b&gt;&amp;tag/"), "{html}");
    assert!(html.contains("href=\"%3Cb%3E%26tag/\""), "{html}");
    assert!(
        !html.contains(".env") && !html.contains("<b>&tag"),
        "{html}"
    );
    // Missing files get the not_found page with 404.
    let (head, body) = curl(&site, "/missing.html", &[]);
    assert_eq!(status(&head), 404);
    assert_eq!(body, b"custom not found\n");
    // Without autoindex, a folder without an index is forbidden.
    let plain = self::site("");
    let (head, _) = curl(&plain, "/empty/", &[]);
    assert_eq!(status(&head), 403);
}

#[test]
fn nothing_outside_the_root_is_ever_served() {
    let site = site("");
    let secret = b"SECRET";
    let corpus = [
        "/../outside/secret.txt",
        "/docs/../../outside/secret.txt",
        "/%2e%2e/outside/secret.txt",
        "/%2E%2E/outside/secret.txt",
        "/docs/%2e%2e/%2e%2e/outside/secret.txt",
        "/..%2foutside%2fsecret.txt",
        "/docs%2f..%2f..%2foutside%2fsecret.txt",
        "/..\\outside\\secret.txt",
        "/%5c..%5coutside%5csecret.txt",
        "/%c0%ae%c0%ae/outside/secret.txt",
        "/%c0%af../outside/secret.txt",
        "/%e0%80%ae%e0%80%ae/outside/secret.txt",
        "/escape",
        "/escape/",
        "/.env",
        "/%2eenv",
        "/docs/../.env",
        "/index.html%00.txt",
        "/index.html\0",
        "//../outside/secret.txt",
        "/./../outside/secret.txt",
        "/.%2e/outside/secret.txt",
    ];
    for path in corpus {
        // Raw socket: no client normalizes the path first.
        let mut c = Conn::open(site.weir.addr());
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        // No answer at all means the head was refused and the connection closed.
        if let Some(r) = c.read(false) {
            assert!(
                matches!(r.status, 400 | 403 | 404),
                "{path:?}: {} {}",
                r.status,
                r.text()
            );
            assert!(
                !r.body.windows(secret.len()).any(|w| w == secret),
                "{path:?} leaked a file outside the root"
            );
        }
    }
    // A symlink staying inside the root is served.
    let (head, body) = curl(&site, "/inside-link", &[]);
    assert_eq!(status(&head), 200, "{head}");
    assert_eq!(body, "0123456789".repeat(10).as_bytes());
    // follow_symlinks: true serves wherever a link leads (the operator's choice).
    let open = self::site(", follow_symlinks: true");
    let (head, body) = curl(&open, "/escape", &[]);
    assert_eq!(status(&head), 200, "{head}");
    assert!(body.starts_with(secret));
    assert!(open.outside.exists() && site.outside.exists());
}

#[test]
fn a_gigabyte_file_arrives_intact() {
    let site = site("");
    let path = site.root.join("huge.bin");
    let mut file = std::fs::File::create(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    // Distinct bytes at spread offsets, so a misplaced offset changes the digest.
    for i in 0u64..64 {
        file.seek(SeekFrom::Start(i * (16 << 20) + i * 4099))
            .unwrap();
        file.write_all(&[i as u8 + 1; 8192]).unwrap();
    }
    drop(file);
    let expected = sha256(&path);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "curl -s http://{}/huge.bin | sha256sum",
            site.weir.addr()
        ))
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(got.split_whitespace().next(), Some(expected.as_str()));
    std::fs::remove_file(&path).unwrap();
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn files_go_through_the_compress_filter() {
    let root = temp_dir("static-compress");
    let small = "small text file, repeated. ".repeat(100);
    let large = "a large text file, streamed through gzip. ".repeat(10_000);
    std::fs::write(root.join("small.txt"), &small).unwrap();
    std::fs::write(root.join("large.txt"), &large).unwrap();
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip] }} }}\n\
         routers:\n  files:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [gz]\n    static: {{ root: \"{}\", precompressed: false }}\n",
        root.display()
    ));
    for (path, text) in [("/small.txt", &small), ("/large.txt", &large)] {
        let mut c = Conn::open(weir.addr());
        c.send(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n").as_bytes(),
        );
        let r = c.read(false).unwrap();
        assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
        let mut decoded = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut decoded)
            .unwrap();
        assert_eq!(&decoded, text, "{path}");
    }
}

#[test]
fn a_client_that_reads_late_gets_every_byte() {
    // A file goes out by sendfile right after its head; when the socket takes only part of
    // them, the rest must follow in order. Pipelined requests and a late reader force that.
    let site = site("");
    let body: Vec<u8> = (0..30_000u32).map(|i| (i % 251) as u8).collect();
    pipelined_and_read_late(&site, "blob.bin", &body, 200, 300);
}

#[test]
fn files_sent_in_several_calls_arrive_whole_and_in_order() {
    // Over 128 KiB a file goes in several sendfile calls: of whole segments up to 512 KiB
    // (the first one short by the head), of a megabyte above. Pipelined requests read late
    // also make the socket take only part of a call.
    let site = site("");
    for len in [65_537u32, 131_073, 300_001, 700_003, 1_500_007] {
        let body: Vec<u8> = (0..len)
            .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
            .collect();
        pipelined_and_read_late(&site, &format!("parts{len}.bin"), &body, 20, 200);
    }
}

/// Writes `body` as `name`, asks for it `count` times on one connection at once, waits
/// `wait_ms` before reading, and checks every answer is whole and in order.
fn pipelined_and_read_late(site: &Site, name: &str, body: &[u8], count: usize, wait_ms: u64) {
    std::fs::write(site.root.join(name), body).unwrap();
    let mut c = Conn::open(site.weir.addr());
    c.send(
        &format!("GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n")
            .repeat(count)
            .into_bytes(),
    );
    std::thread::sleep(std::time::Duration::from_millis(wait_ms));
    for i in 0..count {
        let r = c
            .read(false)
            .unwrap_or_else(|| panic!("{name}: answer {i} missing"));
        assert_eq!(r.status, 200, "{name}: answer {i}");
        assert!(
            r.body == body,
            "{name}: answer {i}: {} bytes differ",
            r.body.len()
        );
    }
}

/// A folder's redirect keeps the path the client asked for: behind `strip_prefix: [/files]`,
/// `/files/docs` goes to `/files/docs/` (it went to `/docs/`, off the site), as nginx's does
/// behind its `location /files/ { alias ...; }`. Leading slashes collapse, so the redirect
/// can never name another host.
#[test]
fn a_folder_redirect_keeps_a_stripped_prefix() {
    let root = temp_dir("static-prefix");
    std::fs::create_dir_all(root.join("withindex")).unwrap();
    std::fs::write(root.join("withindex/index.html"), "inside\n").unwrap();
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         middlewares:\n  files: {{ strip_prefix: [\"/files\"] }}\n\
         routers:\n  files:\n    rule: \"PathPrefix(`/files`)\"\n    middlewares: [files]\n    static: {{ root: \"{}\" }}\n\
         \x20 rest:\n    rule: \"PathPrefix(`/`)\"\n    priority: 1\n    static: {{ root: \"{}\" }}\n",
        root.display(),
        root.display()
    ));
    let moved = request(
        weir.addr(),
        "GET /files/withindex?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(moved.status, 301);
    assert_eq!(moved.header("location"), Some("/files/withindex/?a=1"));
    let followed = get(weir.addr(), "x", "/files/withindex/");
    assert_eq!(
        (followed.status, followed.text().as_str()),
        (200, "inside\n")
    );
    let doubled = request(
        weir.addr(),
        "GET //withindex HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(doubled.status, 301);
    assert_eq!(doubled.header("location"), Some("/withindex/"));
}
