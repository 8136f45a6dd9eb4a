//! `weir-bench`: an HTTP/1.1 load generator. With `-R`, open loop for fixed-rate latency, like
//! wrk2: request i is due at `t0 + i/rate`; connection c sends requests c, c+N, c+2N, ... and
//! each latency is measured from the request's scheduled time, not its actual send time, so a
//! stalled server is charged for the requests it delayed (coordinated-omission correction).
//! Sends are paced by a 50 µs timerfd tick (see `pacer`); those that start more than 200 µs
//! after their schedule are counted as late. Without `-R`, closed loop, like wrk: each
//! connection sends its next request once the answer before it is read. With `--h3`, HTTP/3
//! over QUIC, closed loop, `-m` streams per connection (see `h3`).
#![forbid(unsafe_code)]

mod h3;
mod pacer;
mod template;

use bytes::{Buf, BufMut, BytesMut};
use clap::Parser;
use hdrhistogram::Histogram;
use rustix::net::RecvFlags;
use std::time::{Duration, Instant};
use template::Template;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use weir_proxy::codec::{parse_response, ChunkEvent, ChunkedDecoder, Framing};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "weir-bench",
    version,
    about = "HTTP load generator: open loop at a fixed rate (-R), else closed loop"
)]
struct Args {
    /// Target URL, http://HOST:PORT/PATH
    url: String,
    /// Requests per second across all connections; without it, closed loop (each connection
    /// sends as soon as its previous answer is read).
    #[arg(short = 'R', long)]
    rate: Option<f64>,
    /// Concurrent connections.
    #[arg(short, long, default_value_t = 50)]
    connections: usize,
    /// How long to send, e.g. 10s or 500ms.
    #[arg(short, long, default_value = "10s")]
    duration: String,
    /// An answer not read whole within this counts as an error, and its connection closes.
    #[arg(long, default_value = "5s")]
    timeout: String,
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,
    /// Request header `Name: value`; repeatable.
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body template with {{seq}}, {{uuid}}, {{word}}, {{timestamp}}.
    #[arg(short, long)]
    body: Option<String>,
    /// Read the body template from a file.
    #[arg(long)]
    body_file: Option<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Drop each answer's body in the kernel instead of reading it (`recv` with `MSG_TRUNC`,
    /// which TCP discards uncopied): the generator's cost per answer no longer grows with
    /// the body, so large answers measure the server rather than the client's copies.
    #[arg(long)]
    discard_body: bool,
    /// HTTP/3 over QUIC to an https:// URL, closed loop (no -R).
    #[arg(long)]
    h3: bool,
    /// With --h3: concurrent streams per connection.
    #[arg(short = 'm', long, default_value_t = 1)]
    streams: usize,
    /// With --h3: the PEM certificates the server's is checked against.
    #[arg(long)]
    cacert: Option<std::path::PathBuf>,
    /// With --h3: the TLS server name to send and check, instead of the URL's host.
    #[arg(long)]
    server_name: Option<String>,
}

/// A send this far past its schedule counts as late.
const LATE_AFTER: Duration = Duration::from_micros(200);

/// How much one read may take: a 100 KB answer in one or two reads, where wrk's 8 KB reads
/// took thirteen and made the generator, not the server, the limit.
const READ_AT_ONCE: usize = 256 * 1024;

/// A head's read when bodies are dropped: enough for any head weir's benches see.
const HEAD_READ: usize = 4096;

#[derive(Default)]
struct Tally {
    sent: u64,
    completed: u64,
    errors: u64,
    non_2xx: u64,
    late: u64,
}

