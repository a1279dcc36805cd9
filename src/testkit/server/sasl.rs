//! A `SASL_PLAINTEXT` listener: the reference broker's side of SaslHandshake v0..=v1 and
//! SaslAuthenticate v0..=v2 with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (tokens checked as
//! `oauthbearer.rs` says), following Kafka's `SaslServerAuthenticator`:
//! - after SaslHandshake v0 the mechanism's tokens travel as bare size-prefixed frames, with
//!   no Kafka header (before KIP-152); a failure then closes the connection unanswered;
//! - before the handshake only ApiVersions and SaslHandshake are served; any other request
//!   closes the connection unanswered;
//! - a mechanism not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, and
//!   the connection closes;
//! - during the exchange a request other than SaslAuthenticate closes the connection (Kafka
//!   first answers it ILLEGAL_SASL_STATE in that API's error response; the client sees the
//!   close either way);
//! - wrong credentials are answered SASL_AUTHENTICATION_FAILED, and the connection closes;
//! - once authenticated, the connection is served as any other; SaslAuthenticate then is
//!   answered ILLEGAL_SASL_STATE (`KafkaApis`), and SaslHandshake v1 begins a
//!   re-authentication (KIP-368): the exchange runs again on the same connection, and until it
//!   completes only SaslAuthenticate is served. Kafka also refuses a re-authentication that
//!   changes the mechanism or the principal; this listener does not check those;
//! - with a session lifetime (`connections.max.reauth.ms`, KIP-368), SaslAuthenticate v1+
//!   announces it and a request after it other than SaslHandshake closes the connection. An
//!   OAUTHBEARER token's expiry bounds the session too: the
//!   lifetime is the smaller of the two, or the token's remaining lifetime alone without
//!   `connections.max.reauth.ms` (`calcCompletionTimesAndReturnSessionLifetimeMs`);
//! - an OAUTHBEARER token the validator refuses is answered, without a Kafka error, with the
//!   JSON status; the client's `\x01` after it is answered SASL_AUTHENTICATION_FAILED carrying
//!   that status, and the connection closes (`OAuthBearerSaslServer`).
//!
//! SCRAM credentials are kept as Kafka keeps them (`ScramCredential`): a salt, the iteration
//! count (4096), StoredKey and ServerKey; never the password.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::protocol::sasl::{
    attributes, base64_decode, base64_encode, unescape_username, xor, ScramHash,
};
use crate::protocol::sasl_oauthbearer::{parse_client_initial_response, SEPARATOR};

use super::oauthbearer::OAuthBearerValidator;

/// Kafka's error codes for the exchange.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// The iteration count of every stored SCRAM credential (Kafka's minimum and usual choice).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// The SaslHandshake and SaslAuthenticate versions a SASL listener implements (added to every
/// broker's ApiVersions table).
pub const IMPLEMENTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// What a SASL listener accepts: its enabled mechanisms and its users.
#[derive(Debug, Clone)]
pub struct SaslListener {
    mechanisms: Vec<String>,
    /// KIP-368 `connections.max.reauth.ms`: how long an authentication lasts.
    session_lifetime: Option<Duration>,
    plain: BTreeMap<String, String>,
    scram: BTreeMap<(ScramHashName, String), ScramCredential>,
    oauthbearer: OAuthBearerValidator,
}

type ScramHashName = &'static str;

/// A SCRAM credential as Kafka stores it.
#[derive(Debug, Clone)]
pub(crate) struct ScramCredential {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl SaslListener {
    /// A listener enabling `mechanisms` (any names: a broker offering only mechanisms kacrab
    /// lacks is a listener too), with no user yet.
    pub fn new(mechanisms: &[&str]) -> SaslListener {
        SaslListener {
            mechanisms: mechanisms.iter().map(|m| m.to_string()).collect(),
            session_lifetime: None,
            plain: BTreeMap::new(),
            scram: BTreeMap::new(),
            oauthbearer: OAuthBearerValidator::unsecured(),
        }
    }

