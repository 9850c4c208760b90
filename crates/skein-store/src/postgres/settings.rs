/*!
Reading a PostgreSQL URL into what the store needs to connect: the client's
own configuration (host, user, database, `options`, `connect_timeout`,
`application_name`, ...) and the parameters skein reads itself, which the
client does not know and which are taken out of the URL before it is given
to the client:

- `sslmode`: `disable`, `prefer` (the default, as with libpq), `require`,
  `verify-ca` or `verify-full` (see tls.rs);
- `sslrootcert`: a PEM file of authorities to trust besides the system's,
  or `system` for the system's alone;
- `pool_max`: how many connections one open store keeps at most
  ([`DEFAULT_POOL_MAX`] by default);
- `target_session_attrs`: read here, with the URL's hosts, for hosts.rs,
  which tries them in order (the client knows no `prefer-standby`).
*/

use super::hosts::{self, HostConfig, SessionAttrs};
use super::tls::SslMode;
use crate::error::{Result, StoreError};
use crate::location::percent_decoded;
use std::path::PathBuf;
use std::time::Duration;

/// Connections one open store keeps at most unless the URL's `pool_max`
/// says otherwise. A connection is held only for one call (a turn's
/// transaction is three round trips), so 16 serve many more concurrent
/// requests than that; 16 per process also leaves room for several
/// processes under PostgreSQL's default `max_connections` of 100.
pub const DEFAULT_POOL_MAX: usize = 16;
/// The most `pool_max` may ask for: more would exhaust a default server
/// from one process.
const POOL_MAX_LIMIT: usize = 1000;
/// How long opening one connection may take unless the URL's
/// `connect_timeout` (seconds, as with libpq) says otherwise.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A URL read: the client's configuration and skein's own settings.
pub(crate) struct Settings {
    pub config: tokio_postgres::Config,
    pub ssl_mode: SslMode,
    /// A PEM file of authorities trusted besides the system's.
    pub root_file: Option<PathBuf>,
    pub pool_max: usize,
    pub connect_timeout: Duration,
    /// The URL's hosts, in order, each with a configuration naming it alone.
    pub hosts: Vec<HostConfig>,
    pub session: SessionAttrs,
}

impl Settings {
    /// Read `url`; `location` is how it is shown in errors (without its
    /// password).
    pub fn parse(url: &str, location: &str) -> Result<Settings> {
        let bad = |reason: String| StoreError::BadUrl {
            location: location.to_string(),
            reason,
        };
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, query),
            None => (url, ""),
        };
        let mut ssl_mode = SslMode::Prefer;
        let mut root_cert: Option<String> = None;
        let mut pool_max = DEFAULT_POOL_MAX;
        let mut session = SessionAttrs::default();
        let mut passed = Vec::new();
        for param in query.split('&').filter(|param| !param.is_empty()) {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value_text = percent_decoded(value);
            match percent_decoded(key).as_str() {
                "sslmode" => {
                    ssl_mode = value_text.parse().map_err(bad)?;
                }
                "sslrootcert" => root_cert = Some(value_text),
                "target_session_attrs" => session = value_text.parse().map_err(bad)?,
                "pool_max" => {
                    pool_max = value_text
                        .parse::<usize>()
                        .ok()
                        .filter(|max| (1..=POOL_MAX_LIMIT).contains(max))
                        .ok_or_else(|| {
                            bad(format!(
                                "pool_max must be a number of connections from 1 to \
                                 {POOL_MAX_LIMIT}, not `{value_text}`"
                            ))
                        })?;
                }
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(bad(format!(
                        "`{}`: client certificates are not supported; authenticate with a \
                         password (SCRAM) over TLS",
                        percent_decoded(key)
                    )));
                }
                _ => passed.push(param),
            }
        }
        let client_url = if passed.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", passed.join("&"))
        };
        let client_config = |url: &str| client_config(url, ssl_mode).map_err(bad);
        let config = client_config(&client_url)?;
        let connect_timeout = *config.get_connect_timeout().expect("set by client_config");
        let hosts = hosts::hosts_of(&client_url, &config, client_config, bad)?;
        let root_file = root_cert
            .as_deref()
            .filter(|path| !path.is_empty() && *path != "system")
            .map(PathBuf::from);
        Ok(Settings {
            ssl_mode: ssl_mode.with_root_file(root_file.is_some()),
            config,
            root_file,
            pool_max,
            connect_timeout,
            hosts,
            session,
        })
    }
}

