/*!
Building the `reqwest` client every HTTP provider shares its settings with.

TLS is rustls with the `ring` crypto provider (no aws-lc, so no C toolchain
beyond what `ring` needs) and the platform's certificate verifier.
`reqwest` is built without a default crypto provider, so
[`install_crypto_provider`] installs `ring` as the process default once,
before the first client is built; when the application installed a provider
of its own first, that one is kept.
*/

use super::config::{HttpConfig, SetupError};
use std::sync::Once;

/// Install `ring` as rustls' process-wide crypto provider, unless one is
/// installed already. Idempotent and cheap after the first call.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: a provider is
            // installed either way.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// A client with the configuration's connect timeout. The first-byte and
/// idle timeouts are enforced per call by the transport.
pub(crate) fn build_client(config: &HttpConfig) -> Result<reqwest::Client, SetupError> {
    let url =
        reqwest::Url::parse(&config.base_url).map_err(|error| SetupError::InvalidBaseUrl {
            url: config.base_url.clone(),
            reason: error.to_string(),
        })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(SetupError::InvalidBaseUrl {
            url: config.base_url.clone(),
            reason: format!("the scheme must be http or https, not `{}`", url.scheme()),
        });
    }
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(config.timeouts.connect)
        .user_agent(concat!("skein/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(SetupError::Client)
}