    /// OAUTHBEARER tokens are checked by `validate` (the principal and expiry of a token, or
    /// the error status to refuse it with) instead of Kafka's unsecured validator.
    pub fn oauthbearer_validator(
        mut self,
        validate: impl Fn(&str) -> Result<super::oauthbearer::ValidatedToken, String>
            + Send
            + Sync
            + 'static,
    ) -> SaslListener {
        self.oauthbearer = OAuthBearerValidator::new(validate);
        self
    }

    /// Sessions last `lifetime` (Kafka's `connections.max.reauth.ms`): SaslAuthenticate v1+
    /// says so in `session_lifetime_ms`, and a request on the connection after it closes the
    /// connection unanswered.
    pub fn session_lifetime(mut self, lifetime: Duration) -> SaslListener {
        self.session_lifetime = Some(lifetime);
        self
    }

    /// Adds a user for PLAIN and SCRAM-SHA-256/512, its SCRAM credentials salted and stored.
    pub fn user(mut self, name: &str, password: &str) -> SaslListener {
        self.plain.insert(name.to_string(), password.to_string());
        for (label, hash) in [
            ("SCRAM-SHA-256", ScramHash::Sha256),
            ("SCRAM-SHA-512", ScramHash::Sha512),
        ] {
            // A salt per user and hash; its value only has to differ between them.
            let salt = hash.hash(format!("{label}/{name}").as_bytes())[..16].to_vec();
            let salted = hash.salted_password(password.as_bytes(), &salt, SCRAM_ITERATIONS);
            let keys = hash.keys(&salted);
            self.scram.insert(
                (label, name.to_string()),
                ScramCredential {
                    salt,
                    iterations: SCRAM_ITERATIONS,
                    stored_key: keys.stored_key,
                    server_key: keys.server_key,
                },
            );
        }
        self
    }

    fn scram_hash(mechanism: &str) -> Option<(ScramHashName, ScramHash)> {
        match mechanism {
            "SCRAM-SHA-256" => Some(("SCRAM-SHA-256", ScramHash::Sha256)),
            "SCRAM-SHA-512" => Some(("SCRAM-SHA-512", ScramHash::Sha512)),
            _ => None,
        }
    }
}

/// Where one connection is in the exchange.
#[derive(Debug)]
pub(crate) enum SaslSession {
    /// Waiting for SaslHandshake (ApiVersions may come first).
    Handshake,
    /// PLAIN chosen; its one message is expected.
    Plain,
    /// SCRAM chosen; client-first is expected.
    ScramFirst {
        label: ScramHashName,
        hash: ScramHash,
    },
    /// server-first sent; client-final is expected.
    ScramFinal {
        hash: ScramHash,
        credential: ScramCredential,
        nonce: String,
        /// client-first-message-bare "," server-first-message
        auth_prefix: String,
    },
    /// OAUTHBEARER chosen; the client's initial response is expected.
    OAuthBearer,
    /// The token was refused with this JSON error; the client's `\x01` is expected.
    OAuthBearerRefused { error: String },
    /// Authenticated; with a session lifetime, until `ends_at`.
    Authenticated { ends_at: Option<Instant> },
    /// The exchange failed or broke: the connection ends.
    Closed,
}

/// What the connection does with a request before it is authenticated.
pub(crate) enum SaslStep {
    /// Serve the request normally (ApiVersions).
    Serve(Bytes),
    /// Write this answer frame (length prefix included, unpatched) and continue.
    Respond(BytesMut),
    /// Write this answer frame, then close.
    RespondThenClose(BytesMut),
    /// Write this answer frame; the client's next frames are bare tokens (SaslHandshake v0).
    RespondThenBareTokens(BytesMut),
    /// Close without answering.
    Close,
}

impl SaslSession {
    pub(crate) fn is_authenticated(&self) -> bool {
        matches!(self, SaslSession::Authenticated { .. })
    }

    /// Whether an authenticated session has ended: Kafka closes such a connection at its next
    /// request (KIP-368) unless that request begins a re-authentication.
    pub(crate) fn has_ended(&self, now: Instant) -> bool {
        matches!(self, SaslSession::Authenticated { ends_at: Some(end) } if now >= *end)
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self, SaslSession::Closed)
    }
}

