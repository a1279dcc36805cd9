//! OAUTHBEARER's messages (RFC 7628 as Kafka speaks it, KIP-255 and KIP-342), without I/O:
//! the client's initial response, built as Kafka's `OAuthBearerClientInitialResponse` builds
//! it and read as its broker reads it, and the rules a token and its extensions must meet.
//!
//! The exchange: the client sends
//! `n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01...]\x01`. The server answers an
//! empty message when it accepts the token. When it does not, it answers a JSON error
//! (`{"status":"invalid_token"}`) with no Kafka error; the client then sends a lone `\x01`
//! and the server fails the exchange with SASL_AUTHENTICATION_FAILED (Kafka's
//! `OAuthBearerSaslClient` and `OAuthBearerSaslServer`).

use super::sasl::{escape_username, unescape_username};

/// RFC 7628's field separator, `kvsep`.
pub const SEPARATOR: u8 = 0x01;

/// The client's initial response, or the rule the token or an extension breaks.
pub fn client_initial_response(
    token: &str,
    authzid: Option<&str>,
    extensions: &[(String, String)],
) -> Result<Vec<u8>, String> {
    if !is_token(token) {
        return Err(
            "the provider's token is not a compact JWS: it must be non-empty and only letters, \
             digits, `-`, `_` and `.`"
                .into(),
        );
    }
    let mut message = String::from("n,");
    if let Some(authzid) = authzid.filter(|a| !a.is_empty()) {
        message.push_str("a=");
        message.push_str(&escape_username(authzid));
    }
    message.push(',');
    message.push(SEPARATOR as char);
    message.push_str("auth=Bearer ");
    message.push_str(token);
    for (key, value) in extensions {
        check_extension(key, value)?;
        message.push(SEPARATOR as char);
        message.push_str(key);
        message.push('=');
        message.push_str(value);
    }
    message.push(SEPARATOR as char);
    message.push(SEPARATOR as char);
    Ok(message.into_bytes())
}

/// The characters Kafka's broker accepts in a token (its client-first pattern).
fn is_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Kafka's `OAuthBearerClientInitialResponse` rules: a key is letters only and not `auth`;
/// a value is printable ASCII, space, tab, CR or LF.
fn check_extension(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(format!(
            "the SASL extension key `{key}` must be letters only (KIP-342)"
        ));
    }
    if key == "auth" {
        return Err("the SASL extension key `auth` is reserved for the token (KIP-342)".into());
    }
    let printable = |b: u8| (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    if value.is_empty() || !value.bytes().all(printable) {
        return Err(format!(
            "the value of the SASL extension `{key}` must be non-empty printable ASCII (KIP-342)"
        ));
    }
    Ok(())
}

/// A client initial response as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInitialResponse {
    pub authzid: Option<String>,
    pub token: String,
    pub extensions: Vec<(String, String)>,
}

/// Reads a client initial response; `None` if it is not one (Kafka's broker refuses it as
/// "Invalid OAUTHBEARER client first message").
pub fn parse_client_initial_response(message: &[u8]) -> Option<ClientInitialResponse> {
    let message = std::str::from_utf8(message).ok()?;
    let rest = message.strip_prefix("n,")?;
    let (authzid, rest) = rest.split_once(',')?;
    let authzid = match authzid {
        "" => None,
        a => Some(unescape_username(a.strip_prefix("a=")?)?),
    };
    let sep = SEPARATOR as char;
    let rest = rest
        .strip_prefix(sep)?
        .strip_suffix(sep)?
        .strip_suffix(sep)?;
    let mut fields = rest.split(sep);
    let auth = fields.next()?.strip_prefix("auth=")?;
    let (scheme, token) = auth.split_once(' ')?;
    let token = token.trim_start_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || !is_token(token) {
        return None;
    }
    let extensions = fields
        .map(|field| {
            let (key, value) = field.split_once('=')?;
            check_extension(key, value).ok()?;
            Some((key.to_string(), value.to_string()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ClientInitialResponse {
        authzid,
        token: token.to_string(),
        extensions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_response_is_kafkas_and_reads_back() {
        let message = client_initial_response("a.b.", None, &[]).unwrap();
        assert_eq!(message, b"n,,\x01auth=Bearer a.b.\x01\x01");
        let with =
            client_initial_response("h.p.s", Some("al,ice"), &[("traceId".into(), "x 1".into())])
                .unwrap();
        assert_eq!(
            with,
            b"n,a=al=2Cice,\x01auth=Bearer h.p.s\x01traceId=x 1\x01\x01"
        );
        assert_eq!(
            parse_client_initial_response(&with),
            Some(ClientInitialResponse {
                authzid: Some("al,ice".into()),
                token: "h.p.s".into(),
                extensions: vec![("traceId".into(), "x 1".into())],
            })
        );
    }

    #[test]
    fn bad_tokens_and_extensions_are_refused_with_the_rule() {
        for token in ["", "a b", "a\u{1}b", "tok/en"] {
            let e = client_initial_response(token, None, &[]).unwrap_err();
            assert!(e.contains("compact JWS"), "{e}");
        }
        let e = client_initial_response("t", None, &[("auth".into(), "x".into())]).unwrap_err();
        assert!(e.contains("reserved"), "{e}");
        let e = client_initial_response("t", None, &[("k1".into(), "x".into())]).unwrap_err();
        assert!(e.contains("letters only"), "{e}");
        let e = client_initial_response("t", None, &[("k".into(), "\u{1}".into())]).unwrap_err();
        assert!(e.contains("printable"), "{e}");
        for bad in [
            &b"n,,auth=Bearer t\x01\x01"[..],
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"\x01",
        ] {
            assert_eq!(parse_client_initial_response(bad), None, "{bad:?}");
        }
    }
}
