//! Compressed bodies arrive whole, whatever feeds the encoder and whoever reads it: bodies of
//! 1 byte to 10 MB, sized to straddle every internal size (`min_length`, the memory-file
//! threshold, the 64 KiB read chunk and flush size, `SEGMENTED_FROM`, the whole-body limit,
//! `SEGMENTED_UP_TO`, the sendfile chunk), from `static` (cold and from the open-file cache),
//! an HTTP/1.1 upstream (content-length, chunked, close-delimited), an HTTP/2 upstream, the
//! cache (the filling miss, memory and memory-file hits, a disk-tier hit after a restart),
//! read by HTTP/1.1, HTTP/2 and TLS clients (curl), each decoded by Python's zlib, brotli and
//! zstandard and compared byte for byte with the original (issue 33: a 3.2 MB file arrived
//! corrupt in every encoding).

mod common;
use common::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Sizes on both sides of each internal size. The default `min_length` is 1024 (below it a
/// body goes as it is); memory files start at 32 KiB; the read chunk and flush size are
/// 64 KiB; files over 128 KiB go in segmented sendfile calls up to 512 KiB; bodies up to
/// 256 KiB are compressed whole; sendfile sends 1 MiB per call.
const SIZES: [usize; 14] = [
    1, 1023, 1024, 32_767, 32_769, 65_535, 65_536, 65_537, 131_073, 262_144, 262_145, 524_289,
    1_048_577, 3_265_862,
];
/// The largest body, sent from `static` and a chunked upstream to one client.
const LARGEST: usize = 10_000_000;
const MIN_LENGTH: usize = 1024;
const ENCODINGS: [&str; 3] = ["gzip", "br", "zstd"];

/// Text that compresses about 3:1 (words and numbers), as a JSON-typed file would.
fn varied_text(len: usize, salt: u64) -> Vec<u8> {
    const WORDS: [&str; 8] = [
        "alpha", "beta", "gamma", "weir", "proxy", "cache", "body", "chunk",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ salt;
    let mut text = Vec::with_capacity(len + 16);
    while text.len() < len {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let word = WORDS[(seed >> 60) as usize % WORDS.len()];
        text.extend_from_slice(format!("{word}{} ", (seed >> 20) % 100_000).as_bytes());
    }
    text.truncate(len);
    text
}

/// An upstream that serves the files of `dir` as `GET /chunked/NAME` (chunks of varied sizes,
/// from 1 byte to 100 KB) or `GET /close/NAME` (no length: the body ends when it closes).
fn framing_upstream(dir: PathBuf) -> RawUpstream {
    RawUpstream::start(move |conn: &mut RawConn| {
        while let Some(head) = conn.read_head() {
            let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let mut parts = target.trim_start_matches('/').splitn(2, '/');
            let (mode, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let Ok(body) = std::fs::read(dir.join(name)) else {
                conn.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
                continue;
            };
            if mode == "close" {
                conn.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
                );
                conn.write(&body);
                return;
            }
            conn.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            let mut rest = &body[..];
            for size in [1, 7919, 65_536, 100_000].into_iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, after) = rest.split_at(size.min(rest.len()));
                conn.write(format!("{:x}\r\n", piece.len()).as_bytes());
                conn.write(piece);
                conn.write(b"\r\n");
                rest = after;
            }
            conn.write(b"0\r\n\r\n");
        }
    })
}

/// A client: the entrypoint it reaches and curl's arguments for it.
struct Client {
    name: &'static str,
    entrypoint: &'static str,
    scheme: &'static str,
    args: &'static [&'static str],
}

const CLIENTS: [Client; 4] = [
    Client {
        name: "h1",
        entrypoint: "web",
        scheme: "http",
        args: &["--http1.1"],
    },
    Client {
        name: "h2c",
        entrypoint: "web",
        scheme: "http",
        args: &["--http2"],
    },
    Client {
        name: "tls-h1",
        entrypoint: "secure",
        scheme: "https",
        args: &["--http1.1"],
    },
    Client {
        name: "tls-h2",
        entrypoint: "secure",
        scheme: "https",
        args: &["--http2"],
    },
];

/// An HTTP/2 client for curl's `-K` list of `url` and `output` lines, all on one connection
/// (curl 7.88 fails every request after the first on a reused HTTP/2 connection): prior
/// knowledge in clear, ALPN `h2` over TLS when a CA file is given. Prints curl's `-w` line.
const H2_CLIENT: &str = r#"
import socket, ssl, sys, urllib.parse, h2.connection, h2.config, h2.events
lines = [l.split(' = ', 1)[1].strip().strip('"') for l in open(sys.argv[1])]
pairs = list(zip(lines[0::2], lines[1::2]))
encoding, ca = sys.argv[2], sys.argv[3]
first = urllib.parse.urlsplit(pairs[0][0])
sock = socket.create_connection(('127.0.0.1', first.port))
if ca:
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(['h2'])
    sock = context.wrap_socket(sock, server_hostname=first.hostname)
    assert sock.selected_alpn_protocol() == 'h2'
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding='utf-8'))
conn.initiate_connection()
conn.increment_flow_control_window(1 << 30)
sock.sendall(conn.data_to_send())
for url, output in pairs:
    parts = urllib.parse.urlsplit(url)
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(':method', 'GET'), (':path', parts.path), (':scheme', parts.scheme),
                               (':authority', parts.netloc), ('accept-encoding', encoding)], end_stream=True)
    sock.sendall(conn.data_to_send())
    status, coding, body, done = '000', '', bytearray(), False
    while not done:
        data = sock.recv(1 << 20)
        if not data:
            raise SystemExit('connection closed during ' + url)
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                status, coding = headers[':status'], headers.get('content-encoding', '')
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                done = event.stream_id == stream
        sock.sendall(conn.data_to_send())
    open(output, 'wb').write(body)
    print(url, status, '[' + coding + ']')