/// The client's configuration for `url` (without skein's own parameters),
/// with skein's defaults for what it leaves unset.
fn client_config(
    url: &str,
    ssl_mode: SslMode,
) -> std::result::Result<tokio_postgres::Config, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|error: tokio_postgres::Error| super::describe(&error))?;
    // The client's own TLS negotiation runs in `prefer` or `require`;
    // what the certificate must prove is the verifier's job (tls.rs).
    config.ssl_mode(ssl_mode.client_mode());
    let connect_timeout = *config
        .get_connect_timeout()
        .unwrap_or(&DEFAULT_CONNECT_TIMEOUT);
    config.connect_timeout(connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("skein");
    }
    // JIT compilation pays off for long analytical queries; the store's
    // statements read a few dozen rows, and compiling one costs tens of
    // milliseconds whenever the planner's estimate crosses the
    // threshold.
    const SESSION: &str = "-c jit=off";
    let options = match config.get_options() {
        Some(options) => format!("{options} {SESSION}"),
        None => SESSION.to_string(),
    };
    config.options(&options);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Settings> {
        Settings::parse(url, url)
    }

    #[test]
    fn skein_parameters_are_read_and_the_rest_reach_the_client() {
        let settings = parse(
            "postgres://me@db.example/skein?sslmode=verify-full&pool_max=40&\
             application_name=web%201&options=-c%20search_path%3Dx&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(settings.ssl_mode, SslMode::VerifyFull);
        assert_eq!(settings.pool_max, 40);
        assert_eq!(settings.config.get_application_name(), Some("web 1"));
        assert_eq!(
            settings.config.get_options(),
            Some("-c search_path=x -c jit=off")
        );
        assert_eq!(settings.root_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(settings.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    }

    #[test]
    fn defaults_follow_libpq_and_size_the_pool_for_a_server() {
        let settings = parse("postgres://me@db/skein?connect_timeout=3").unwrap();
        assert_eq!(settings.ssl_mode, SslMode::Prefer);
        assert_eq!(settings.pool_max, DEFAULT_POOL_MAX);
        assert_eq!(settings.connect_timeout, Duration::from_secs(3));
        assert_eq!(settings.config.get_application_name(), Some("skein"));
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_authority_as_libpq_does() {
        let settings = parse("postgres://db/skein?sslmode=require&sslrootcert=ca.pem").unwrap();
        assert_eq!(settings.ssl_mode, SslMode::VerifyCa);
        let settings = parse("postgres://db/skein?sslmode=require").unwrap();
        assert_eq!(settings.ssl_mode, SslMode::Require);
    }

    #[test]
    fn several_hosts_are_tried_in_order_each_named_alone() {
        let settings = parse(
            "postgres://me:pw@10.0.0.1:5433,db-b,[::1]:5434/skein?connect_timeout=2&\
             target_session_attrs=read-write&application_name=web",
        )
        .unwrap();
        assert_eq!(settings.session, SessionAttrs::ReadWrite);
        assert_eq!(settings.connect_timeout, Duration::from_secs(2));
        let labels: Vec<&str> = settings.hosts.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(labels, ["10.0.0.1:5433", "db-b:5432", "::1:5434"]);
        for host in &settings.hosts {
            assert_eq!(host.config.get_hosts().len(), 1);
            assert_eq!(host.config.get_user(), Some("me"));
            assert_eq!(host.config.get_dbname(), Some("skein"));
            assert_eq!(host.config.get_application_name(), Some("web"));
            assert_eq!(host.config.get_options(), Some("-c jit=off"));
            assert_eq!(
                host.config.get_connect_timeout(),
                Some(&Duration::from_secs(2))
            );
        }
        // The pool's own configuration still names every host.
        assert_eq!(settings.config.get_hosts().len(), 3);
    }

    #[test]
    fn one_host_is_taken_as_it_is_and_any_session_will_do() {
        let settings = parse("postgres://me@db:6000/skein").unwrap();
        assert_eq!(settings.session, SessionAttrs::Any);
        assert_eq!(settings.hosts.len(), 1);
        assert_eq!(settings.hosts[0].label, "db:6000");
        let settings = parse("postgres://a,b/skein?target_session_attrs=prefer-standby").unwrap();
        assert_eq!(settings.session, SessionAttrs::PreferStandby);
        assert_eq!(settings.hosts.len(), 2);
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        for (url, needle) in [
            ("postgres://db/s?sslmode=allow", "sslmode"),
            ("postgres://db/s?sslmode=verify_full", "verify-full"),
            ("postgres://db/s?pool_max=0", "pool_max"),
            ("postgres://db/s?pool_max=many", "pool_max"),
            ("postgres://db/s?sslcert=me.pem", "client certificates"),
            ("postgres://db/s?connect_timeout=soon", "connect_timeout"),
            (
                "postgres://a,b/s?target_session_attrs=primary",
                "use read-write",
            ),
            ("postgres://a,b/s?target_session_attrs=rw", "prefer-standby"),
            ("postgres://a,b/s?port=1,2", "authority"),
            ("postgres:///s?host=a,b", "authority"),
            ("postgres://a,b/s?host=c", "not both"),
        ] {
            match parse(url) {
                Err(StoreError::BadUrl { reason, .. }) => {
                    assert!(reason.contains(needle), "{url}: {reason}");
                }
                Err(other) => panic!("{url}: {other}"),
                Ok(_) => panic!("{url} was accepted"),
            }
        }
    }
}
