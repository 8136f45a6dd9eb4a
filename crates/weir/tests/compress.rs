//! The `compress` middleware on the real binary: curl and Python's decoders read every encoding
//! back byte for byte, from nginx-served files and local answers; what must not be compressed
//! is not; a pausing stream is flushed as it goes.

mod common;
use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A JSON document like an API's, about 34 KB.
fn json_document() -> Vec<u8> {
    let items: Vec<String> = (0..600)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"item {i}\", \"tags\": [\"a\", \"b\"]}}"))
        .collect();
    format!("[{}]", items.join(", ")).into_bytes()
}

struct Site {
    _nginx: Nginx,
    weir: Weir,
    dir: std::path::PathBuf,
}

/// nginx serves a folder of files; weir proxies it with `compress` (defaults) and answers
/// `/local` itself, compressed too.
fn site(compress: &str) -> Site {
    let dir = temp_dir("compress-files");
    std::fs::write(dir.join("data.json"), json_document()).unwrap();
    // Over the whole-body limit (256 KiB): compressed as it streams.
    std::fs::write(dir.join("large.json"), json_document().repeat(10)).unwrap();
    std::fs::write(dir.join("small.json"), b"{\"tiny\": true}").unwrap();
    std::fs::write(dir.join("image.png"), vec![7u8; 8192]).unwrap();
    let nginx = Nginx::serve_dir(&dir);
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         middlewares:\n  gz: {{ compress: {compress} }}\n\
         routers:\n  files:\n    rule: \"PathPrefix(`/`)\"\n    priority: 1\n    service: files\n    middlewares: [gz]\n\
         \x20 local:\n    rule: \"Path(`/local`)\"\n    respond: {{ body: \"{}\", headers: {{ content-type: text/plain }} }}\n    middlewares: [gz]\n\
         services:\n  files:\n    servers: [{{ url: \"http://{}\" }}]\n",
        "local answer ".repeat(200),
        nginx.addr
    ));
    Site {
        _nginx: nginx,
        weir,
        dir,
    }
}

/// Runs curl; returns the response head (lowercased) and where the raw body was saved.
fn curl(site: &Site, path: &str, args: &[&str]) -> (String, std::path::PathBuf) {
    let body = site.dir.join(format!("body-{}", rand_suffix(path, args)));
    let mut curl = Command::new("curl");
    curl.args(["-s", "-D", "-", "-o"])
        .arg(&body)
        .args(args)
        .arg(format!("http://{}{path}", site.weir.addr()));
    let head = stdout_of(&mut curl, &format!("curl {args:?} {path}"));
    (String::from_utf8_lossy(&head).to_lowercase(), body)
}

fn rand_suffix(path: &str, args: &[&str]) -> String {
    let text = format!("{path}{args:?}");
    format!(
        "{:x}",
        text.bytes()
            .fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64)
                .wrapping_mul(0x100000001b3))
    )
}

/// Decodes a file with Python's own decoder for the encoding (Debian's python3-brotli and
/// python3-zstandard).
fn python_decode(encoding: &str, file: &Path) -> Vec<u8> {
    let script = "import sys, gzip, brotli, zstandard\n\
                  enc, path = sys.argv[1], sys.argv[2]\n\
                  data = open(path, 'rb').read()\n\
                  if enc == 'gzip': out = gzip.decompress(data)\n\
                  elif enc == 'br': out = brotli.decompress(data)\n\
                  else: out = zstandard.ZstdDecompressor().decompressobj().decompress(data)\n\
                  sys.stdout.buffer.write(out)\n";
    let path = file.to_str().expect("a UTF-8 temp path");
    python(script, &[encoding, path])
}