"#;

/// One fetch: which file it should decode to.
struct Fetch {
    url: String,
    saved: PathBuf,
    original: PathBuf,
    /// `None` when the body goes as it is (a known length under `min_length`).
    encoding: Option<&'static str>,
}

/// Fetches `paths` (each followed by every size's file name) over one connection of
/// `client` for each encoding, saving each body; checks every status is 200 and the
/// `Content-Encoding` is the one asked for (none below `min_length`). Returns the fetches.
fn fetch_all(
    weir: &Weir,
    client: &Client,
    paths: &[&str],
    sizes: &[usize],
    files: &Path,
    out: &Path,
    cert: &Path,
) -> Vec<Fetch> {
    let port = weir.addrs[client.entrypoint].port();
    let mut fetches = Vec::new();
    for encoding in ENCODINGS {
        let mut config = String::new();
        let mut these = Vec::new();
        for (turn, path) in paths.iter().enumerate() {
            // The largest body costs the most to compress: it takes the paths that read a
            // file in pieces and an upstream's body in chunks of every size.
            let largest_here = matches!(*path, "static" | "chunked");
            for &size in sizes.iter().filter(|&&s| s != LARGEST || largest_here) {
                let name = format!("body-{size}.json");
                let url = format!("{}://localhost:{port}/{path}/{name}", client.scheme);
                let saved = out.join(format!("{}-{encoding}-{turn}-{path}-{size}", client.name));
                writeln!(config, "url = \"{url}\"\noutput = \"{}\"", saved.display()).unwrap();
                these.push(Fetch {
                    url,
                    saved,
                    original: files.join(&name),
                    // Only a known length can be under `min_length`, as with nginx's gzip.
                    encoding: (size >= MIN_LENGTH || matches!(*path, "chunked" | "close"))
                        .then_some(encoding),
                });
            }
        }
        let config_path = out.join(format!("{}-{encoding}.curl", client.name));
        std::fs::write(&config_path, config).unwrap();
        let report = if client.args[0] == "--http2" {
            let tls = if client.scheme == "https" {
                cert.to_str().unwrap()
            } else {
                ""
            };
            python(H2_CLIENT, &[config_path.to_str().unwrap(), encoding, tls])
        } else {
            curl_ok(&[
                "--max-time",
                "120",
                "--cacert",
                cert.to_str().unwrap(),
                "--resolve",
                &format!("localhost:{port}:127.0.0.1"),
                "-H",
                &format!("accept-encoding: {encoding}"),
                "-w",
                "%{url_effective} %{http_code} [%header{content-encoding}]\\n",
                client.args[0],
                "-K",
                config_path.to_str().unwrap(),
            ])
        };
        let report = String::from_utf8_lossy(&report).into_owned();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), these.len(), "{report}");
        for (line, fetch) in lines.iter().zip(&these) {
            let expected = fetch.encoding.unwrap_or("");
            assert_eq!(
                *line,
                format!("{} 200 [{expected}]", fetch.url),
                "{}: {report}",
                client.name
            );
        }
        fetches.extend(these);
    }
    fetches
}

