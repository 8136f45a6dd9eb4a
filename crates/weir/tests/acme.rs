//! Automatic HTTPS (`tls.acme`, issue 38) against Debian's `pebble`, Let's Encrypt's test CA,
//! with its validation ports pointed at weir's entrypoints on loopback: HTTP-01 (RFC 8555
//! §8.3) and TLS-ALPN-01 (RFC 8737) orders end in a certificate curl and `openssl s_client`
//! see chained to Pebble's root; a restart loads it from storage without a new order; a
//! renewal swaps it in while a connection stays open and requests keep succeeding; a CA that
//! is down leaves the placeholder served, retried with backoff and reported; a CA's refusal
//! is logged as the CA wrote it; two instances on one Redis, or one etcd, order once; a Redis
//! or an etcd that is down fails no request and delays the order until it is back; a
//! validation reaching the instance that did not order is answered from the shared answers;
//! RSA 2048 keys end to end.

mod common;
use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Orders need a few exchanges with the CA; allow for a loaded machine.
const ORDER_WAIT: Duration = Duration::from_secs(60);

/// A config with a plain entrypoint `web` on `http_port` and `secure` on `tls_port` with
/// `acme` (flow-mapping keys), both answering "hi" by a catch-all router (which HTTP-01 must
/// come before).
fn acme_config(http_port: u16, tls_port: u16, acme: &str, admin: &str) -> String {
    format!(
        "server: {{ workers: 1{admin} }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:{http_port}\" }}\n  secure:\n    address: \"127.0.0.1:{tls_port}\"\n    tls:\n      acme: {{ {acme} }}\nrouters:\n  all: {{ rule: \"PathPrefix(`/`)\", respond: {{ status: 200, body: \"hi\" }} }}\n"
    )
}

/// Pebble validating on two free ports, and weir's config on them: `acme` with Pebble's
/// directory, its listener's certificate as `ca`, a fresh `storage`, then `keys`.
struct Setup {
    pebble: Pebble,
    http_port: u16,
    tls_port: u16,
    storage: std::path::PathBuf,
    config: String,
}

fn with_pebble(validity_seconds: u64, keys: &str, admin: &str) -> Setup {
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(http_port, tls_port, validity_seconds);
    let storage = temp_dir("acme").join("acme");
    let keys = format!(
        "email: admin@example.org, directory: \"{}\", ca: \"{}\", storage: \"{}\", {keys}",
        pebble.directory,
        pebble.listener_cert.display(),
        storage.display()
    );
    let config = acme_config(http_port, tls_port, &keys, admin);
    Setup {
        pebble,
        http_port,
        tls_port,
        storage,
        config,
    }
}

fn wait_for(weir: &Weir, text: &str, count: usize, limit: Duration) -> String {
    weir.wait_for_line_within(text, count, limit)
}