/// Serves one request frame (length prefix removed) of an unauthenticated connection.
/// `record` is told each finished authentication: its mechanism and whether it succeeded.
pub(crate) fn step(
    listener: &SaslListener,
    session: &mut SaslSession,
    frame: Bytes,
    nonce_seed: u64,
    now: Instant,
    record: &dyn Fn(&str, bool),
) -> SaslStep {
    if frame.len() < 8 {
        return SaslStep::Close;
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(api_key).ok();
    match (api, &*session) {
        (Some(ApiKey::ApiVersions), SaslSession::Handshake) => SaslStep::Serve(frame),
        (Some(ApiKey::SaslHandshake), SaslSession::Handshake) => {
            handshake(listener, session, frame, version)
        }
        // Kafka: "Unexpected Kafka request of type ... during SASL handshake": closed.
        (_, SaslSession::Handshake) => SaslStep::Close,
        (Some(ApiKey::SaslAuthenticate), _) => {
            authenticate(listener, session, frame, version, nonce_seed, now, record)
        }
        // Any other request during the exchange ends it (see the module comment).
        _ => SaslStep::Close,
    }
}

fn header(frame: &mut Bytes, api: ApiKey, version: i16) -> Option<RequestHeader> {
    RequestHeader::decode(frame, api.request_header_version(version)).ok()
}

fn response<R: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Option<BytesMut> {
    let mut out = BytesMut::with_capacity(256);
    out.extend_from_slice(&[0; 4]);
    kafka_protocol::messages::ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api.response_header_version(version))
        .ok()?;
    body.encode(&mut out, version).ok()?;
    Some(out)
}

fn handshake(
    listener: &SaslListener,
    session: &mut SaslSession,
    mut frame: Bytes,
    version: i16,
) -> SaslStep {
    let api = ApiKey::SaslHandshake;
    let Some(header) = header(&mut frame, api, version) else {
        return SaslStep::Close;
    };
    let Ok(request) = SaslHandshakeRequest::decode(&mut frame, version) else {
        return SaslStep::Close;
    };
    let mechanism = request.mechanism.as_str();
    let enabled = listener.mechanisms.iter().any(|m| m == mechanism);
    let answer = SaslHandshakeResponse::default()
        .with_error_code(if enabled {
            0
        } else {
            UNSUPPORTED_SASL_MECHANISM
        })
        .with_mechanisms(
            listener
                .mechanisms
                .iter()
                .map(|m| StrBytes::from_string(m.clone()))
                .collect(),
        );
    let Some(out) = response(api, version, header.correlation_id, &answer) else {
        return SaslStep::Close;
    };
    if !enabled {
        return SaslStep::RespondThenClose(out);
    }
    *session = match SaslListener::scram_hash(mechanism) {
        Some((label, hash)) => SaslSession::ScramFirst { label, hash },
        None if mechanism == "PLAIN" => SaslSession::Plain,
        None if mechanism == "OAUTHBEARER" => SaslSession::OAuthBearer,
        // Enabled but not implemented here: the exchange cannot proceed.
        None => return SaslStep::RespondThenClose(out),
    };
    if version == 0 {
        SaslStep::RespondThenBareTokens(out)
    } else {
        SaslStep::Respond(out)
    }
}

