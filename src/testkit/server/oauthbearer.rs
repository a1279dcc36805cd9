//! The reference broker's OAUTHBEARER token validation: by default Kafka's unsecured
//! validator (`OAuthBearerUnsecuredValidatorCallbackHandler`), or a validator a test installs
//! with [`SaslListener::oauthbearer_validator`](super::SaslListener::oauthbearer_validator).
//!
//! An unsecured token is a JWS with no signature, `base64url(header).base64url(payload).`:
//! the header's `alg` is `none`, the payload has the principal in `sub` and the expiry in
//! `exp` (seconds since the epoch), and `iat`, when present, is a number. A token that does
//! not parse, or whose `exp` has passed, is refused with the status `invalid_token`, which
//! the broker sends as `{"status":"invalid_token"}` (Kafka's `OAuthBearerSaslServer`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// A token the validator accepted: whose it is and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedToken {
    /// The principal the token authenticates.
    pub principal: String,
    /// When the token expires: the session ends then, as KIP-368 has it.
    pub expires_at: SystemTime,
}

/// The RFC 6750 status a refused token is answered with.
pub const INVALID_TOKEN: &str = "invalid_token";

type ValidatorFn = dyn Fn(&str) -> Result<ValidatedToken, String> + Send + Sync;

/// A token validator: the token's principal and expiry, or the error status to answer.
#[derive(Clone)]
pub struct OAuthBearerValidator(Arc<ValidatorFn>);

impl OAuthBearerValidator {
    /// Wraps `validate`: the token's principal and expiry, or the error status to answer.
    pub fn new(
        validate: impl Fn(&str) -> Result<ValidatedToken, String> + Send + Sync + 'static,
    ) -> Self {
        OAuthBearerValidator(Arc::new(validate))
    }

    /// Kafka's unsecured validator, checked against the wall clock.
    pub fn unsecured() -> Self {
        OAuthBearerValidator::new(|token| validate_unsecured(token, SystemTime::now()))
    }

    pub(crate) fn validate(&self, token: &str) -> Result<ValidatedToken, String> {
        (self.0)(token)
    }
}

impl fmt::Debug for OAuthBearerValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OAuthBearerValidator")
    }
}

/// An unsecured token for `sub`, expiring at `expires_at` (whole seconds, rounded down) and
/// issued now, as Kafka's `OAuthBearerUnsecuredLoginCallbackHandler` makes them.
pub fn unsecured_token(sub: &str, expires_at: SystemTime) -> String {
    let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let header = r#"{"alg":"none"}"#;
    let payload = format!(
        r#"{{"iat":{},"exp":{},"sub":"{}"}}"#,
        seconds(SystemTime::now()),
        seconds(expires_at),
        sub.replace('\\', "\\\\").replace('"', "\\\"")
    );
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    )
}

