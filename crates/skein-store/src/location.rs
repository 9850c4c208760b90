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

/// `url` with any password replaced by `***`, for messages and logs: the
/// one in the credentials (everything before the first `@`, as the
/// PostgreSQL client reads it, so a `/` or `?` in the password is covered)
/// and a `password=` query parameter.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (credentials, address) = match rest.split_once('@') {
        Some((credentials, address)) => match credentials.split_once(':') {
            Some((user, _password)) => (format!("{user}:***@"), address),
            None => (format!("{credentials}@"), address),
        },
        None => (String::new(), rest),
    };
    let address = match address.split_once('?') {
        None => address.to_string(),
        Some((before, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if percent_decoded(key).eq_ignore_ascii_case("password") => {
                        format!("{key}=***")
                    }
                    _ => param.to_string(),
                })
                .collect();
            format!("{before}?{}", params.join("&"))
        }
    };
    format!("{scheme}://{credentials}{address}")
}

/// `text` with `%XX` escapes decoded (invalid ones kept as they are).
pub(crate) fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| text.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        // The client takes everything before the first `@` as credentials.
        assert_eq!(
            redact("postgres://me:se/cr?et@db/skein"),
            "postgres://me:***@db/skein"
        );
        assert_eq!(
            redact("postgresql://db/skein?sslmode=disable&password=secret&user=me"),
            "postgresql://db/skein?sslmode=disable&password=***&user=me"
        );
        assert_eq!(
            redact("postgres://db/skein?pass%77ord=secret"),
            "postgres://db/skein?pass%77ord=***"
        );
    }
}
