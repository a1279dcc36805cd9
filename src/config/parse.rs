//! Parsing of single values, `bootstrap.servers` entries and `.properties` text.
//!
//! Every value is trimmed before it is parsed, as Java's `ConfigDef.parseType` does; errors
//! quote the value as the user wrote it.

use super::{Acks, ConfigError};

/// What a number counts, for the rule text of a range error.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unit {
    Plain,
    Millis,
    Micros,
    Bytes,
}

impl Unit {
    /// The unit implied by a key's suffix, for keys checked only generically.
    pub(super) fn of_key(key: &str) -> Unit {
        if key.ends_with(".ms") {
            Unit::Millis
        } else if key.ends_with(".us") {
            Unit::Micros
        } else if key.ends_with(".bytes") || key.ends_with(".size") || key.ends_with(".memory") {
            Unit::Bytes
        } else {
            Unit::Plain
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Unit::Plain => "a whole number",
            Unit::Millis => "a whole number of milliseconds",
            Unit::Micros => "a whole number of microseconds",
            Unit::Bytes => "a whole number of bytes",
        }
    }
}

pub(super) fn invalid(key: &str, raw: &str, rule: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: raw.to_string(),
        rule: rule.into(),
    }
}

fn range_rule(unit: Unit, min: i64, max: i64, raw: &str) -> String {
    let mut rule = format!("must be {} from {min} to {max}", unit.noun());
    // `10ms` or `5s`: Java property values carry no unit; say so rather than only "not a number".
    let v = raw.trim();
    if v.starts_with(|c: char| c.is_ascii_digit()) && v.ends_with(|c: char| c.is_ascii_alphabetic())
    {
        rule.push_str(", written without a unit");
    }
    rule
}

/// A Java `int` (`Integer.parseInt`) in `min..=max`; the rule names the range.
pub(super) fn int(
    key: &str,
    raw: &str,
    min: i32,
    max: i32,
    unit: Unit,
) -> Result<i32, ConfigError> {
    match raw.trim().parse::<i32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(
            key,
            raw,
            range_rule(unit, min.into(), max.into(), raw),
        )),
    }
}

/// A Java `long` (`Long.parseLong`) in `min..=max`; the rule names the range.
pub(super) fn long(
    key: &str,
    raw: &str,
    min: i64,
    max: i64,
    unit: Unit,
) -> Result<i64, ConfigError> {
    match raw.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(key, raw, range_rule(unit, min, max, raw))),
    }
}

/// A non-negative Java `int` or `long` as a `usize`, for sizes and counts.
pub(super) fn size(
    key: &str,
    raw: &str,
    min: i64,
    max: i64,
    unit: Unit,
) -> Result<usize, ConfigError> {
    let n = long(key, raw, min, max, unit)?;
    usize::try_from(n)
        .map_err(|_| invalid(key, raw, "is too large for this platform's address space"))
}

/// Milliseconds as a non-negative Java `long`.
pub(super) fn millis_long(key: &str, raw: &str) -> Result<i64, ConfigError> {
    long(key, raw, 0, i64::MAX, Unit::Millis)
}

/// Milliseconds as a non-negative Java `int` (the `*.timeout.ms` keys Java types as `INT`).
pub(super) fn millis_int(key: &str, raw: &str) -> Result<i32, ConfigError> {
    int(key, raw, 0, i32::MAX, Unit::Millis)
}

/// Java `Type.BOOLEAN`: `true` or `false`, case-insensitive.
pub(super) fn boolean(key: &str, raw: &str) -> Result<bool, ConfigError> {
    let v = raw.trim();
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(invalid(key, raw, "must be true or false"))
    }
}

/// `acks`: Java validates with `ValidString.in("all", "-1", "0", "1")`, which is case-sensitive,
/// before `ProducerConfig.parseAcks` maps `all` to -1.
pub(super) fn acks(key: &str, raw: &str) -> Result<Acks, ConfigError> {
    match raw.trim() {
        "all" | "-1" => Ok(Acks::All),
        "1" => Ok(Acks::Leader),
        "0" => Ok(Acks::None),
        _ => Err(invalid(key, raw, "must be one of all, -1, 0, 1")),
    }
}

/// One of a fixed set of strings, case-sensitive like Java's `ValidString`.
pub(super) fn one_of(key: &str, raw: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    if allowed.contains(&raw.trim()) {
        Ok(())
    } else {
        Err(invalid(
            key,
            raw,
            format!("must be one of {}", allowed.join(", ")),
        ))
    }
}

/// One of a fixed set of strings, case-insensitive like Java's `CaseInsensitiveValidString`.
pub(super) fn one_of_ignore_case(
    key: &str,
    raw: &str,
    allowed: &[&str],
) -> Result<(), ConfigError> {
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(raw.trim())) {
        Ok(())
    } else {
        Err(invalid(
            key,
            raw,
            format!("must be one of {} (case-insensitive)", allowed.join(", ")),
        ))
    }
}

/// A Java `double` (`Double.parseDouble`) in `min..=max`; the rule names the range.
pub(super) fn double(key: &str, raw: &str, min: f64, max: f64) -> Result<f64, ConfigError> {
    match raw.trim().parse::<f64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ if min == f64::MIN && max == f64::MAX => Err(invalid(key, raw, "must be a number")),
        _ => Err(invalid(
            key,
            raw,
            format!("must be a number from {min} to {max}"),
        )),
    }
}

/// `bootstrap.servers`: a comma-separated list of `host:port`.
///
/// Empty entries are skipped and an empty list is an error, as in Java's
/// `ClientUtils.parseAndValidateAddresses`. Entries are checked for shape but not resolved.
pub(super) fn bootstrap_servers(key: &str, raw: &str) -> Result<Vec<String>, ConfigError> {
    let mut servers = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let address = address(entry).map_err(|rule| invalid(key, entry, rule))?;
        servers.push(address.to_string());
    }
    if servers.is_empty() {
        return Err(invalid(
            key,
            raw,
            "must list at least one broker as host:port, e.g. localhost:9092",
        ));
    }
    Ok(servers)
}