fn main() {
    let args = Args::parse();
    match run(args.clone()) {
        Ok(report) => {
            if args.json {
                println!("{report}");
            } else {
                print_text(&report);
            }
        }
        Err(e) => {
            eprintln!("weir-bench: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: Args) -> Result<serde_json::Value, String> {
    let duration = parse_duration(&args.duration).ok_or("invalid --duration")?;
    let timeout = parse_duration(&args.timeout).ok_or("invalid --timeout")?;
    if args.rate.is_some_and(|r| r.is_nan() || r <= 0.0) || args.connections == 0 {
        return Err("--rate and --connections must be positive".into());
    }
    if args.h3 {
        return run_h3(&args, duration, timeout);
    }
    let rest = args
        .url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or("no address")?;
    let body = body_template(&args)?;
    // A body without variables is rendered once, not per request.
    let fixed_body = body.as_ref().filter(|t| t.is_constant()).map(|t| {
        let mut b = Vec::new();
        t.render(0, &mut b);
        b
    });
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", args.method);
    for h in &args.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    let plan = Plan {
        addr,
        head,
        body,
        fixed_body,
        rate: args.rate,
        connections: args.connections,
        duration,
        head_request: args.method.eq_ignore_ascii_case("HEAD"),
        discard_body: args.discard_body,
        timeout,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (hist, tally, elapsed) = rt.block_on(drive(plan))?;
    Ok(report(&args, &hist, &tally, elapsed))
}

/// The `--h3` run: HTTP/3 to an https:// URL, `-c` connections x `-m` streams, closed loop.
fn run_h3(args: &Args, duration: Duration, timeout: Duration) -> Result<serde_json::Value, String> {
    if args.rate.is_some() || args.streams == 0 {
        return Err("--h3 runs closed loop (no -R) with at least one stream".into());
    }
    let cacert = args.cacert.as_ref().ok_or("--h3 needs --cacert")?;
    let uri: http::Uri = args.url.parse().map_err(|e| format!("{}: {e}", args.url))?;
    let authority = match (uri.scheme_str(), uri.authority()) {
        (Some("https"), Some(authority)) => authority.clone(),
        _ => return Err("--h3 needs an https:// URL".into()),
    };
    let port = authority.port_u16().unwrap_or(443);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(authority.host(), port))
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or("no address")?;
    let mut headers = http::HeaderMap::new();
    for h in &args.headers {
        let (name, value) = h.split_once(':').ok_or_else(|| format!("bad header {h}"))?;
        let name =
            http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| e.to_string())?;
        let value = http::HeaderValue::from_str(value.trim()).map_err(|e| e.to_string())?;
        headers.append(name, value);
    }
    let body = body_template(args)?;
    let fixed_body = body.as_ref().filter(|t| t.is_constant()).map(|t| {
        let mut b = Vec::new();
        t.render(0, &mut b);
        bytes::Bytes::from(b)
    });
    let plan = h3::H3Plan {
        addr,
        server_name: match &args.server_name {
            Some(name) => name.clone(),
            None => authority.host().trim_matches(['[', ']']).to_string(),
        },
        uri,
        method: http::Method::from_bytes(args.method.as_bytes()).map_err(|e| e.to_string())?,
        headers,
        body,
        fixed_body,
        connections: args.connections,
        streams: args.streams,
        duration,
        timeout,
    };
    let config = h3::client_config(cacert)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (hist, tally, elapsed) = rt.block_on(h3::drive(plan, config))?;
    let mut report = report(args, &hist, &tally, elapsed);
    report["protocol"] = "h3".into();
    report["streams"] = args.streams.into();
    Ok(report)
}

/// The request body template, from `--body` or `--body-file`.
fn body_template(args: &Args) -> Result<Option<Template>, String> {
    let body_text = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(f)) => {
            Some(std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?)
        }
        _ => None,
    };
    body_text.map(|t| Template::parse(&t)).transpose()
}

/// The JSON report of a run.
fn report(
    args: &Args,
    hist: &Histogram<u64>,
    tally: &Tally,
    elapsed: Duration,
) -> serde_json::Value {
    let p = |q: f64| hist.value_at_quantile(q);
    serde_json::json!({
        "target": args.url,
        "rate": args.rate,
        "connections": args.connections,
        "duration_s": elapsed.as_secs_f64(),
        "sent": tally.sent,
        "completed": tally.completed,
        "errors": tally.errors,
        "non_2xx": tally.non_2xx,
        "late_sends": tally.late,
        "discard_body": args.discard_body,
        "achieved_rate": tally.completed as f64 / elapsed.as_secs_f64(),
        "latency_us": {
            "p50": p(0.50), "p90": p(0.90), "p99": p(0.99), "p999": p(0.999),
            "max": hist.max(), "mean": hist.mean(),
        },
    })
}

struct Plan {
    addr: std::net::SocketAddr,
    head: String,
    body: Option<Template>,
    fixed_body: Option<Vec<u8>>,
    /// Requests per second across all connections; `None`: closed loop.
    rate: Option<f64>,
    connections: usize,
    duration: Duration,
    head_request: bool,
    discard_body: bool,
    /// How long one exchange may take.
    timeout: Duration,
}

