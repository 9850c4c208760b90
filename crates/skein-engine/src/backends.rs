/*!
Providers for configured backends. A backend's provider is built once and
shared; the credential is resolved for every execution (never stored) and,
for keys read from the environment, re-read by the provider on every call.
A key passed explicitly with a request gets a provider of its own that is
dropped with the run.
*/

use crate::config::{BackendDef, CredentialSource, Profile};
use crate::error::{EngineError, Result};
use skein_core::Provider;
use skein_providers::{Credential, Secret};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A built provider's key: its backend and the variable its key comes from.
type ProviderKey = (String, Option<String>);

/// Built providers, by backend and credential variable.
#[derive(Default)]
pub(crate) struct Providers {
    built: Mutex<HashMap<ProviderKey, Arc<dyn Provider>>>,
    /// Providers set in code, which win over the configuration.
    overrides: HashMap<String, Arc<dyn Provider>>,
}

/// The credential an execution uses.
pub(crate) enum ResolvedCredential {
    None,
    /// Re-read from this variable on every call (it was set when resolved).
    Env(String),
    Explicit(Secret),
}

impl Providers {
    pub(crate) fn set_override(&mut self, backend: String, provider: Arc<dyn Provider>) {
        self.overrides.insert(backend, provider);
    }

    /// The credential for one execution under `profile`, checked now.
    pub(crate) fn credential(
        &self,
        profile: &Profile,
        backend: &BackendDef,
        explicit: Option<&Secret>,
    ) -> Result<ResolvedCredential> {
        if let Some(secret) = explicit {
            return Ok(ResolvedCredential::Explicit(secret.clone()));
        }
        let variable = match &profile.credential {
            CredentialSource::None => return Ok(ResolvedCredential::None),
            CredentialSource::Explicit => {
                return Err(EngineError::CredentialRequired {
                    profile: profile.name.clone(),
                });
            }
            CredentialSource::Env(variable) => variable.clone(),
            CredentialSource::Default => match backend.default_credential_variable() {
                Some(variable) => variable.to_string(),
                None => return Ok(ResolvedCredential::None),
            },
        };
        // The one lookup of a variable's key: the command's key, the
        // environment, then the key file.
        match Credential::env(variable.clone()).resolve() {
            Ok(Some(_)) => Ok(ResolvedCredential::Env(variable)),
            _ => Err(EngineError::CredentialVariableUnset {
                variable,
                profile: profile.name.clone(),
            }),
        }
    }

    /// The provider for `backend` with `credential`.
    pub(crate) fn provider(
        &self,
        backend: &BackendDef,
        credential: &ResolvedCredential,
    ) -> Result<Arc<dyn Provider>> {
        if let Some(provider) = self.overrides.get(&backend.name) {
            return Ok(provider.clone());
        }
        let key = match credential {
            ResolvedCredential::Explicit(secret) => {
                return build(backend, Credential::Value(secret.clone()));
            }
            ResolvedCredential::Env(variable) => (backend.name.clone(), Some(variable.clone())),
            ResolvedCredential::None => (backend.name.clone(), None),
        };
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(provider) = built.get(&key) {
            return Ok(provider.clone());
        }
        let credential = match &key.1 {
            Some(variable) => Credential::env(variable.clone()),
            None => Credential::None,
        };
        let provider = build(backend, credential)?;
        built.insert(key, provider.clone());
        Ok(provider)
    }
}

/// The backend's provider, built by the providers' table of backends.
fn build(backend: &BackendDef, credential: Credential) -> Result<Arc<dyn Provider>> {
    backend
        .kind
        .provider(credential)
        .map_err(|error| EngineError::BackendUnavailable {
            backend: backend.name.clone(),
            message: error.to_string(),
        })
}
