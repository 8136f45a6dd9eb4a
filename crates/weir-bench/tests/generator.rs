//! The generator end to end: against a real TCP server it sends exactly the scheduled number
//! of requests at the rate asked, with templated bodies that vary per request; closed loop, it
//! keeps every connection busy and, dropping bodies in the kernel, stays in step with the
//! answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// A minimal keep-alive HTTP server recording each request's body; it answers `answer_len`
/// bytes of a pattern that shows a response read out of step.
fn server(answer_len: usize) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let seen = seen.clone();
            let answer: Vec<u8> =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {answer_len}\r\n\r\n")
                    .into_bytes()
                    .into_iter()
                    .chain((0..answer_len).map(|i| b"HTTP/1.1 500 x\r\n"[i % 16]))
                    .collect();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        line.clear();
                        reader.read_line(&mut line).unwrap();
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    seen.lock().unwrap().push(String::from_utf8(body).unwrap());
                    if writer.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, bodies)
}

/// Runs weir-bench with `args` (`--json` added); its report, once it exits successfully.
fn report_of(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn sends_the_schedule_with_templated_bodies() {
    let (addr, bodies) = server(2);
    let url = format!("http://{addr}/bulk");
    let report = report_of(&[
        "-R",
        "400",
        "-c",
        "4",
        "-d",
        "1s",
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--body",
        r#"{"n":{{seq}},"id":"{{uuid}}","w":"{{word}}","t":{{timestamp}}}"#,
        &url,
    ]);
    assert_eq!(report["sent"], 400);
    assert_eq!(report["completed"], 400);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["non_2xx"], 0);
    let rate = report["achieved_rate"].as_f64().unwrap();
    assert!((350.0..=420.0).contains(&rate), "{rate}");
    let latency = &report["latency_us"];
    assert!(latency["p50"].as_u64().unwrap() <= latency["p99"].as_u64().unwrap());
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 400);
    let docs: Vec<serde_json::Value> = bodies
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect();
    let mut seqs: Vec<u64> = docs.iter().map(|d| d["n"].as_u64().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..400).collect::<Vec<u64>>());
    let ids: std::collections::HashSet<&str> =
        docs.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 400);
}

#[test]
fn closed_loop_dropping_large_bodies_stays_in_step() {
    let (addr, bodies) = server(300_000);
    let url = format!("http://{addr}/big");
    let report = report_of(&["-c", "3", "-d", "700ms", "--discard-body", &url]);
    assert!(report["rate"].is_null());
    assert_eq!(report["discard_body"], true);
    // A body dropped short or long would leave the next head at a pattern byte: a parse
    // error (counted) or a 500 (non-2xx).
    assert_eq!(report["errors"], 0);
    assert_eq!(report["non_2xx"], 0);
    let completed = report["completed"].as_u64().unwrap();
    assert!(completed > 30, "{completed}");
    assert_eq!(report["sent"], completed);
    assert_eq!(bodies.lock().unwrap().len() as u64, completed);
}