async fn drive(plan: Plan) -> Result<(Histogram<u64>, Tally, Duration), String> {
    let plan = std::rc::Rc::new(plan);
    let t0 = Instant::now() + Duration::from_millis(50);
    let local = tokio::task::LocalSet::new();
    let pacer = pacer::Pacer::new(plan.connections);
    let ticking = plan
        .rate
        .is_some()
        .then(|| local.spawn_local(pacer.clone().run()));
    let mut handles = Vec::new();
    for c in 0..plan.connections {
        let plan = plan.clone();
        handles.push(local.spawn_local(connection(plan, pacer.clone(), c, t0)));
    }
    let results = local
        .run_until(async {
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await);
            }
            if let Some(ticking) = ticking {
                ticking.abort();
            }
            out
        })
        .await;
    let elapsed = t0.elapsed();
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut tally = Tally::default();
    for r in results {
        let (h, t) = r.map_err(|e| e.to_string())?;
        hist.add(&h).map_err(|e| e.to_string())?;
        tally.sent += t.sent;
        tally.completed += t.completed;
        tally.errors += t.errors;
        tally.non_2xx += t.non_2xx;
        tally.late += t.late;
    }
    Ok((hist, tally, elapsed))
}

async fn connection(
    plan: std::rc::Rc<Plan>,
    pacer: std::rc::Rc<pacer::Pacer>,
    c: usize,
    t0: Instant,
) -> (Histogram<u64>, Tally) {
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut tally = Tally::default();
    let mut conn: Option<(TcpStream, BytesMut)> = None;
    let mut request = Vec::with_capacity(1024);
    // Never written: the kernel drops what a MSG_TRUNC read names (untouched pages, no RSS).
    let mut scratch = if plan.discard_body {
        vec![0u8; READ_AT_ONCE]
    } else {
        Vec::new()
    };
    let n = plan.connections as u64;
    let end = t0 + plan.duration;
    let mut i = c as u64;
    if plan.rate.is_none() {
        tokio::time::sleep_until(t0.into()).await;
    }
    loop {
        let measured_from = match plan.rate {
            Some(rate) => {
                let due = t0 + Duration::from_secs_f64(i as f64 / rate);
                if due >= end {
                    break;
                }
                pacer.until(c, due).await;
                let sent_at = Instant::now();
                if sent_at.saturating_duration_since(due) > LATE_AFTER {
                    tally.late += 1;
                }
                // Late sends are charged from their schedule (coordinated omission); early
                // ones from when they actually left.
                sent_at.min(due)
            }
            None => {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                now
            }
        };
        request.clear();
        request.extend_from_slice(plan.head.as_bytes());
        if let Some(body) = &plan.body {
            let rendered;
            let b = match &plan.fixed_body {
                Some(fixed) => fixed,
                None => {
                    let mut fresh = Vec::new();
                    body.render(i, &mut fresh);
                    rendered = fresh;
                    &rendered
                }
            };
            request.extend_from_slice(format!("Content-Length: {}\r\n\r\n", b.len()).as_bytes());
            request.extend_from_slice(b);
        } else {
            request.extend_from_slice(b"\r\n");
        }
        tally.sent += 1;
        if conn.is_none() {
            conn = TcpStream::connect(plan.addr).await.ok().map(|s| {
                let _ = s.set_nodelay(true);
                (s, BytesMut::with_capacity(READ_AT_ONCE))
            });
        }
        let outcome = match conn.as_mut() {
            Some((io, buf)) => {
                let discard = plan.discard_body.then_some(&mut scratch[..]);
                let exchanged = exchange(io, buf, &request, plan.head_request, discard);
                tokio::time::timeout(plan.timeout, exchanged)
                    .await
                    .unwrap_or(Err(()))
            }
            None => Err(()),
        };
        match outcome {
            Ok((status, keep)) => {
                tally.completed += 1;
                if !(200..300).contains(&status) {
                    tally.non_2xx += 1;
                }
                let micros = measured_from.elapsed().as_micros() as u64;
                let _ = hist.record(micros.max(1));
                if !keep {
                    conn = None;
                }
            }
            Err(()) => {
                tally.errors += 1;
                conn = None;
            }
        }
        i += n;
    }
    (hist, tally)
}