fn authenticate(
    listener: &SaslListener,
    session: &mut SaslSession,
    mut frame: Bytes,
    version: i16,
    nonce_seed: u64,
    now: Instant,
    record: &dyn Fn(&str, bool),
) -> SaslStep {
    let api = ApiKey::SaslAuthenticate;
    let Some(header) = header(&mut frame, api, version) else {
        return SaslStep::Close;
    };
    let Ok(request) = SaslAuthenticateRequest::decode(&mut frame, version) else {
        return SaslStep::Close;
    };
    let reply = |error: i16, message: Option<&str>, auth_bytes: Vec<u8>, lifetime_ms: i64| {
        let answer = SaslAuthenticateResponse::default()
            .with_error_code(error)
            .with_error_message(message.map(|m| StrBytes::from_string(m.to_string())))
            .with_auth_bytes(Bytes::from(auth_bytes))
            .with_session_lifetime_ms(lifetime_ms);
        response(api, version, header.correlation_id, &answer)
    };
    let (error, message, auth_bytes) = match evaluate(
        listener,
        session,
        &request.auth_bytes,
        nonce_seed,
        now,
        record,
    ) {
        Ok(answer) => (0, None, answer),
        Err(TokenError::Failed(mechanism)) => (
            SASL_AUTHENTICATION_FAILED,
            Some(format!(
                "Authentication failed during authentication due to invalid credentials \
                     with SASL mechanism {mechanism}"
            )),
            Vec::new(),
        ),
        Err(TokenError::Refused(error)) => (SASL_AUTHENTICATION_FAILED, Some(error), Vec::new()),
        Err(TokenError::IllegalState) => (
            ILLEGAL_SASL_STATE,
            Some("Unexpected SaslAuthenticate".to_string()),
            Vec::new(),
        ),
    };
    // 0 until the exchange completes, as Kafka answers; then what is left of the session,
    // rounded up so that a lifetime of whole milliseconds is announced as set.
    let lifetime_ms = match session {
        SaslSession::Authenticated { ends_at: Some(end) } => {
            let left = end.saturating_duration_since(now);
            i64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
        }
        _ => 0,
    };
    match reply(error, message.as_deref(), auth_bytes, lifetime_ms) {
        Some(out) if error == 0 => SaslStep::Respond(out),
        Some(out) => SaslStep::RespondThenClose(out),
        None => SaslStep::Close,
    }
}

/// One bare token after SaslHandshake v0: the server's bare answer token, or `None` to close
/// the connection (Kafka has no way to say why without a header).
pub(crate) fn bare_token(
    listener: &SaslListener,
    session: &mut SaslSession,
    token: &[u8],
    nonce_seed: u64,
    now: Instant,
    record: &dyn Fn(&str, bool),
) -> Option<Vec<u8>> {
    match evaluate(listener, session, token, nonce_seed, now, record) {
        Ok(answer) => Some(answer),
        Err(_) => {
            *session = SaslSession::Closed;
            None
        }
    }
}