/// What `openssl s_client` sees on `port` for `name`, verifying against `root`: whether the
/// chain verified, and the server's leaf certificate (PEM) with its subject line.
fn served(port: u16, name: &str, root: &Path) -> (bool, String, String) {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", name, "-CAfile"])
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .expect("openssl must be installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let verified = text.contains("Verify return code: 0 (ok)");
    let subject = text
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_string();
    let leaf = text
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END CERTIFICATE-----").next())
        .unwrap_or_default()
        .to_string();
    (verified, leaf, subject)
}

/// Waits for `name`'s certificate to be obtained (the `count`th time) and checks that a
/// handshake for it sees it, chained to `root`; its leaf (PEM).
fn obtained_and_served(weir: &Weir, count: usize, port: u16, name: &str, root: &Path) -> String {
    wait_for(
        weir,
        &format!("{name}: certificate obtained"),
        count,
        ORDER_WAIT,
    );
    let (verified, leaf, subject) = served(port, name, root);
    assert!(verified, "not chained to Pebble's root: {subject}");
    assert!(subject.contains(name), "{subject}");
    leaf
}

/// After a restart with `config`, `name`'s certificate is loaded from storage and served (the
/// same `leaf`) without a new order; the log line that says from where.
fn loaded_again_at_restart(
    config: &str,
    port: u16,
    name: &str,
    pebble: &Pebble,
    leaf: &str,
) -> String {
    let weir = Weir::start(config);
    let line = wait_for(
        &weir,
        &format!("{name}: certificate loaded from"),
        1,
        ORDER_WAIT,
    );
    let (verified, again, _) = served(port, name, &pebble.root());
    assert!(verified);
    assert_eq!(again, leaf);
    assert_eq!(pebble.issued(), 1, "a restart ordered again");
    line
}

/// The one folder in `storage`: the CA's.
fn ca_folder(storage: &Path) -> std::path::PathBuf {
    let mut entries = std::fs::read_dir(storage).unwrap();
    entries.next().unwrap().unwrap().path()
}

/// `config` listening on two other free ports (for a second instance): it, and its TLS port.
fn on_other_ports(config: &str, http_port: u16, tls_port: u16) -> (String, u16) {
    let (other_http, other_tls) = (free_port(), free_port());
    let other = config
        .replace(&format!(":{http_port}\""), &format!(":{other_http}\""))
        .replace(&format!(":{tls_port}\""), &format!(":{other_tls}\""));
    (other, other_tls)
}

#[test]
fn http_01_obtains_a_certificate_served_by_sni_and_loaded_again_at_restart() {
    let keys = "domains: [www.example.org], challenges: [http-01], http_entrypoint: web";
    let Setup {
        pebble,
        http_port,
        tls_port,
        storage,
        config,
    } = with_pebble(3600, keys, "");
    let weir = Weir::start(&config);
    // Before the order completes the name gets the placeholder, and a line says why.
    wait_for(
        &weir,
        "www.example.org: no certificate yet; entrypoint `secure` serves its default certificate",
        1,
        ORDER_WAIT,
    );
    let root = pebble.root();
    obtained_and_served(&weir, 1, tls_port, "www.example.org", &root);
    assert_eq!(
        curl_https(tls_port, "www.example.org", &root),
        (true, "hi".to_string())
    );
    // The answer was withdrawn once validated: the router has the path again.
    let answer = curl_ok(&[&format!(
        "http://127.0.0.1:{http_port}/.well-known/acme-challenge/x"
    )]);
    assert_eq!(answer, b"hi");
    // Stored for weir's user alone.
    let folder = ca_folder(&storage);
    for file in ["account.key", "www.example.org.crt", "www.example.org.key"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(folder.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    assert_eq!(pebble.issued(), 1);
    drop(weir);
    // A restart serves the stored certificate at once, without a new order.
    let weir = Weir::start(&config);
    wait_for(
        &weir,
        "www.example.org: certificate loaded from",
        1,
        ORDER_WAIT,
    );
    assert_eq!(
        curl_https(tls_port, "www.example.org", &root),
        (true, "hi".to_string())
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pebble.issued(), 1, "a restart ordered again");
    assert!(!weir.stderr().iter().any(|l| l.contains("order failed")));
}

#[test]
fn tls_alpn_01_obtains_a_certificate_and_a_renewal_swaps_in_under_load() {
    // 40 s certificates renewed 30 s before expiry: the first renewal 10 s after issuance.
    let keys = "domains: [alpn.example.org], challenges: [tls-alpn-01], renew_before: 30s";
    let admin = format!(", admin: {{ address: \"127.0.0.1:{}\" }}", free_port());
    let Setup {
        pebble,
        tls_port,
        config,
        ..
    } = with_pebble(40, keys, &admin);
    let weir = Weir::start(&config);
    let root = pebble.root();
    let first_leaf = obtained_and_served(&weir, 1, tls_port, "alpn.example.org", &root);
    // Offering `acme-tls/1` alone is a validation: with none pending, no certificate at all
    // (never the ordinary one); offered beside another protocol it is an ordinary client.
    let leaf_with_alpn = |alpn: &str| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{tls_port}")])
            .args(["-servername", "alpn.example.org", "-alpn", alpn])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("-----BEGIN CERTIFICATE-----")
    };
    assert!(!leaf_with_alpn("acme-tls/1"));
    assert!(leaf_with_alpn("h2,acme-tls/1"));
    // The admin API and the metrics tell the name's state and expiry.
    let api = curl_ok(&[&format!("http://{}/api/certificates", weir.addrs["@admin"])]);
    let api: serde_json::Value = serde_json::from_slice(&api).unwrap();
    let state = &api["acme"][0];
    assert_eq!(state["name"], "alpn.example.org");
    assert!(
        ["valid", "renewing"].contains(&state["state"].as_str().unwrap()),
        "{state}"
    );
    assert!(
        (0..=40).contains(&state["expires_in_seconds"].as_i64().unwrap()),
        "{state}"
    );
    let metrics = curl_ok(&[&format!("http://{}/metrics", weir.addrs["@admin"])]);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("weir_tls_certificate_expiry_seconds{name=\"alpn.example.org\"} "),
        "{metrics}"
    );
    // A connection opened on the first certificate, kept open through the renewal.
    let mut held = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &format!("127.0.0.1:{tls_port}"),
        ])
        .args(["-servername", "alpn.example.org"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Requests all through the renewal.
    let (stop, done, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let load = {
        let (stop, done, failed, root) = (stop.clone(), done.clone(), failed.clone(), root.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match curl_https(tls_port, "alpn.example.org", &root) {
                    (true, body) if body == "hi" => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    let second_leaf = obtained_and_served(&weir, 2, tls_port, "alpn.example.org", &root);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during the renewal"
    );
    assert!(done.load(Ordering::Relaxed) > 0);
    assert_ne!(
        first_leaf, second_leaf,
        "the renewed certificate is not served"
    );
    // The connection from before the renewal still answers.
    let mut stdin = held.stdin.take().unwrap();
    stdin
        .write_all(b"GET / HTTP/1.1\r\nHost: alpn.example.org\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    held.stdout
        .take()
        .unwrap()
        .read_to_string(&mut answer)
        .unwrap();
    let _ = held.wait();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi"),
        "{answer}"
    );
    assert!(pebble.issued() >= 2);
}

#[test]
fn a_ca_that_is_down_leaves_the_placeholder_served_and_is_retried_with_backoff() {
    let (http_port, tls_port) = (free_port(), free_port());
    let dir = temp_dir("acme-down");
    let unused = make_cert(&dir, "ca", &["127.0.0.1"], false);
    let keys = format!(
        "directory: \"https://127.0.0.1:{}/dir\", ca: \"{}\", domains: [down.example.org], challenges: [tls-alpn-01], storage: \"{}\"",
        free_port(),
        unused.cert.display(),
        dir.join("acme").display()
    );
    let admin = format!(", admin: {{ address: \"127.0.0.1:{}\" }}", free_port());
    let weir = Weir::start(&acme_config(http_port, tls_port, &keys, &admin));
    let first = wait_for(
        &weir,
        "down.example.org: order failed (attempt 1; next in 10s)",
        1,
        ORDER_WAIT,
    );
    assert!(first.contains("cannot connect"), "{first}");
    // Still serving, with the placeholder that says why it is not trusted.
    let (_, _, subject) = served(tls_port, "down.example.org", &dir.join("ca.pem"));
    assert!(subject.contains("weir ACME placeholder"), "{subject}");
    let out = curl_ok(&[
        "-k",
        "--resolve",
        &format!("down.example.org:{tls_port}:127.0.0.1"),
        &format!("https://down.example.org:{tls_port}/"),
    ]);
    assert_eq!(out, b"hi");
    let api = curl_ok(&[&format!("http://{}/api/certificates", weir.addrs["@admin"])]);
    let api: serde_json::Value = serde_json::from_slice(&api).unwrap();
    assert_eq!(api["acme"][0]["state"], "failed", "{api}");
    assert!(api["acme"][0]["last_error"]
        .as_str()
        .unwrap()
        .contains("cannot connect"));
    // The second try waits out the backoff (10 s), the third twice that.
    let started = Instant::now();
    let second = wait_for(
        &weir,
        "down.example.org: order failed (attempt 2; next in 20s)",
        1,
        ORDER_WAIT,
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "retried too soon: {second}"
    );
}

#[test]
fn a_ca_refusal_is_logged_as_the_ca_wrote_it() {
    // weir takes the address (it has an @ between two non-empty parts); Pebble refuses it
    // as RFC 8555 §7.3 lets a server refuse a contact (`invalidContact`).
    let keys = "domains: [refused.example.org], challenges: [tls-alpn-01]";
    let Setup { pebble, config, .. } = with_pebble(3600, keys, "");
    let config = config.replace("admin@example.org", "bad@@example..org");
    let weir = Weir::start(&config);
    let line = wait_for(&weir, "refused.example.org: order failed", 1, ORDER_WAIT);
    assert!(line.contains(" ERROR "), "{line}");
    assert!(
        line.contains(r#"the CA answered 400: {"detail":"contact email \"bad@@example..org\" is invalid","status":400,"type":"urn:ietf:params:acme:error:invalidContact"}"#),
        "{line}"
    );
    assert_eq!(pebble.issued(), 0);
}

#[test]
fn weir_check_warns_of_an_http_entrypoint_off_port_80() {
    let dir = temp_dir("acme-check");
    let path = dir.join("weir.yaml");
    let config = acme_config(
        8080,
        8443,
        "domains: [www.example.org], http_entrypoint: web",
        "",
    );
    std::fs::write(&path, config).unwrap();
    let out = weir_check(&path);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        format!("{}:7:60: warning: `http_entrypoint` `web` listens on port 8080, but the CA asks for HTTP-01 answers on port 80: validation succeeds only if port 80 is forwarded to it", path.display())
    );
}

#[test]
fn the_example_of_docs_acme_md_passes_weir_check() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/acme.md");
    let page = std::fs::read_to_string(page).unwrap();
    let block = page
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let path = temp_dir("acme-doc").join("weir.yaml");
    std::fs::write(&path, block).unwrap();
    let out = weir_check(&path);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn names_from_host_rules_are_ordered_at_start_and_on_reload() {
    let keys = "from_rules: true, challenges: [tls-alpn-01]";
    let Setup {
        pebble,
        tls_port,
        config,
        ..
    } = with_pebble(3600, keys, "");
    let with_rule = |host: &str| {
        format!("{config}  {host}: {{ rule: \"Host(`{host}`)\", respond: {{ status: 200, body: \"{host}\" }} }}\n")
    };
    let weir = Weir::start(&with_rule("rules.example.org"));
    let root = pebble.root();
    obtained_and_served(&weir, 1, tls_port, "rules.example.org", &root);
    // A reload whose router names another host orders that name.
    std::fs::write(weir.config_path(), with_rule("added.example.org")).unwrap();
    weir.signal("HUP");
    obtained_and_served(&weir, 1, tls_port, "added.example.org", &root);
    assert_eq!(
        curl_https(tls_port, "added.example.org", &root),
        (true, "added.example.org".to_string())
    );
    assert_eq!(pebble.issued(), 2);
}

#[test]
fn two_instances_on_one_storage_order_once_and_both_serve_the_certificate() {
    // Pebble validates on the first instance's ports; the second listens on others. Whichever
    // takes the name's lock first orders (the second's own order, if it wins, fails: Pebble
    // reaches the first, which has no answer for it; shared answers are a later step); the
    // other waits, then loads the stored result.
    let keys = "domains: [shared.example.org], challenges: [tls-alpn-01]";
    let Setup {
        pebble,
        http_port,
        tls_port,
        config,
        ..
    } = with_pebble(3600, keys, "");
    let (other_config, other_tls) = on_other_ports(&config, http_port, tls_port);
    let first = Weir::start(&config);
    let second = Weir::start(&other_config);
    let root = pebble.root();
    let leaf = obtained_and_served(&first, 1, tls_port, "shared.example.org", &root);
    let line = wait_for(
        &second,
        "shared.example.org: certificate loaded from storage (ordered by another instance)",
        1,
        ORDER_WAIT,
    );
    assert!(line.contains(" INFO "), "{line}");
    let (verified, second_leaf, _) = served(other_tls, "shared.example.org", &root);
    assert!(verified);
    assert_eq!(leaf, second_leaf);
    assert_eq!(pebble.issued(), 1);
}

/// What `openssl` prints of a PEM certificate (`x509`) or private key (`pkey`).
fn openssl_text(kind: &str, pem: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args([kind, "-noout", "-text"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl must be installed");
    child.stdin.take().unwrap().write_all(pem).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {kind} refused its input");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn rsa2048_keys_are_ordered_served_stored_and_loaded_again() {
    let keys = "domains: [rsa.example.org], challenges: [tls-alpn-01], key_type: rsa2048";
    let Setup {
        pebble,
        tls_port,
        storage,
        config,
        ..
    } = with_pebble(3600, keys, "");
    let weir = Weir::start(&config);
    let root = pebble.root();
    // Pebble checked the request's RS256 signature; the leaf it issued carries the RSA key.
    let leaf = obtained_and_served(&weir, 1, tls_port, "rsa.example.org", &root);
    let leaf_pem = format!("-----BEGIN CERTIFICATE-----{leaf}-----END CERTIFICATE-----\n");
    let leaf_text = openssl_text("x509", leaf_pem.as_bytes());
    assert!(leaf_text.contains("rsaEncryption"), "{leaf_text}");
    assert!(leaf_text.contains("Public-Key: (2048 bit)"), "{leaf_text}");
    assert_eq!(
        curl_https(tls_port, "rsa.example.org", &root),
        (true, "hi".to_string())
    );
    // Stored as PKCS#8, the form ring reads RSA keys in.
    let folder = ca_folder(&storage);
    let key_pem = std::fs::read(folder.join("rsa.example.org.key")).unwrap();
    assert!(key_pem.starts_with(b"-----BEGIN PRIVATE KEY-----"));
    let key_text = openssl_text("pkey", &key_pem);
    assert!(key_text.contains("Private-Key: (2048 bit"), "{key_text}");
    drop(weir);
    // A restart serves the stored RSA certificate without a new order.
    loaded_again_at_restart(&config, tls_port, "rsa.example.org", &pebble, &leaf);
}

/// The CA's part of the stored keys: Pebble's directory's host and port.
fn ca_name(setup: &Setup) -> String {
    setup
        .pebble
        .directory
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .replace(':', "_")
}

/// A fleet's shared ACME store: a real Redis or a real etcd.
enum Fleet {
    Redis(Redis),
    Etcd(Etcd),
}

impl Fleet {
    /// `setup`'s config with `storage` in this store, under the prefix `fleet`, instead of
    /// a folder.
    fn config(&self, setup: &Setup) -> String {
        let storage = match self {
            Fleet::Redis(redis) => format!(
                "storage: {{ redis: {{ endpoints: [\"{}\"], key_prefix: \"fleet:\" }} }}",
                redis.endpoint()
            ),
            Fleet::Etcd(etcd) => {
                let user = match etcd.user.as_deref().and_then(|u| u.split_once(':')) {
                    Some((name, password)) => format!(", username: {name}, password: {password}"),
                    None => String::new(),
                };
                format!(
                    "storage: {{ etcd: {{ endpoints: [\"{}\"], key_prefix: /fleet/{user} }} }}",
                    etcd.endpoint()
                )
            }
        };
        setup.config.replace(
            &format!("storage: \"{}\"", setup.storage.display()),
            &storage,
        )
    }

    /// The keys stored under `fleet` `acme/`, without the store's prefix, sorted.
    fn acme_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = match self {
            Fleet::Redis(redis) => redis_cli(redis.port, &["KEYS", "fleet:acme/*"])
                .lines()
                .filter_map(|k| k.strip_prefix("fleet:"))
                .map(String::from)
                .collect(),
            Fleet::Etcd(etcd) => {
                let (ok, out) = etcd.ctl(&["get", "--prefix", "--keys-only", "/fleet/acme/"]);
                assert!(ok, "etcdctl get");
                out.lines()
                    .filter_map(|k| k.strip_prefix("/fleet/"))
                    .map(String::from)
                    .collect()
            }
        };
        keys.sort();
        keys
    }

    /// How the log names it.
    fn log_name(&self) -> &str {
        match self {
            Fleet::Redis(_) => "redis 127.0.0.1:",
            Fleet::Etcd(_) => "etcd 127.0.0.1:",
        }
    }
}

/// Pebble validates on the first instance's ports; whichever instance takes the name's lock
/// in `fleet` first orders (when it is the second, the first, waiting for the lock, answers
/// from the shared answers); the other then loads the result from the store.
fn two_instances_on_one_store_order_once(fleet: Fleet) {
    let keys = "domains: [fleet.example.org], challenges: [tls-alpn-01]";
    let setup = with_pebble(3600, keys, "");
    let config = fleet.config(&setup);
    let (other_config, other_tls) = on_other_ports(&config, setup.http_port, setup.tls_port);
    let first = Weir::start(&config);
    let second = Weir::start(&other_config);
    let root = setup.pebble.root();
    let obtained = "fleet.example.org: certificate obtained";
    let started = Instant::now();
    let (orderer, loader) = loop {
        let has = |w: &Weir| w.stderr().iter().any(|l| l.contains(obtained));
        match (has(&first), has(&second)) {
            (true, _) => break (&first, &second),
            (_, true) => break (&second, &first),
            _ if started.elapsed() > ORDER_WAIT => panic!("no instance obtained it"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    wait_for(
        loader,
        "fleet.example.org: certificate loaded from storage (ordered by another instance)",
        1,
        ORDER_WAIT,
    );
    for instance in [orderer, loader] {
        assert!(!instance.stderr().iter().any(|l| l.contains("order failed")));
    }
    let (verified, leaf, _) = served(setup.tls_port, "fleet.example.org", &root);
    assert!(verified);
    let (verified, second_leaf, _) = served(other_tls, "fleet.example.org", &root);
    assert!(verified);
    assert_eq!(leaf, second_leaf);
    assert_eq!(setup.pebble.issued(), 1);
    // Kept in the store under the prefix and the CA, nothing in a folder; the lock released.
    let ca = ca_name(&setup);
    assert_eq!(
        fleet.acme_keys(),
        [
            format!("acme/{ca}/account.key"),
            format!("acme/{ca}/fleet.example.org.crt"),
            format!("acme/{ca}/fleet.example.org.key"),
        ]
    );
    assert!(!setup.storage.exists());
    // A restart loads it from the store without a new order.
    drop(first);
    let line = loaded_again_at_restart(
        &config,
        setup.tls_port,
        "fleet.example.org",
        &setup.pebble,
        &leaf,
    );
    assert!(
        line.contains(&format!("loaded from {}", fleet.log_name())),
        "{line}"
    );
}

#[test]
fn two_instances_on_one_redis_order_once_and_both_serve_the_certificate() {
    two_instances_on_one_store_order_once(Fleet::Redis(Redis::start()));
}

#[test]
fn two_instances_on_one_etcd_order_once_and_both_serve_the_certificate() {
    two_instances_on_one_store_order_once(Fleet::Etcd(Etcd::start()));
}

/// For `time`, plain and TLS requests (for `name`, whatever certificate it has) all succeed.
fn requests_keep_succeeding(setup: &Setup, name: &str, time: Duration) {
    let started = Instant::now();
    let mut served_requests = 0;
    while started.elapsed() < time {
        let url = format!("http://127.0.0.1:{}/", setup.http_port);
        assert_eq!(curl_ok(&[&url]), b"hi");
        let resolve = format!("{name}:{}:127.0.0.1", setup.tls_port);
        let url = format!("https://{name}:{}/", setup.tls_port);
        assert_eq!(curl_ok(&["-k", "--resolve", &resolve, &url]), b"hi");
        served_requests += 2;
    }
    assert!(served_requests >= 2);
}

#[test]
fn a_redis_that_hangs_mid_order_fails_no_request_and_the_order_completes_after() {
    // Frozen once the order has begun (its lock may be taken, the answer shared): the order
    // fails on Redis' timeout, the lock it could not release is released at the next try,
    // and the name is obtained once Redis answers again.
    let redis = Redis::start();
    let keys = "domains: [hung.example.org], challenges: [tls-alpn-01]";
    let setup = with_pebble(3600, keys, "");
    let fleet = Fleet::Redis(redis);
    let weir = Weir::start(&fleet.config(&setup));
    let Fleet::Redis(redis) = &fleet else {
        unreachable!()
    };
    wait_for(&weir, "hung.example.org: no certificate yet", 1, ORDER_WAIT);
    redis.pause(true);
    requests_keep_succeeding(&setup, "hung.example.org", Duration::from_secs(4));
    let line = wait_for(&weir, "hung.example.org: order failed", 1, ORDER_WAIT);
    assert!(line.contains("redis 127.0.0.1:"), "{line}");
    redis.pause(false);
    // Obtained at the next try (10 s on), not once the unreleased lock expired (10 min).
    let root = setup.pebble.root();
    obtained_and_served(&weir, 1, setup.tls_port, "hung.example.org", &root);
    let locks = redis_cli(redis.port, &["KEYS", "fleet:acme/*.lock"]);
    assert!(locks.is_empty(), "{locks}");
}

/// `fleet`, stopped before weir starts: the order fails and every request is served
/// meanwhile; started again, the order completes at the next try.
fn a_store_that_is_down_fails_no_request_and_the_order_completes_once_it_is_back(mut fleet: Fleet) {
    match &mut fleet {
        Fleet::Redis(redis) => redis.stop(),
        Fleet::Etcd(etcd) => etcd.stop(),
    }
    let keys = "domains: [late.example.org], challenges: [tls-alpn-01]";
    let setup = with_pebble(3600, keys, "");
    let weir = Weir::start(&fleet.config(&setup));
    let line = wait_for(&weir, "late.example.org: order failed", 1, ORDER_WAIT);
    assert!(line.contains(fleet.log_name()), "{line}");
    // Meanwhile every request is served (the placeholder for the name, plain HTTP as ever).
    requests_keep_succeeding(&setup, "late.example.org", Duration::from_secs(2));
    match &mut fleet {
        Fleet::Redis(redis) => redis.restart(),
        Fleet::Etcd(etcd) => etcd.restart(),
    }
    // Retried after the backoff (10 s), now with the store back.
    let root = setup.pebble.root();
    obtained_and_served(&weir, 1, setup.tls_port, "late.example.org", &root);
    assert_eq!(setup.pebble.issued(), 1);
    let stored = fleet.acme_keys();
    assert!(
        stored.iter().any(|k| k.ends_with("/late.example.org.crt")),
        "{stored:?}"
    );
    assert!(!stored.iter().any(|k| k.ends_with(".lock")), "{stored:?}");
    if let Fleet::Redis(redis) = &fleet {
        assert!(redis_cli(redis.port, &["KEYS", "weir:*"]).is_empty());
    }
}

#[test]
fn a_redis_that_is_down_fails_no_request_and_the_order_completes_once_it_is_back() {
    a_store_that_is_down_fails_no_request_and_the_order_completes_once_it_is_back(Fleet::Redis(
        Redis::start(),
    ));
}

#[test]
fn an_etcd_that_is_down_fails_no_request_and_the_order_completes_once_it_is_back() {
    a_store_that_is_down_fails_no_request_and_the_order_completes_once_it_is_back(Fleet::Etcd(
        Etcd::start(),
    ));
}

/// Active-active: instance B holds Pebble's validation ports (and orders its own name first);
/// instance A, on other ports, orders `a.example.org` by `challenge` through the same store
/// `fleet` (`field`: the start of the shared answer's name).
/// The CA's validation reaches B, which answers from the answers A shared in the store.
/// `meanwhile` is done to the store between B's order and A's start.
fn validation_reaching_the_other_instance_is_answered(
    mut fleet: Fleet,
    challenge: &str,
    field: &str,
    meanwhile: impl FnOnce(&mut Fleet),
) {
    let b_keys =
        "domains: [b.example.org], challenges: [tls-alpn-01, http-01], http_entrypoint: web";
    let setup = with_pebble(3600, b_keys, "");
    let b_config = fleet.config(&setup);
    let a_keys =
        format!("domains: [a.example.org], challenges: [{challenge}], http_entrypoint: web");
    let (a_config, a_tls) = on_other_ports(
        &b_config.replace(b_keys, &a_keys),
        setup.http_port,
        setup.tls_port,
    );
    let b = Weir::start(&b_config);
    let root = setup.pebble.root();
    obtained_and_served(&b, 1, setup.tls_port, "b.example.org", &root);
    meanwhile(&mut fleet);
    let a = Weir::start(&a_config);
    obtained_and_served(&a, 1, a_tls, "a.example.org", &root);
    // B answered, from the store; A's own ports were never asked.
    let line = wait_for(
        &b,
        &format!("answering the challenge `{field}"),
        1,
        ORDER_WAIT,
    );
    assert!(line.contains("` shared by another instance"), "{line}");
    assert_eq!(setup.pebble.issued(), 2);
    // The answer is withdrawn from the store once validated.
    let answers: Vec<String> = fleet
        .acme_keys()
        .into_iter()
        .filter(|k| k.contains("answers"))
        .collect();
    assert!(answers.is_empty(), "{answers:?}");
}

/// `validation_reaching_the_other_instance_is_answered` by `challenge`, the store left alone.
fn answered_from(fleet: Fleet, challenge: &str) {
    let field = match challenge {
        "http-01" => "http/",
        _ => "alpn/a.example.org",
    };
    validation_reaching_the_other_instance_is_answered(fleet, challenge, field, |_| {});
}

#[test]
fn a_tls_alpn_01_validation_reaching_the_other_instance_is_answered_from_redis() {
    answered_from(Fleet::Redis(Redis::start()), "tls-alpn-01");
}

#[test]
fn an_http_01_validation_reaching_the_other_instance_is_answered_from_redis() {
    answered_from(Fleet::Redis(Redis::start()), "http-01");
}

#[test]
fn a_tls_alpn_01_validation_reaching_the_other_instance_is_answered_from_etcd() {
    answered_from(Fleet::Etcd(Etcd::start()), "tls-alpn-01");
}

#[test]
fn an_http_01_validation_reaching_the_other_instance_is_answered_from_etcd() {
    answered_from(Fleet::Etcd(Etcd::start()), "http-01");
}

#[test]
fn an_etcd_with_authentication_that_forgot_its_tokens_still_shares_the_answers() {
    // B's ACME thread keeps its etcd token from tick to tick; turning authentication off and
    // on makes etcd forget every token, so B authenticates again to read A's answers.
    let mut etcd = Etcd::start();
    etcd.require_auth("s3cret");
    let forget_tokens = |fleet: &mut Fleet| {
        if let Fleet::Etcd(etcd) = fleet {
            assert!(etcd.ctl(&["auth", "disable"]).0, "auth disable");
            assert!(etcd.ctl(&["auth", "enable"]).0, "auth enable");
        }
    };
    validation_reaching_the_other_instance_is_answered(
        Fleet::Etcd(etcd),
        "http-01",
        "http/",
        forget_tokens,
    );
}

#[test]
fn a_name_locked_in_etcd_by_another_holder_is_ordered_once_its_lease_ends() {
    // Another instance holds the name's lock on its lease (put by etcdctl): weir waits, serving
    // every request, and orders the name once the lease ends (revoked here, as when a dead
    // holder's lease expires).
    let etcd = Etcd::start();
    let keys = "domains: [held.example.org], challenges: [tls-alpn-01]";
    let setup = with_pebble(3600, keys, "");
    let (ok, granted) = etcd.ctl(&["lease", "grant", "600"]);
    assert!(ok, "lease grant");
    // "lease 694d7a6b1c2d3e4f granted with TTL(600s)"
    let lease = granted.split_whitespace().nth(1).unwrap().to_string();
    let lock = format!("/fleet/acme/{}/held.example.org.lock", ca_name(&setup));
    let (ok, _) = etcd.ctl(&["put", &format!("--lease={lease}"), &lock, "other"]);
    assert!(ok, "put the lock");
    let fleet = Fleet::Etcd(etcd);
    let weir = Weir::start(&fleet.config(&setup));
    wait_for(&weir, "held.example.org: no certificate yet", 1, ORDER_WAIT);
    requests_keep_succeeding(&setup, "held.example.org", Duration::from_secs(8));
    assert_eq!(
        setup.pebble.issued(),
        0,
        "ordered while another held the lock"
    );
    let Fleet::Etcd(etcd) = &fleet else {
        unreachable!()
    };
    assert!(etcd.ctl(&["lease", "revoke", &lease]).0, "lease revoke");
    let root = setup.pebble.root();
    obtained_and_served(&weir, 1, setup.tls_port, "held.example.org", &root);
    assert_eq!(setup.pebble.issued(), 1);
    // weir's own lock went with its lease.
    let stored = fleet.acme_keys();
    assert!(!stored.iter().any(|k| k.ends_with(".lock")), "{stored:?}");
}
