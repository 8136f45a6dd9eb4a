//! TLS settings, built when the configuration is compiled. Server side: a rustls config per TLS
//! entrypoint from its certificate files (each checked on load: readable, the key matching the
//! certificate, valid today), the certificate chosen by SNI (exact name, then wildcard, else
//! the default), ALPN, the minimum version, session resumption by IDs and tickets. Client side
//! (https:// upstreams): verification against the system roots or a given CA, the name to
//! verify, an optional client certificate. Crypto provider: ring (builds with a C compiler
//! alone; aws-lc-rs needs cmake).

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use weir_config::{CertificateFiles, EntrypointTls, TlsVersion, UpstreamProtocol, UpstreamTls};

/// A TLS entrypoint's compiled settings.
#[derive(Clone)]
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub handshake_timeout: Duration,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the server config; errors read `LINE:COLUMN: message` (the config position of the
/// certificate concerned).
pub fn server_tls(tls: &EntrypointTls) -> Result<ServerTls, String> {
    let provider = provider();
    let mut resolver = SniResolver::default();
    for files in &tls.certificates {
        let loaded = load_certificate(files, &provider)?;
        resolver.add(loaded);
    }
    if let Some(files) = &tls.default_certificate {
        resolver.default = Some(load_certificate(files, &provider)?.key);
    }
    if let (None, Some(acme)) = (&resolver.default, &tls.acme) {
        resolver.default = Some(super::acme::placeholder_certificate(
            &acme.domains,
            &provider,
        )?);
    }
    if resolver.default.is_none() {
        return Err(format!(
            "{}:{}: a TLS entrypoint needs at least one certificate",
            tls.pos.line, tls.pos.column
        ));
    }
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
    };
    // ACME entrypoints alone pay for the lookups of obtained certificates and answers.
    let resolver: Arc<dyn ResolvesServerCert> = match &tls.acme {
        Some(_) => Arc::new(super::acme::AcmeResolver { files: resolver }),
        None => Arc::new(resolver),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("{}:{}: {e}", tls.pos.line, tls.pos.column))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = tls.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let alpn_challenge = weir_config::AcmeChallenge::TlsAlpn01;
    if tls
        .acme
        .as_ref()
        .is_some_and(|a| a.challenges.contains(&alpn_challenge))
    {
        // Without it in the list rustls refuses a client that offers only `acme-tls/1`.
        config
            .alpn_protocols
            .push(super::acme::ACME_TLS_ALPN.to_vec());
    }
    config.session_storage = ServerSessionMemoryCache::new(16 * 1024);
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| format!("{}:{}: session tickets: {e}", tls.pos.line, tls.pos.column))?;
    Ok(ServerTls {
        config: Arc::new(config),
        handshake_timeout: tls.handshake_timeout,
    })
}

/// The error of every entrypoint certificate that cannot be served, and of every service's
/// CA file or client certificate that cannot be used (the first of each service), each as
/// `LINE:COLUMN: message`: what `weir check` lists, where compiling stops at the first.
pub fn certificate_errors(config: &weir_config::Config) -> Vec<String> {
    let provider = provider();
    let entrypoints = config
        .entrypoints
        .iter()
        .filter_map(|ep| ep.tls.as_ref())
        .flat_map(|tls| tls.certificates.iter().chain(&tls.default_certificate))
        .filter_map(|files| load_certificate(files, &provider).err());
    // Only services that name files: the system's roots are not read here.
    let services = config
        .services
        .iter()
        .filter(|svc| svc.tls.ca.is_some() || svc.tls.certificate.is_some())
        .filter_map(|svc| client_config(&svc.tls, svc.protocol).err());
    entrypoints.chain(services).collect()
}

struct LoadedCertificate {
    key: Arc<CertifiedKey>,
    /// The DNS names the leaf certificate is for, lowercased (`*.example.com` for wildcards).
    names: Vec<String>,
}

/// Reads a certificate chain and its key, and checks that they belong together and that the
/// leaf is valid now.
fn load_certificate(
    files: &CertificateFiles,
    provider: &CryptoProvider,
) -> Result<LoadedCertificate, String> {
    let at = format!("{}:{}", files.pos.line, files.pos.column);
    let cert_path = files.cert.display();
    let key_path = files.key.display();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("{at}: cannot read certificate file {cert_path}: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err(format!("{at}: no certificate in {cert_path}"));
    };
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{at}: cannot read private key file {key_path}: {e}"))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{at}: unusable private key in {key_path}: {e}"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("{at}: cannot parse the certificate in {cert_path}: {e}"))?;
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    if validity.not_after < now {
        return Err(format!(
            "{at}: the certificate in {cert_path} expired on {}",
            validity.not_after
        ));
    }
    if validity.not_before > now {
        return Err(format!(
            "{at}: the certificate in {cert_path} is not valid before {}",
            validity.not_before
        ));
    }
    let names = certificate_names(&parsed);
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| {
        format!("{at}: the private key in {key_path} does not match the certificate in {cert_path}")
    })?;
    Ok(LoadedCertificate {
        key: Arc::new(key),
        names,
    })
}