/// Why a client token ended the exchange.
enum TokenError {
    /// Wrong credentials, an unknown user or a message that breaks the mechanism.
    Failed(&'static str),
    /// OAUTHBEARER's end of a refused token: the JSON error, as the failure's message.
    Refused(String),
    /// No exchange under way.
    IllegalState,
}

/// Runs one client token through the session's mechanism: the server's answer token, with
/// the session advanced (to `Authenticated` when done), or why it failed. `record` is told
/// each finished authentication.
fn evaluate(
    listener: &SaslListener,
    session: &mut SaslSession,
    token: &[u8],
    nonce_seed: u64,
    now: Instant,
    record: &dyn Fn(&str, bool),
) -> Result<Vec<u8>, TokenError> {
    let failed = |mechanism: &'static str| {
        record(mechanism, false);
        Err(TokenError::Failed(mechanism))
    };
    match std::mem::replace(session, SaslSession::Closed) {
        SaslSession::Plain => {
            // authzid NUL authcid NUL passwd
            let parts: Vec<&[u8]> = token.split(|&b| b == 0).collect();
            let ok = match parts.as_slice() {
                [authzid, user, password] => {
                    (authzid.is_empty() || authzid == user)
                        && std::str::from_utf8(user)
                            .ok()
                            .and_then(|u| listener.plain.get(u))
                            .is_some_and(|p| p.as_bytes() == *password)
                }
                _ => false,
            };
            if !ok {
                return failed("PLAIN");
            }
            *session = SaslSession::Authenticated {
                ends_at: listener.session_lifetime.map(|d| now + d),
            };
            record("PLAIN", true);
            Ok(Vec::new())
        }
        SaslSession::ScramFirst { label, hash } => {
            let Some(first) = std::str::from_utf8(token).ok() else {
                return failed(label);
            };
            // gs2-header "n,," (no channel binding; "y,," would mean the client could bind).
            let Some(bare) = first
                .strip_prefix("n,,")
                .or_else(|| first.strip_prefix("y,,"))
            else {
                return failed(label);
            };
            let (user, client_nonce) = match attributes(bare).as_deref() {
                Some([('n', user), ('r', nonce), ..]) => (*user, *nonce),
                _ => return failed(label),
            };
            let Some(credential) =
                unescape_username(user).and_then(|u| listener.scram.get(&(label, u)).cloned())
            else {
                return failed(label);
            };
            let server_nonce = base64_encode(&hash.hash(&nonce_seed.to_be_bytes())[..18]);
            let nonce = format!("{client_nonce}{server_nonce}");
            let server_first = format!(
                "r={nonce},s={},i={}",
                base64_encode(&credential.salt),
                credential.iterations
            );
            let auth_prefix = format!("{bare},{server_first}");
            *session = SaslSession::ScramFinal {
                hash,
                credential,
                nonce,
                auth_prefix,
            };
            Ok(server_first.into_bytes())
        }
        SaslSession::ScramFinal {
            hash,
            credential,
            nonce,
            auth_prefix,
        } => {
            let label = if hash == ScramHash::Sha256 {
                "SCRAM-SHA-256"
            } else {
                "SCRAM-SHA-512"
            };
            let Some(last) = std::str::from_utf8(token).ok() else {
                return failed(label);
            };
            let Some((without_proof, proof)) = last.rsplit_once(",p=") else {
                return failed(label);
            };
            let binding_and_nonce = attributes(without_proof);
            let nonce_ok = matches!(
                binding_and_nonce.as_deref(),
                Some([('c', "biws"), ('r', r), ..]) if *r == nonce
            );
            let Some(proof) = base64_decode(proof).filter(|_| nonce_ok) else {
                return failed(label);
            };
            let auth_message = format!("{auth_prefix},{without_proof}");
            let client_signature = hash.hmac(&credential.stored_key, auth_message.as_bytes());
            let client_key = xor(&proof, &client_signature);
            if proof.len() != client_signature.len()
                || hash.hash(&client_key) != credential.stored_key
            {
                return failed(label);
            }
            let server_signature = hash.hmac(&credential.server_key, auth_message.as_bytes());
            *session = SaslSession::Authenticated {
                ends_at: listener.session_lifetime.map(|d| now + d),
            };
            record(label, true);
            let server_final = format!("v={}", base64_encode(&server_signature));
            Ok(server_final.into_bytes())
        }
        SaslSession::OAuthBearer => {
            let Some(response) = parse_client_initial_response(token) else {
                return failed("OAUTHBEARER");
            };
            let validated = match listener.oauthbearer.validate(&response.token) {
                Ok(validated) => validated,
                Err(status) => {
                    record("OAUTHBEARER", false);
                    let error = format!(r#"{{"status":"{status}"}}"#);
                    *session = SaslSession::OAuthBearerRefused {
                        error: error.clone(),
                    };
                    return Ok(error.into_bytes());
                }
            };
            // Kafka: an authorization id must be the token's principal.
            if response.authzid.is_some_and(|a| a != validated.principal) {
                return failed("OAUTHBEARER");
            }
            let token_left = validated
                .expires_at
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            let lifetime = match listener.session_lifetime {
                Some(max) => max.min(token_left),
                None => token_left,
            };
            *session = SaslSession::Authenticated {
                ends_at: Some(now + lifetime),
            };
            record("OAUTHBEARER", true);
            Ok(Vec::new())
        }
        SaslSession::OAuthBearerRefused { error } => {
            if token == [SEPARATOR] {
                Err(TokenError::Refused(error))
            } else {
                Err(TokenError::Failed("OAUTHBEARER"))
            }
        }
        state @ (SaslSession::Handshake | SaslSession::Authenticated { .. }) => {
            *session = state;
            Err(TokenError::IllegalState)
        }
        SaslSession::Closed => Err(TokenError::IllegalState),
    }
}

/// SaslAuthenticate, or SaslHandshake v0 (which cannot begin a re-authentication), on an
/// authenticated connection: ILLEGAL_SASL_STATE, as `KafkaApis` answers them.
pub(crate) fn answer_after_authentication(
    api: ApiKey,
    version: i16,
    out: &mut BytesMut,
) -> super::handlers::HandlerResult {
    match api {
        ApiKey::SaslHandshake => SaslHandshakeResponse::default()
            .with_error_code(ILLEGAL_SASL_STATE)
            .encode(out, version)?,
        _ => SaslAuthenticateResponse::default()
            .with_error_code(ILLEGAL_SASL_STATE)
            .encode(out, version)?,
    }
    Ok(super::handlers::Reply::Respond)
}
