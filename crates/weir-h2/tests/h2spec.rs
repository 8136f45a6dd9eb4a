//! h2spec (github.com/summerwind/h2spec, installed by scripts/test with `go install`) run
//! against weir-h2 as a server on a real socket: every case of its generic, HTTP/2 and HPACK suites, strict ones included.

mod h2spec_run;
mod support;

use support::Server;
use weir_h2::Config;

#[test]
fn h2spec_every_case_passes() {
    let server = Server::start(Config::default());
    let report = h2spec_run::run(server.addr.port());
    let summary = &report.summary;
    assert!(
        report.success && summary.contains(", 0 failed"),
        "{summary}\n{}",
        report.text
    );
    assert!(summary.starts_with("146 tests, 146 passed"), "{summary}");
    println!("h2spec: {summary}");
}