#[test]
fn every_encoding_round_trips_through_real_decoders() {
    let site = site("{}");
    let original = json_document();
    for encoding in ["gzip", "br", "zstd"] {
        let accept = format!("accept-encoding: {encoding}");
        let (head, body) = curl(&site, "/data.json", &["-H", &accept]);
        assert_eq!(
            header_value(&head, "content-encoding"),
            Some(encoding),
            "{head}"
        );
        assert_eq!(
            header_value(&head, "vary"),
            Some("accept-encoding"),
            "{head}"
        );
        assert_eq!(
            header_value(&head, "transfer-encoding"),
            Some("chunked"),
            "{head}"
        );
        assert!(header_value(&head, "content-length").is_none(), "{head}");
        assert!(
            header_value(&head, "etag").is_some_and(|e| e.starts_with("w/\"")),
            "a strong ETag must be weakened: {head}"
        );
        let compressed = std::fs::read(&body).unwrap();
        assert!(
            compressed.len() < original.len() / 5,
            "{encoding}: {} bytes",
            compressed.len()
        );
        assert_eq!(python_decode(encoding, &body), original, "{encoding}");
    }
    // A body over the whole-body limit goes through the streaming encoders.
    let large = json_document().repeat(10);
    for encoding in ["gzip", "br", "zstd"] {
        let accept = format!("accept-encoding: {encoding}");
        let (head, body) = curl(&site, "/large.json", &["-H", &accept]);
        assert_eq!(
            header_value(&head, "content-encoding"),
            Some(encoding),
            "{head}"
        );
        assert_eq!(python_decode(encoding, &body), large, "{encoding}");
    }
    // curl offers all it can decode (deflate, gzip, br, zstd): zstd comes first by default.
    let (head, body) = curl(&site, "/data.json", &["--compressed"]);
    assert_eq!(
        header_value(&head, "content-encoding"),
        Some("zstd"),
        "{head}"
    );
    assert_eq!(std::fs::read(&body).unwrap(), original);
    // q-values win over the configured order.
    let (head, _) = curl(
        &site,
        "/data.json",
        &["-H", "accept-encoding: zstd;q=0.5, gzip;q=0.9, br;q=0"],
    );
    assert_eq!(
        header_value(&head, "content-encoding"),
        Some("gzip"),
        "{head}"
    );
    // An HTTP/1.0 client gets the body close-delimited.
    let (head, body) = curl(
        &site,
        "/data.json",
        &["--http1.0", "-H", "accept-encoding: br"],
    );
    assert_eq!(
        header_value(&head, "content-encoding"),
        Some("br"),
        "{head}"
    );
    assert_eq!(header_value(&head, "connection"), Some("close"), "{head}");
    assert_eq!(python_decode("br", &body), original);
    // A local answer is compressed whole and keeps a Content-Length.
    let (head, body) = curl(&site, "/local", &["-H", "accept-encoding: gzip"]);
    assert_eq!(
        header_value(&head, "content-encoding"),
        Some("gzip"),
        "{head}"
    );
    let compressed = std::fs::read(&body).unwrap();
    assert_eq!(
        header_value(&head, "content-length"),
        Some(compressed.len().to_string().as_str())
    );
    assert_eq!(
        python_decode("gzip", &body),
        "local answer ".repeat(200).into_bytes()
    );
}

#[test]
fn what_must_not_be_compressed_is_not() {
    let site = site("{ algorithms: [gzip] }");
    let gzip = ["-H", "accept-encoding: gzip"];
    let plain = |head: &str| header_value(head, "content-encoding").is_none();
    // Short (a known length under min_length), unlisted type, HEAD, a range.
    let (head, _) = curl(&site, "/small.json", &gzip);
    assert!(
        plain(&head) && header_value(&head, "vary").is_none(),
        "{head}"
    );
    let (head, _) = curl(&site, "/image.png", &gzip);
    assert!(plain(&head), "{head}");
    let (head, _) = curl(&site, "/data.json", &["-I", gzip[0], gzip[1]]);
    assert!(plain(&head), "{head}");
    let (head, body) = curl(&site, "/data.json", &["-r", "0-99", gzip[0], gzip[1]]);
    assert!(head.starts_with("http/1.1 206"), "{head}");
    assert!(plain(&head), "{head}");
    assert_eq!(std::fs::read(&body).unwrap(), &json_document()[..100]);
    // A client that accepts none of the offered encodings gets the body as it is, with Vary
    // (another client's request for the same URL would get it compressed).
    for accept in [
        "accept-encoding: br",
        "accept-encoding: identity",
        "accept-encoding: gzip;q=0",
    ] {
        let (head, body) = curl(&site, "/data.json", &["-H", accept]);
        assert!(plain(&head), "{accept}: {head}");
        assert_eq!(
            header_value(&head, "vary"),
            Some("accept-encoding"),
            "{head}"
        );
        assert_eq!(std::fs::read(&body).unwrap(), json_document());
    }
    let (head, _) = curl(&site, "/data.json", &[]);
    assert!(plain(&head), "{head}");
}

