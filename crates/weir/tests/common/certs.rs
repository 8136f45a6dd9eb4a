//! Self-signed certificates for TLS tests.

use super::*;

pub struct CertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// A self-signed ECDSA P-256 certificate for `names` (it is its own CA for the clients).
pub fn make_cert(dir: &std::path::Path, tag: &str, names: &[&str], expired: bool) -> CertFiles {
    let validity = expired.then_some((1_577_836_800, 1_609_459_200));
    make_cert_valid(dir, tag, names, validity)
}

/// As `make_cert`, valid between two Unix times (`None`: rcgen's default, far ahead).
pub fn make_cert_valid(
    dir: &std::path::Path,
    tag: &str,
    names: &[&str],
    validity: Option<(i64, i64)>,
) -> CertFiles {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0]);
    if let Some((not_before, not_after)) = validity {
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).unwrap();
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let files = CertFiles {
        cert: dir.join(format!("{tag}.pem")),
        key: dir.join(format!("{tag}.key")),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

/// A TLS 1.3 client configuration (rustls) that trusts only `cert` and offers `alpn`.
pub fn tls13_client(cert: &std::path::Path, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls::pki_types::CertificateDer::from_pem_file(cert).unwrap();
    roots.add(der).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(client)
}