/// Sends one request and reads its response; returns the status and whether to keep the
/// connection. With `discard`, a body of declared length is dropped in the kernel past what
/// the head's read brought.
async fn exchange(
    io: &mut TcpStream,
    buf: &mut BytesMut,
    request: &[u8],
    head_request: bool,
    mut discard: Option<&mut [u8]>,
) -> Result<(u16, bool), ()> {
    io.write_all(request).await.map_err(|_| ())?;
    let resp = loop {
        if let Some(r) = parse_response(buf, head_request).map_err(|_| ())? {
            if (100..200).contains(&r.status) {
                continue;
            }
            break r;
        }
        // When bodies are dropped, a head is read in small steps, so that little of the body
        // is copied with it.
        let most = if discard.is_some() {
            HEAD_READ
        } else {
            READ_AT_ONCE
        };
        read_most(io, buf, most).await?;
    };
    match resp.framing {
        Framing::None => {}
        Framing::Length(n) => {
            let mut left = n as usize;
            loop {
                let take = left.min(buf.len());
                buf.advance(take);
                left -= take;
                if left == 0 {
                    break;
                }
                match discard.as_deref_mut() {
                    Some(scratch) if buf.is_empty() => left -= drop_body(io, scratch, left).await?,
                    _ => read_more(io, buf).await?,
                }
            }
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            loop {
                let (event, used) = decoder.decode(buf).map_err(|_| ())?;
                buf.advance(used);
                match event {
                    ChunkEvent::End(..) => break,
                    ChunkEvent::Data(..) => {}
                    ChunkEvent::NeedMore => read_more(io, buf).await?,
                }
            }
        }
        Framing::UntilClose => {
            while read_more(io, buf).await.is_ok() {
                buf.clear();
            }
            return Ok((resp.status, false));
        }
    }
    Ok((resp.status, resp.keep_alive))
}

/// Drops up to `left` bytes of the stream in the kernel: `recv` with `MSG_TRUNC`, which TCP
/// discards without copying into `scratch`. Returns how many went.
async fn drop_body(io: &TcpStream, scratch: &mut [u8], left: usize) -> Result<usize, ()> {
    let want = left.min(scratch.len());
    loop {
        io.readable().await.map_err(|_| ())?;
        let dropped = io.try_io(Interest::READABLE, || {
            rustix::net::recv(io, &mut scratch[..want], RecvFlags::TRUNC)
                .map(|(_, received)| received)
                .map_err(std::io::Error::from)
        });
        match dropped {
            Ok(0) => return Err(()),
            Ok(n) => return Ok(n.min(want)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(()),
        }
    }
}

async fn read_more(io: &mut TcpStream, buf: &mut BytesMut) -> Result<(), ()> {
    read_most(io, buf, READ_AT_ONCE).await
}

/// Reads at most `most` bytes into `buf`.
async fn read_most(io: &mut TcpStream, buf: &mut BytesMut, most: usize) -> Result<(), ()> {
    if buf.capacity() - buf.len() < READ_AT_ONCE / 2 {
        buf.reserve(READ_AT_ONCE);
    }
    match io.read_buf(&mut (&mut *buf).limit(most)).await {
        Ok(0) | Err(_) => Err(()),
        Ok(_) => Ok(()),
    }
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (num, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let v: f64 = num.parse().ok()?;
    (v > 0.0).then(|| Duration::from_secs_f64(v * scale))
}

fn print_text(r: &serde_json::Value) {
    let l = &r["latency_us"];
    let pace = match r["rate"].as_f64() {
        Some(rate) => format!("at {rate} req/s"),
        None => "closed loop".to_string(),
    };
    let streams = match r["streams"].as_u64() {
        Some(m) => format!(" x {m} HTTP/3 streams"),
        None => String::new(),
    };
    println!(
        "{} {pace} over {} connections{streams} for {:.1}s",
        r["target"],
        r["connections"],
        r["duration_s"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  sent {}  completed {}  errors {}  non-2xx {}  late sends {}  achieved {:.0} req/s",
        r["sent"],
        r["completed"],
        r["errors"],
        r["non_2xx"],
        r["late_sends"],
        r["achieved_rate"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  latency (us, from schedule when paced): p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        l["p50"], l["p90"], l["p99"], l["p999"], l["max"]
    );
}