#[test]
fn encoded_and_no_transform_responses_pass_untouched() {
    let body = "x".repeat(5000);
    let answer = move |extra: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let up = RawUpstream::start(move |c| {
        while let Some(head) = c.read_head() {
            let extra = if head.contains("/encoded") {
                "Content-Encoding: br\r\n"
            } else {
                "Cache-Control: public, no-transform\r\n"
            };
            c.write(answer(extra).as_bytes());
        }
    });
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         middlewares:\n  gz: {{ compress: {{}} }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    middlewares: [gz]\n\
         services:\n  up:\n    servers: [{{ url: \"{}\" }}]\n",
        up.url()
    ));
    for path in ["/encoded", "/no-transform"] {
        let mut c = Conn::open(weir.addr());
        c.send(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip, zstd\r\n\r\n")
                .as_bytes(),
        );
        let r = c.read(false).unwrap();
        assert_eq!(r.body.len(), 5000, "{path}");
        let expected = (path == "/encoded").then_some("br");
        assert_eq!(r.header("content-encoding"), expected, "{path}");
    }
}

#[test]
fn a_pausing_stream_is_flushed_as_it_goes() {
    // Server-sent events: the first event must reach the client while the upstream waits,
    // not when the stream ends.
    let up = RawUpstream::start(|c| {
        if c.read_head().is_some() {
            c.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
            c.write(b"d\r\ndata: first\n\n\r\n");
            std::thread::sleep(Duration::from_millis(1500));
            c.write(b"e\r\ndata: second\n\n\r\n0\r\n\r\n");
        }
    });
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip] }} }}\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: up\n    middlewares: [gz]\n\
         services:\n  up:\n    servers: [{{ url: \"{}\" }}]\n",
        up.url()
    ));
    let mut s = std::net::TcpStream::connect(weir.addr()).unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut raw = Vec::new();
    let mut first_seen = None;
    while started.elapsed() < Duration::from_secs(4) {
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        let text = decode_chunked_gzip(&raw);
        if first_seen.is_none() && text.contains("data: first") {
            first_seen = Some(started.elapsed());
        }
        if text.contains("data: second") {
            break;
        }
    }
    let first_seen = first_seen.expect("the first event never arrived");
    assert!(
        first_seen < Duration::from_millis(1000),
        "first event held back {first_seen:?}"
    );
    assert_eq!(decode_chunked_gzip(&raw), "data: first\n\ndata: second\n\n");
}

/// De-chunks what has arrived of a chunked gzip response and decodes as much as it can.
fn decode_chunked_gzip(raw: &[u8]) -> String {
    let Some(start) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return String::new();
    };
    let mut rest = &raw[start + 4..];
    let mut gz = Vec::new();
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        if size == 0 || rest.len() < line_end + 2 + size + 2 {
            break;
        }
        gz.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        rest = &rest[line_end + 2 + size + 2..];
    }
    let mut decoder = flate2::read::GzDecoder::new(&gz[..]);
    let mut text = Vec::new();
    let mut chunk = [0u8; 1024];
    while let Ok(n) = decoder.read(&mut chunk) {
        if n == 0 {
            break;
        }
        text.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&text).into_owned()
}