/// Kafka's unsecured validation of `token` at `now`; the error is the status to answer.
pub fn validate_unsecured(token: &str, now: SystemTime) -> Result<ValidatedToken, String> {
    let invalid = || INVALID_TOKEN.to_string();
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(""), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid());
    };
    let header = decode_claims(header).ok_or_else(invalid)?;
    if header.get("alg") != Some(&Claim::Text("none".into())) {
        return Err(invalid());
    }
    let claims = decode_claims(payload).ok_or_else(invalid)?;
    let Some(Claim::Text(principal)) = claims.get("sub") else {
        return Err(invalid());
    };
    let Some(&Claim::Number(exp)) = claims.get("exp") else {
        return Err(invalid());
    };
    if matches!(claims.get("iat"), Some(claim) if !matches!(claim, Claim::Number(_))) {
        return Err(invalid());
    }
    if !(exp.is_finite() && exp >= 0.0) {
        return Err(invalid());
    }
    let expires_at = UNIX_EPOCH + Duration::from_secs_f64(exp);
    // Kafka: "The indicated time is ... in the past" (no clock skew allowed by default).
    if expires_at <= now {
        return Err(invalid());
    }
    Ok(ValidatedToken {
        principal: principal.clone(),
        expires_at,
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Claim {
    Text(String),
    Number(f64),
    /// `true`, `false`, `null`, or an array of strings (`scope`): present, not read.
    Other,
}

fn decode_claims(part: &str) -> Option<BTreeMap<String, Claim>> {
    let bytes = URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()?;
    flat_json_object(std::str::from_utf8(&bytes).ok()?)
}

/// A flat JSON object of strings, numbers, literals and arrays of strings: the claims an
/// unsecured token carries. `None` for anything else.
fn flat_json_object(text: &str) -> Option<BTreeMap<String, Claim>> {
    let mut rest = text.trim().strip_prefix('{')?.trim_start();
    let mut claims = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('}') {
        return after.trim().is_empty().then_some(claims);
    }
    loop {
        let (name, after) = json_string(rest)?;
        rest = after.trim_start().strip_prefix(':')?.trim_start();
        let (claim, after) = json_value(rest)?;
        claims.insert(name, claim);
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else {
            let after = rest.strip_prefix('}')?;
            return after.trim().is_empty().then_some(claims);
        }
    }
}

fn json_value(text: &str) -> Option<(Claim, &str)> {
    if text.starts_with('"') {
        let (value, rest) = json_string(text)?;
        return Some((Claim::Text(value), rest));
    }
    if let Some(mut rest) = text.strip_prefix('[') {
        loop {
            rest = rest.trim_start();
            if let Some(after) = rest.strip_prefix(']') {
                return Some((Claim::Other, after));
            }
            let (_, after) = json_string(rest)?;
            rest = after.trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    for literal in ["true", "false", "null"] {
        if let Some(rest) = text.strip_prefix(literal) {
            return Some((Claim::Other, rest));
        }
    }
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
        .unwrap_or(text.len());
    let number: f64 = text[..end].parse().ok()?;
    Some((Claim::Number(number), &text[end..]))
}

/// A JSON string at the start of `text` (simple escapes; `\u` only for ASCII).
fn json_string(text: &str) -> Option<(String, &str)> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    let mut value = String::new();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 2..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'u' => {
                    let hex: String = (0..4)
                        .filter_map(|_| chars.next().map(|(_, c)| c))
                        .collect();
                    value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsecured_token_validates_until_it_expires() {
        let now = SystemTime::now();
        let token = unsecured_token("alice", now + Duration::from_secs(60));
        assert!(token.ends_with('.'));
        let valid = validate_unsecured(&token, now).unwrap();
        assert_eq!(valid.principal, "alice");
        assert!(valid.expires_at > now + Duration::from_secs(58));
        assert_eq!(
            validate_unsecured(&token, now + Duration::from_secs(61)),
            Err(INVALID_TOKEN.to_string())
        );
    }

    #[test]
    fn tokens_that_break_the_rules_are_invalid() {
        let enc = |s: &str| URL_SAFE_NO_PAD.encode(s);
        let none = enc(r#"{"alg":"none"}"#);
        let good = enc(r#"{"sub":"a","exp":99999999999,"scope":["x"],"ok":true}"#);
        let now = SystemTime::now();
        assert!(validate_unsecured(&format!("{none}.{good}."), now).is_ok());
        for token in [
            format!("{none}.{good}.sig"),
            format!("{none}.{good}"),
            format!("{}.{good}.", enc(r#"{"alg":"HS256"}"#)),
            format!("{none}.{}.", enc(r#"{"exp":99999999999}"#)),
            format!("{none}.{}.", enc(r#"{"sub":"a"}"#)),
            format!("{none}.{}.", enc(r#"{"sub":"a","exp":"soon"}"#)),
            format!(
                "{none}.{}.",
                enc(r#"{"sub":"a","exp":99999999999,"iat":"x"}"#)
            ),
            format!("{none}.{}.", enc(r#"{"sub":"a","exp":99999999999"#)),
            "not-a-jws".to_string(),
        ] {
            assert!(validate_unsecured(&token, now).is_err(), "{token}");
        }
    }
}
