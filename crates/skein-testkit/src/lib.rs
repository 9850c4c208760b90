/*!
Helpers shared by skein's tests, benches and examples; a dev-only crate
(`publish = false`), named only in `[dev-dependencies]`.

- [`cli`]: the `skein` binary run against a test's own database and
  configuration file ([`Cli`]), with its output checked and parsed.
- [`faults`]: a raw TCP server for the HTTP failures a mock server cannot
  produce ([`FaultServer`]: a request never answered, a body that stalls or
  is cut mid-stream) and an address nobody listens on ([`refused`]).
- `provider` (the `provider` feature): `Recording`, a provider that keeps
  every request it is sent, and `Fixed`, one that answers every call the
  same way without reading it.
- `otlp` (the `otlp` feature): an in-process OTLP/HTTP receiver that keeps
  the spans it is sent.

The `provider` module implements `skein_core::Provider` over
`skein-providers`' scripted and echo models, so it cannot serve the tests
of skein-core or skein-providers themselves (they would see a second copy
of their own crate); those crates use the kit without the feature.
*/

pub mod cli;
pub mod faults;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "provider")]
pub mod provider;

pub use cli::Cli;
pub use faults::{Fault, FaultServer, Seen, refused};
#[cfg(feature = "provider")]
pub use provider::{Fixed, Recording};
