/*!
Reading a database location: a `postgres://` or `postgresql://` URL names a
PostgreSQL server, anything else a SQLite file. Also how a URL is shown in
messages: never with its password.
*/

/// Whether `location` names a PostgreSQL server rather than a SQLite file.
pub fn is_postgres_url(location: &str) -> bool {
    let lower = location.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_postgres_url("postgres://u@h/db"));
        assert!(is_postgres_url("PostgreSQL://h/db"));
        assert!(!is_postgres_url("/var/lib/skein.db"));
        assert!(!is_postgres_url("postgres.db"));
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://me:secret@db:5432/skein?sslmode=disable"),
            "postgres://me:***@db:5432/skein?sslmode=disable"
        );
        assert_eq!(redact("postgres://me@db/skein"), "postgres://me@db/skein");
        assert_eq!(redact("postgres://db/skein"), "postgres://db/skein");
    }
}