/// A certificate file's leaf, as the admin API shows it.
#[derive(Debug, Clone)]
pub struct CertificateInfo {
    /// Its DNS names (the common name when it has none).
    pub names: Vec<String>,
    pub issuer: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

/// Reads the first certificate of a PEM file.
pub fn describe_certificate(path: &std::path::Path) -> Result<CertificateInfo, String> {
    let shown = path.display();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let leaf = chain
        .first()
        .ok_or_else(|| format!("no certificate in {shown}"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("cannot parse the certificate in {shown}: {e}"))?;
    let validity = parsed.validity();
    Ok(CertificateInfo {
        names: certificate_names(&parsed),
        issuer: parsed.issuer().to_string(),
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

/// A certificate's DNS names, lowercased; its subject's common name when it has none (as older
/// certificates carry it).
fn certificate_names(parsed: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        if let Some(cn) = parsed.subject().iter_common_name().next() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.to_ascii_lowercase());
            }
        }
    }
    names
}

/// Picks the certificate for a handshake from the client's SNI: an exact name first, then a
/// wildcard for the name's parent domain, else the default (the first certificate, or
/// `default_certificate`). Names are matched lowercased.
#[derive(Debug, Default)]
pub(crate) struct SniResolver {
    pub(crate) exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl SniResolver {
    fn add(&mut self, loaded: LoadedCertificate) {
        for name in &loaded.names {
            let table = match name.strip_prefix("*.") {
                Some(parent) => self.wildcard.entry(parent.to_string()),
                None => self.exact.entry(name.clone()),
            };
            // The first certificate listed for a name wins.
            table.or_insert_with(|| loaded.key.clone());
        }
        self.default.get_or_insert(loaded.key);
    }

    pub(crate) fn pick(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = server_name else {
            return self.default.clone();
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return Some(key.clone());
        }
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(key) = self.wildcard.get(parent) {
                return Some(key.clone());
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// How weir speaks TLS to one https:// server.
#[derive(Debug, Clone)]
pub struct UpstreamTlsTarget {
    pub config: Arc<rustls::ClientConfig>,
    /// Sent as SNI (when a DNS name) and verified against the server's certificate.
    pub name: rustls::pki_types::ServerName<'static>,
}

/// The client config for a service's https:// servers; errors read `LINE:COLUMN: message`.
pub fn client_config(
    tls: &UpstreamTls,
    protocol: UpstreamProtocol,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let at = format!("{}:{}", tls.pos.line, tls.pos.column);
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("{at}: {e}"))?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider.clone())))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.ca {
            Some(ca) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
                    .and_then(|certs| certs.collect())
                    .map_err(|e| format!("{at}: cannot read CA file {}: {e}", ca.display()))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!(
                        "{at}: no usable CA certificate in {}",
                        ca.display()
                    ));
                }
            }
            None => {
                let system = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(system.certs);
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match &tls.certificate {
        Some(files) => {
            // Read and check the pair (key matches, valid today) like a server certificate.
            let loaded = load_certificate(files, &provider)?;
            builder
                .with_client_auth_cert(loaded.key.cert.clone(), load_key(files)?)
                .map_err(|e| format!("{}:{}: {e}", files.pos.line, files.pos.column))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match protocol {
        UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
        _ => vec![b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
}

/// The private key of a pair, for APIs that take the key itself.
fn load_key(files: &CertificateFiles) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "{}:{}: cannot read private key file {}: {e}",
            files.pos.line,
            files.pos.column,
            files.key.display()
        )
    })
}

/// The name to verify for a store's `host:port` endpoint (`[v6]:port` too): `server_name` when
/// set, else the endpoint's host.
pub fn endpoint_server_name(
    tls: &UpstreamTls,
    endpoint: &str,
) -> Result<rustls::pki_types::ServerName<'static>, String> {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(host, _)| host);
    server_name(tls, host.trim_start_matches('[').trim_end_matches(']'))
}

/// The name to verify for a server: `server_name` when set, else the URL's host.
pub fn server_name(
    tls: &UpstreamTls,
    host: &str,
) -> Result<rustls::pki_types::ServerName<'static>, String> {
    let name = tls.server_name.as_deref().unwrap_or(host);
    rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|_| {
        format!(
            "{}:{}: `{name}` is not a server name to verify",
            tls.pos.line, tls.pos.column
        )
    })
}

/// `insecure_skip_verify: true`: any certificate is accepted (signatures are still checked,
/// so the connection is encrypted to whoever answered).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
