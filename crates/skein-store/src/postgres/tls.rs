/*!
TLS for PostgreSQL connections, with rustls (ring), following libpq's
`sslmode`s:

- `disable`: plain TCP only;
- `prefer` (the default): TLS when the server offers it, plain otherwise;
- `require`: TLS or nothing;
- `verify-ca`: TLS, and the certificate must be signed by a trusted
  authority;
- `verify-full`: that, and it must name the host the URL connects to.

As with libpq, `prefer` and `require` encrypt without checking who the
server is (any certificate is accepted: they stop eavesdropping, not a
man in the middle), and `require` with an `sslrootcert` behaves as
`verify-ca`. The trusted authorities are the system's plus the URL's
`sslrootcert` file, loaded only for the verifying modes.

The client negotiates TLS itself (`SSLRequest`, falling back to plain for
`prefer`); this module gives it the rustls configuration and turns its
failures into [`TlsProblem`]s.
*/

use crate::error::{Result, StoreError, TlsProblem};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much TLS a connection needs (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ));
            }
        })
    }
}

impl SslMode {
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The negotiation the client runs: whether it may fall back to plain.
    pub fn client_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }

    /// libpq's rule: `require` with a root certificate file verifies the
    /// authority, as `verify-ca` does.
    pub fn with_root_file(self, has_root_file: bool) -> SslMode {
        match self {
            SslMode::Require if has_root_file => SslMode::VerifyCa,
            mode => mode,
        }
    }
}

/// The TLS connector for `mode`, trusting the system's authorities and
/// those in `root_file` when the mode verifies certificates.
pub(crate) fn connector(
    mode: SslMode,
    root_file: Option<&Path>,
    location: &str,
) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bad = |reason: String| StoreError::BadUrl {
        location: location.to_string(),
        reason,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(AcceptAny {
            provider: provider.clone(),
        }),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(trusted_roots(root_file).map_err(bad)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|error| bad(format!("cannot verify certificates: {error}")))?;
            Arc::new(Verify {
                webpki,
                check_host: mode == SslMode::VerifyFull,
            })
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| bad(format!("TLS configuration: {error}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The system's authorities plus those in `root_file`.
fn trusted_roots(root_file: Option<&Path>) -> std::result::Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    // Unreadable system certificates are skipped, as libpq's OpenSSL does;
    // what is left may still be enough (or `sslrootcert` is).
    let system = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = root_file {
        let shown = path.display();
        let certificates = CertificateDer::pem_file_iter(path)
            .map_err(|error| format!("sslrootcert `{shown}`: {error}"))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|error| format!("sslrootcert `{shown}`: {error}"))?;
        if certificates.is_empty() {
            return Err(format!("sslrootcert `{shown}` holds no PEM certificate"));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|error| format!("sslrootcert `{shown}`: {error}"))?;
        }
    }
    if roots.is_empty() {
        return Err("no trusted certificate authority: the system has none; \
                    give one with sslrootcert=PATH"
            .to_string());
    }
    Ok(roots)
}

/// `verify-ca` and `verify-full`: the chain must lead to a trusted
/// authority; `verify-full` also checks the host name.
#[derive(Debug)]
struct Verify {
    webpki: Arc<WebPkiServerVerifier>,
    check_host: bool,
}

impl ServerCertVerifier for Verify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // The chain is checked before the name, so a name error means
            // the chain was good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_host => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate is accepted (libpq's meaning of
/// these modes); the handshake's signatures are still checked, so the
/// server holds the key of the certificate it shows.
#[derive(Debug)]
struct AcceptAny {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS problem behind a failed connection attempt, if it was one.
pub(crate) fn problem(error: &tokio_postgres::Error, mode: SslMode) -> Option<TlsProblem> {
    if mode == SslMode::Disable {
        let db = error.as_db_error()?;
        // The server's pg_hba.conf has `hostssl` lines only: its message
        // ends "no encryption".
        return (*db.code() == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            && db.message().contains("no encryption"))
        .then(|| TlsProblem::RequiredByServer {
            server: db.message().to_string(),
        });
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        // tokio-rustls wraps rustls's error in an io::Error, whose
        // `source()` skips it: look inside.
        let tls = cause.downcast_ref::<rustls::Error>().or_else(|| {
            cause
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(match tls {
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                    expected,
                    presented,
                }) => TlsProblem::WrongHost {
                    expected: expected.to_str().into_owned(),
                    // webpki shows names as `DnsName("host")`: keep the host.
                    presented: presented
                        .iter()
                        .map(|name| {
                            name.strip_prefix("DnsName(\"")
                                .and_then(|name| name.strip_suffix("\")"))
                                .unwrap_or(name)
                                .to_string()
                        })
                        .collect(),
                },
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
                    TlsProblem::WrongHost {
                        expected: "the URL's host".to_string(),
                        presented: Vec::new(),
                    }
                }
                rustls::Error::InvalidCertificate(certificate) => TlsProblem::Untrusted {
                    reason: format!("{certificate:?}"),
                },
                other => TlsProblem::Handshake {
                    reason: other.to_string(),
                },
            });
        }
        // The client's own words when the server answers `SSLRequest`
        // with no.
        if cause.source().is_none() && cause.to_string() == "server does not support TLS" {
            return Some(TlsProblem::NotOffered);
        }
        source = cause.source();
    }
    None
}