/// Decodes every saved body with Python's reference decoders and compares it with its
/// original; returns the mismatches, one line each.
fn mismatches(fetches: &[Fetch]) -> Vec<String> {
    let manifest: String = fetches
        .iter()
        .map(|f| {
            format!(
                "{}\t{}\t{}\t{}\n",
                f.saved.display(),
                f.original.display(),
                f.encoding.unwrap_or("identity"),
                f.url
            )
        })
        .collect();
    let dir = fetches[0].saved.parent().unwrap();
    let manifest_path = dir.join("manifest.tsv");
    std::fs::write(&manifest_path, manifest).unwrap();
    let script = "import sys, zlib, brotli, zstandard\n\
                  for line in open(sys.argv[1]):\n\
                  \x20   saved, original, enc, url = line.rstrip('\\n').split('\\t')\n\
                  \x20   data, want = open(saved, 'rb').read(), open(original, 'rb').read()\n\
                  \x20   try:\n\
                  \x20       if enc == 'identity': got = data\n\
                  \x20       elif enc == 'gzip':\n\
                  \x20           d = zlib.decompressobj(31); got = d.decompress(data) + d.flush()\n\
                  \x20           assert d.eof and not d.unused_data, 'trailing or truncated gzip'\n\
                  \x20       elif enc == 'br': got = brotli.decompress(data)\n\
                  \x20       else:\n\
                  \x20           d = zstandard.ZstdDecompressor().decompressobj(); got = d.decompress(data)\n\
                  \x20           assert d.eof and not d.unused_data, 'trailing or truncated zstd'\n\
                  \x20   except Exception as e:\n\
                  \x20       print(url, enc, 'does not decode:', e); continue\n\
                  \x20   if got != want:\n\
                  \x20       at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))\n\
                  \x20       print(url, enc, 'decodes to', len(got), 'bytes of', len(want), '; first difference at', at)\n";
    let printed = python(script, &[manifest_path.to_str().unwrap()]);
    String::from_utf8_lossy(&printed)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_encoder_path_and_client_delivers_bodies_byte_for_byte() {
    let dir = temp_dir("compress-matrix");
    let files = dir.join("files");
    let out = dir.join("out");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    for (i, &size) in SIZES.iter().chain([&LARGEST]).enumerate() {
        std::fs::write(
            files.join(format!("body-{size}.json")),
            varied_text(size, i as u64),
        )
        .unwrap();
    }
    let cert = make_cert(&dir, "site", &["localhost"], false);
    let location = format!(
        "root {}; expires 1h; types {{ application/json json; }}",
        files.display()
    );
    let nginx = Nginx::with_location(&location);
    let nginx_h2 = Nginx::start_h2(None, &location);
    let raw = framing_upstream(files.clone());
    let config = format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         \x20 secure: {{ address: \"127.0.0.1:0\", tls: {{ certificates: [{{ cert: \"{cert}\", key: \"{key}\" }}] }} }}\n\
         caches:\n  mem: {{ memory: 256MiB, max_object_size: 16MiB }}\n\
         \x20 disk: {{ memory: 256MiB, max_object_size: 16MiB, disk: {{ path: \"{disk}\", size: 1GiB }} }}\n\
         middlewares:\n  gz: {{ compress: {{}} }}\n  strip: {{ strip_prefix: [\"/static\", \"/h1\", \"/h2up\", \"/mem\", \"/disk\"] }}\n\
         routers:\n\
         \x20 static: {{ rule: \"PathPrefix(`/static/`)\", middlewares: [strip, gz], static: {{ root: \"{files}\" }} }}\n\
         \x20 h1: {{ rule: \"PathPrefix(`/h1/`)\", middlewares: [strip, gz], service: files }}\n\
         \x20 raw: {{ rule: \"PathPrefix(`/chunked/`) || PathPrefix(`/close/`)\", middlewares: [gz], service: raw }}\n\
         \x20 h2up: {{ rule: \"PathPrefix(`/h2up/`)\", middlewares: [strip, gz], service: files_h2 }}\n\
         \x20 mem: {{ rule: \"PathPrefix(`/mem/`)\", middlewares: [strip, gz], service: files, cache: mem }}\n\
         \x20 disk: {{ rule: \"PathPrefix(`/disk/`)\", middlewares: [strip, gz], service: files, cache: disk }}\n\
         services:\n\
         \x20 files: {{ servers: [{{ url: \"http://{nginx}\" }}] }}\n\
         \x20 files_h2: {{ protocol: h2c, servers: [{{ url: \"http://{nginx_h2}\" }}] }}\n\
         \x20 raw: {{ servers: [{{ url: \"{raw}\" }}] }}\n",
        cert = cert.cert.display(),
        key = cert.key.display(),
        disk = dir.join("disk").display(),
        files = files.display(),
        nginx = nginx.addr,
        nginx_h2 = nginx_h2.addr,
        raw = raw.url(),
    );
    let mut all = SIZES.to_vec();
    all.push(LARGEST);
    // The first run: static twice (cold, then from the open-file cache), every upstream
    // framing, the cache's filling miss then its hit (memory files from 32 KiB), and the
    // disk cache's miss, which writes the disk tier.
    let first_paths = [
        "static", "static", "h1", "chunked", "close", "h2up", "mem", "mem", "disk",
    ];
    let mut fetches = Vec::new();
    {
        let weir = Weir::start(&config);
        fetches.extend(fetch_all(
            &weir,
            &CLIENTS[0],
            &first_paths,
            &all,
            &files,
            &out,
            &cert.cert,
        ));
        // The other clients over every path, hits by now, without the largest body.
        for client in &CLIENTS[1..] {
            fetches.extend(fetch_all(
                &weir,
                client,
                &first_paths[1..8],
                &SIZES,
                &files,
                &out,
                &cert.cert,
            ));
        }
    }
    // A new process with an empty memory store: the disk cache answers from its disk tier.
    let weir = Weir::start(&config);
    for client in &CLIENTS {
        let sizes: &[usize] = if client.name == "h1" { &all } else { &SIZES };
        fetches.extend(fetch_all(
            &weir,
            client,
            &["disk"],
            sizes,
            &files,
            &out,
            &cert.cert,
        ));
    }
    let bad = mismatches(&fetches);
    assert!(
        bad.is_empty(),
        "{} of {} bodies differ:\n{}",
        bad.len(),
        fetches.len(),
        bad.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
