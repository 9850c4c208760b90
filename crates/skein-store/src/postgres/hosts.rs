/*!
Several hosts in one URL, as libpq reads them
(`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`): the hosts
are tried in order, each within the URL's `connect_timeout`, until one is
usable as `target_session_attrs` asks. This is how a store follows a
primary that moved (a standby promoted) and how a reader finds a standby.

The client (tokio-postgres) tries several hosts itself and checks
`read-write` and `read-only` on connect (`SHOW transaction_read_only`),
but reports only the last host's failure and knows no `prefer-standby`.
So the hosts are split here, each tried on its own with the client's own
check, and every host's failure is kept for the error: which host failed
how. `prefer-standby` is two passes, read-only hosts first, then any.
A server counts as a standby when its sessions are read-only, as libpq's
`read-only` judges it (a hot standby's always are; so are those of a
primary with `default_transaction_read_only=on`). libpq's `primary` and
`standby` are not offered: `read-write` and `read-only` say the same for
every server that does not set `default_transaction_read_only`.
*/

use crate::error::{Result, StoreError};
use deadpool_postgres::Connect;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, TargetSessionAttrs};

/// What a session must allow for its host to be used (the URL's
/// `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SessionAttrs {
    /// The first host that answers.
    #[default]
    Any,
    /// A server that accepts writes: the primary.
    ReadWrite,
    /// A server whose sessions are read-only: a standby.
    ReadOnly,
    /// A standby if any host is one, else the first host that answers.
    PreferStandby,
}

impl SessionAttrs {
    pub fn name(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// The client's check for each pass over the hosts, in order.
    fn passes(self) -> &'static [TargetSessionAttrs] {
        match self {
            SessionAttrs::Any => &[TargetSessionAttrs::Any],
            SessionAttrs::ReadWrite => &[TargetSessionAttrs::ReadWrite],
            SessionAttrs::ReadOnly => &[TargetSessionAttrs::ReadOnly],
            SessionAttrs::PreferStandby => &[TargetSessionAttrs::ReadOnly, TargetSessionAttrs::Any],
        }
    }
}

impl FromStr for SessionAttrs {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "any" => Ok(SessionAttrs::Any),
            "read-write" => Ok(SessionAttrs::ReadWrite),
            "read-only" => Ok(SessionAttrs::ReadOnly),
            "prefer-standby" => Ok(SessionAttrs::PreferStandby),
            "primary" | "standby" => Err(format!(
                "target_session_attrs={text} is not supported; use {} (the same for every \
                 server that does not set default_transaction_read_only)",
                if text == "primary" {
                    "read-write"
                } else {
                    "read-only"
                }
            )),
            other => Err(format!(
                "target_session_attrs must be any, read-write, read-only or prefer-standby, \
                 not `{other}`"
            )),
        }
    }
}

/// One host of the URL and the client configuration that names it alone.
pub(crate) struct HostConfig {
    /// `host:port` as errors show it.
    pub label: String,
    pub config: tokio_postgres::Config,
}

/// The URL's hosts and what a session on one must allow; also the last
/// failure to connect, told host by host, for the error the pool reports
/// (whose own error type holds only one client error).
pub(crate) struct Hosts {
    pub hosts: Vec<HostConfig>,
    pub session: SessionAttrs,
    failure: Arc<Mutex<Option<String>>>,
}

impl Hosts {
    pub fn new(hosts: Vec<HostConfig>, session: SessionAttrs) -> Hosts {
        Hosts {
            hosts,
            session,
            failure: Arc::default(),
        }
    }

    /// How many connection attempts one connect may make at most: each
    /// takes up to `connect_timeout`.
    pub fn attempts(&self) -> u32 {
        (self.hosts.len() * self.session.passes().len()) as u32
    }

    /// Connect to the first host usable as [`Hosts::session`] asks, with
    /// `connector` (which spawns the connection's I/O). When none is,
    /// every host's failure is kept for [`Hosts::take_failure`] and the
    /// last host's is returned.
    pub async fn connect(
        &self,
        connector: &dyn Connect,
    ) -> std::result::Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        let mut failures = Vec::new();
        let mut last = None;
        for attrs in self.session.passes() {
            for host in &self.hosts {
                let mut config = host.config.clone();
                config.target_session_attrs(*attrs);
                match connector.connect(&config).await {
                    Ok(made) => return Ok(made),
                    Err(error) => {
                        failures.push(format!("{}: {}", host.label, super::describe(&error)));
                        last = Some(error);
                    }
                }
            }
        }
        // One host taken as it is: the client's own error says it all.
        if self.hosts.len() > 1 || self.session != SessionAttrs::Any {
            let summary = format!(
                "no host is usable as target_session_attrs={} asks: {}",
                self.session.name(),
                failures.join("; ")
            );
            *self
                .failure
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(summary);
        }
        Err(last.expect("a URL names at least one host"))
    }

    /// The failure of the last connect that found no usable host, once.
    pub fn take_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// The URLs that name each host of `url` alone (with everything else of it