const HOST_PORT_EXAMPLE: &str = "expected host:port, e.g. localhost:9092";

/// Checks one `host:port` entry and returns it without a `PLAINTEXT://` prefix.
///
/// Java's `Utils.getHost`/`getPort` skip any prefix before the host, so `PLAINTEXT://h:9092`
/// works there; kacrab accepts that scheme and refuses the others, which would need TLS or SASL.
fn address(entry: &str) -> Result<&str, String> {
    let entry = match entry.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("PLAINTEXT") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "the `{scheme}://` scheme is not supported; only PLAINTEXT connections are"
            ))
        }
        None => entry,
    };
    let Some((host, port)) = entry.rsplit_once(':') else {
        return Err(format!("the port is missing; {HOST_PORT_EXAMPLE}"));
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{port}` is not a port number; {HOST_PORT_EXAMPLE}"
        ));
    }
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => {}
        _ => return Err(format!("the port {port} is not from 1 to 65535")),
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ipv6 = inner.strip_suffix(']').unwrap_or("");
        let ipv6_char =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '%' | '-' | '_');
        if !ipv6.contains(':') || !ipv6.chars().all(ipv6_char) {
            return Err("a bracketed host must be an IPv6 address, e.g. [::1]:9092".to_string());
        }
    } else if host.is_empty() {
        return Err(format!("the host is missing; {HOST_PORT_EXAMPLE}"));
    } else if host.contains(':') {
        return Err("an IPv6 address must be in brackets, e.g. [::1]:9092".to_string());
    } else if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '%'))
    {
        // The characters Java's `Utils.HOST_PORT_PATTERN` accepts in a host.
        return Err("the host may contain only letters, digits, `.`, `-`, `_` and `%`".to_string());
    }
    Ok(entry)
}

/// `kacrab.cores`: a comma-separated list of CPU ids, each at most once.
pub(super) fn cores(key: &str, raw: &str) -> Result<Vec<usize>, ConfigError> {
    let rule = "must be a comma-separated list of distinct CPU ids, e.g. 0,1,2";
    let mut cores: Vec<usize> = Vec::new();
    for entry in raw.split(',').map(str::trim) {
        match entry.parse::<usize>() {
            Ok(core) if !cores.contains(&core) => cores.push(core),
            _ => return Err(invalid(key, raw, rule)),
        }
    }
    Ok(cores)
}

/// `key=value` pairs from `.properties` text, in file order.
///
/// The subset of `java.util.Properties.load` that configuration files use: `#` and `!` comment
/// lines, blank lines, `=`, `:` or whitespace between key and value, a trailing `\` to continue
/// a line, and the escapes `\t`, `\n`, `\r`, `\f`, `\uXXXX` and `\<char>`.
pub(super) fn properties(text: &str) -> Vec<(String, String)> {
    const BLANK: [char; 3] = [' ', '\t', '\x0c'];
    let mut pairs = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start_matches(BLANK);
        // A comment line is never continued, even if it ends in a backslash (Java's LineReader).
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let mut logical = line.to_string();
        while ends_in_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start_matches(BLANK)),
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical, &BLANK);
        pairs.push((unescape(key), unescape(value)));
    }
    pairs
}

/// An odd number of trailing backslashes: the last one escapes the line break.
fn ends_in_continuation(line: &str) -> bool {
    line.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn split_key_value<'a>(line: &'a str, blank: &[char]) -> (&'a str, &'a str) {
    let mut escaped = false;
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || blank.contains(&c) {
            end = i;
            break;
        }
    }
    let key = &line[..end];
    let mut rest = line[end..].trim_start_matches(blank);
    // One `=` or `:` may follow whitespace after the key (`key = value`).
    if let Some(stripped) = rest.strip_prefix(['=', ':']) {
        rest = stripped.trim_start_matches(blank);
    }
    (key, rest)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) if hex.len() == 4 => {
                        out.push(decoded);
                        chars.nth(3);
                    }
                    // Java throws on a malformed \u escape; keeping it literal lets the value
                    // check report the key instead.
                    _ => out.push_str("\\u"),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_handle_separators_and_escapes() {
        let text = "a=1\nb : 2\nc 3\nd\n e = x\\\n    y\nf=\\u0041\\tB\ng\\=h=i\n# x=y\n! z=w\n";
        let pairs = properties(text);
        let expect = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", ""),
            ("e", "xy"),
            ("f", "A\tB"),
            ("g=h", "i"),
        ];
        let got: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn comment_lines_are_not_continued() {
        let pairs = properties("# comment \\\na=1\n");
        assert_eq!(pairs, vec![("a".to_string(), "1".to_string())]);
    }

    #[test]
    fn even_backslashes_do_not_continue() {
        let pairs = properties("a=x\\\\\nb=2\n");
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].1, "x\\");
    }

    #[test]
    fn addresses() {
        assert_eq!(address("localhost:9092"), Ok("localhost:9092"));
        assert_eq!(address("PLAINTEXT://b1:9092"), Ok("b1:9092"));
        assert_eq!(address("[::1]:9092"), Ok("[::1]:9092"));
        for bad in [
            "localhost",
            ":9092",
            "host:",
            "host:0",
            "host:65536",
            "host:x1",
            "::1:9092",
            "[]:9092",
            "[::1:9092",
            "SSL://h:9092",
            "ho st:1",
        ] {
            assert!(address(bad).is_err(), "{bad} was accepted");
        }
    }
}