/// kept), or `None` when its authority names one host at most. Hosts in
/// the query (`host=a,b`) are not split: [`hosts_of`] refuses them.
pub(crate) fn split_authority(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (credentials, host_list) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    if !host_list.contains(',') {
        return None;
    }
    Some(
        host_list
            .split(',')
            .map(|host| format!("{scheme}://{credentials}{host}{tail}"))
            .collect(),
    )
}

/// The hosts `config` names, each with a configuration naming it alone:
/// `parse` reads a URL naming one host (made by [`split_authority`]).
pub(crate) fn hosts_of(
    url: &str,
    config: &tokio_postgres::Config,
    parse: impl Fn(&str) -> Result<tokio_postgres::Config>,
    bad: impl Fn(String) -> StoreError,
) -> Result<Vec<HostConfig>> {
    let named = config.get_hosts().len().max(config.get_hostaddrs().len());
    // The client reads `host=a,b` in a URL's query as one host named so.
    let listed_in_query = config
        .get_hosts()
        .iter()
        .any(|host| matches!(host, Host::Tcp(name) if name.contains(',')));
    let Some(urls) = split_authority(url) else {
        if named > 1 || listed_in_query {
            return Err(bad(
                "list several hosts in the URL's authority (postgres://h1:5432,h2:5432/db), \
                 not in its host= or hostaddr= parameters"
                    .into(),
            ));
        }
        return Ok(vec![HostConfig {
            label: label(config),
            config: config.clone(),
        }]);
    };
    if urls.len() != named {
        return Err(bad(
            "list the hosts either in the URL's authority or in its host= parameter, not both"
                .into(),
        ));
    }
    urls.iter()
        .map(|url| {
            let config = parse(url)?;
            if config.get_ports().len() > 1 {
                return Err(bad(
                    "give each host its port in the URL's authority (h1:5432,h2:5433), \
                     not in its port= parameter"
                        .into(),
                ));
            }
            Ok(HostConfig {
                label: label(&config),
                config,
            })
        })
        .collect()
}

/// `host:port` of a configuration naming one host.
fn label(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        #[cfg(unix)]
        Some(Host::Unix(path)) => path.display().to_string(),
        None => config
            .get_hostaddrs()
            .first()
            .map(ToString::to_string)
            .unwrap_or_default(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_of_the_authority_gets_the_rest_of_the_url() {
        assert_eq!(
            split_authority("postgres://me:pw@h1:5432,h2:6543/db?sslmode=disable").unwrap(),
            [
                "postgres://me:pw@h1:5432/db?sslmode=disable",
                "postgres://me:pw@h2:6543/db?sslmode=disable"
            ]
        );
        assert_eq!(
            split_authority("postgresql://[::1]:1,h2?x=1").unwrap(),
            ["postgresql://[::1]:1?x=1", "postgresql://h2?x=1"]
        );
        assert_eq!(split_authority("postgres://me@h1:5432/db"), None);
        // A comma in the password is not a host separator.
        assert_eq!(split_authority("postgres://me:a,b@h1/db"), None);
    }

    #[test]
    fn session_attributes_follow_libpq_and_refuse_the_rest_by_name() {
        assert_eq!("read-write".parse(), Ok(SessionAttrs::ReadWrite));
        assert_eq!("prefer-standby".parse(), Ok(SessionAttrs::PreferStandby));
        assert_eq!(
            SessionAttrs::PreferStandby.passes(),
            [TargetSessionAttrs::ReadOnly, TargetSessionAttrs::Any]
        );
        let refused = "primary".parse::<SessionAttrs>().unwrap_err();
        assert!(refused.contains("use read-write"), "{refused}");
        let refused = "readwrite".parse::<SessionAttrs>().unwrap_err();
        assert!(refused.contains("prefer-standby"), "{refused}");
    }
}
