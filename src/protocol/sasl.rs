//! The SASL mechanisms' messages, without I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512
//! (RFC 5802, RFC 7677), the client's side as a state machine (OAUTHBEARER's too, its messages
//! in `sasl_oauthbearer`) and the primitives the reference broker's side shares.
//!
//! SCRAM as Kafka speaks it (`ScramSaslClient`, `ScramFormatter`): no channel binding (`n,,`),
//! no SASLprep of the password (its UTF-8 bytes are used as they are), `=` and `,` in the user
//! name escaped as `=3D` and `=2C`, and at least 4096 iterations.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// What `Debug` output and errors show in place of a secret (a password, or a
/// `sasl.jaas.config` value that holds one).
pub const HIDDEN_VALUE: &str = "[hidden]";

/// A SASL mechanism kacrab speaks (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616): the password travels as it is.
    Plain,
    /// `SCRAM-SHA-256` (RFC 5802, RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628, KIP-255): a bearer token from the application's provider.
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism's name, as sent in SaslHandshake.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A password: shown as `[hidden]` by `Debug`, read only through [`Password::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
    }

    /// The password itself, for the authentication exchange.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HIDDEN_VALUE)
    }
}

/// Kafka's `ScramMechanism` minimum: fewer iterations from a server is refused.
pub const SCRAM_MIN_ITERATIONS: u32 = 4096;
/// The most iterations a client computes. Kafka's broker refuses credentials above 16384; a
/// server asking for more is refused rather than let it hold a shard busy hashing.
pub const SCRAM_MAX_ITERATIONS: u32 = 16384;

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub fn of(mechanism: SaslMechanism) -> Option<ScramHash> {
        match mechanism {
            SaslMechanism::ScramSha256 => Some(ScramHash::Sha256),
            SaslMechanism::ScramSha512 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// `H(data)`.
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)`.
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes a key of any length, so `new_from_slice` cannot fail.
        match self {
            ScramHash::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("any key length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with HMAC-H, one block of H's length.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }

    /// `ClientKey`, `StoredKey` and `ServerKey` of a salted password.
    pub fn keys(self, salted_password: &[u8]) -> ScramKeys {
        let client_key = self.hmac(salted_password, b"Client Key");
        ScramKeys {
            stored_key: self.hash(&client_key),
            server_key: self.hmac(salted_password, b"Server Key"),
            client_key,
        }
    }
}

pub struct ScramKeys {
    pub client_key: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

pub fn base64_encode(data: &[u8]) -> String {
    BASE64.encode(data)
}

pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    BASE64.decode(text).ok()
}

pub fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// A user name as a SCRAM `saslname`: `=` and `,` escaped.
pub fn escape_username(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The inverse of [`escape_username`]; `None` for a `=` not starting `=3D` or `=2C`.
pub fn unescape_username(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        out.push(match escape {
            "=3D" => '=',
            "=2C" => ',',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The `a=value` attributes of a SCRAM message, in order; `None` if one is not of that form.
pub fn attributes(message: &str) -> Option<Vec<(char, &str)>> {
    message
        .split(',')
        .map(|part| {
            let mut chars = part.chars();
            let name = chars.next()?;
            (chars.next()? == '=' && name.is_ascii_alphabetic()).then(|| (name, &part[2..]))
        })
        .collect()
}

/// How a client exchange went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslClientError {
    /// The server's message does not parse: a broken peer, handled as any malformed answer
    /// (the connection closes and is retried).
    Malformed(String),
    /// The server's message parses but authentication cannot succeed with it (a nonce that is
    /// not ours, too few iterations, a wrong server signature, a server-sent `e=` error).
    Failed(String),
}

/// What the client does after a server message.
#[derive(Debug, PartialEq, Eq)]
pub enum SaslStep {
    /// Send these bytes in the next SaslAuthenticate.
    Send(Vec<u8>),
    /// Authenticated.
    Done,
}

/// The client's side of one exchange.
pub struct SaslClient {
    state: ClientState,
}

enum ClientState {
    /// PLAIN: the one message was sent; the server answers with nothing.
    PlainSent,
    /// SCRAM: client-first sent.
    ScramFirstSent {
        hash: ScramHash,
        password: Password,
        client_nonce: String,
        client_first_bare: String,
    },
    /// SCRAM: client-final sent; the server's signature is expected.
    ScramFinalSent {
        expected_server_signature: Vec<u8>,
    },
    /// OAUTHBEARER: the initial response was sent; an empty answer accepts the token.
    OAuthBearerSent,
    /// OAUTHBEARER: the server refused the token with this JSON error, and the client sent
    /// `\x01` to end the exchange; the server's answer is the failure.
    OAuthBearerRefused {
        error: String,
    },
    Done,
}

impl SaslClient {
    /// Starts an exchange; returns the client and its first message. `nonce` is the SCRAM
    /// client nonce (printable, without `,`), unused by PLAIN.
    pub fn start(
        mechanism: SaslMechanism,
        username: &str,
        password: &Password,
        nonce: String,
    ) -> (SaslClient, Vec<u8>) {
        match ScramHash::of(mechanism) {
            None => {
                // RFC 4616: authzid NUL authcid NUL passwd, with an empty authzid.
                let mut message = Vec::with_capacity(username.len() + password.expose().len() + 2);
                message.push(0);
                message.extend_from_slice(username.as_bytes());
                message.push(0);
                message.extend_from_slice(password.expose().as_bytes());
                let client = SaslClient {
                    state: ClientState::PlainSent,
                };
                (client, message)
            }
            Some(hash) => {
                let client_first_bare = format!("n={},r={nonce}", escape_username(username));
                let message = format!("n,,{client_first_bare}").into_bytes();
                let client = SaslClient {
                    state: ClientState::ScramFirstSent {
                        hash,
                        password: password.clone(),
                        client_nonce: nonce,
                        client_first_bare,
                    },
                };
                (client, message)
            }
        }
    }

    /// Starts an OAUTHBEARER exchange with `initial_response` (see
    /// `sasl_oauthbearer::client_initial_response`).
    pub fn oauthbearer(initial_response: Vec<u8>) -> (SaslClient, Vec<u8>) {
        let client = SaslClient {
            state: ClientState::OAuthBearerSent,
        };
        (client, initial_response)
    }

    /// Takes the server's answer to the last message.
    pub fn on_server_message(&mut self, message: &[u8]) -> Result<SaslStep, SaslClientError> {
        let malformed = |what: &str| SaslClientError::Malformed(what.to_string());
        match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::PlainSent | ClientState::Done => Ok(SaslStep::Done),
            ClientState::OAuthBearerSent if message.is_empty() => Ok(SaslStep::Done),
            ClientState::OAuthBearerSent => {
                // RFC 7628 3.2.2: the client answers an error with a lone kvsep; Kafka's broker
                // then fails the exchange with its own message.
                self.state = ClientState::OAuthBearerRefused {
                    error: String::from_utf8_lossy(message).into_owned(),
                };
                Ok(SaslStep::Send(vec![super::sasl_oauthbearer::SEPARATOR]))
            }
            ClientState::OAuthBearerRefused { error } => Err(SaslClientError::Failed(format!(
                "the broker refused the token: {error}"
            ))),
            ClientState::ScramFirstSent {
                hash,
                password,
                client_nonce,
                client_first_bare,
            } => {
                let server_first = std::str::from_utf8(message)
                    .map_err(|_| malformed("server-first-message is not UTF-8"))?;
                let attrs = attributes(server_first)
                    .ok_or_else(|| malformed("server-first-message is not a=value pairs"))?;
                let (nonce, salt, iterations) = match attrs.as_slice() {
                    [('r', nonce), ('s', salt), ('i', iterations), ..] => {
                        (*nonce, *salt, *iterations)
                    }
                    _ => return Err(malformed("server-first-message lacks r=, s= and i=")),
                };
                let salt = base64_decode(salt)
                    .ok_or_else(|| malformed("server-first-message salt is not base64"))?;
                let iterations: u32 = iterations
                    .parse()
                    .map_err(|_| malformed("server-first-message iteration count"))?;
                if !nonce.starts_with(&client_nonce) || nonce.len() == client_nonce.len() {
                    return Err(SaslClientError::Failed(
                        "the server's nonce does not extend the client's".into(),
                    ));
                }
                if !(SCRAM_MIN_ITERATIONS..=SCRAM_MAX_ITERATIONS).contains(&iterations) {
                    return Err(SaslClientError::Failed(format!(
                        "the server asks for {iterations} iterations, outside \
                         {SCRAM_MIN_ITERATIONS}..={SCRAM_MAX_ITERATIONS}"
                    )));
                }
                let salted = hash.salted_password(password.expose().as_bytes(), &salt, iterations);
                let keys = hash.keys(&salted);
                // "biws" is base64("n,,"), the GS2 header without channel binding.
                let without_proof = format!("c=biws,r={nonce}");
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let client_signature = hash.hmac(&keys.stored_key, auth_message.as_bytes());
                let proof = xor(&keys.client_key, &client_signature);
                self.state = ClientState::ScramFinalSent {
                    expected_server_signature: hash.hmac(&keys.server_key, auth_message.as_bytes()),
                };
                Ok(SaslStep::Send(
                    format!("{without_proof},p={}", base64_encode(&proof)).into_bytes(),
                ))
            }
            ClientState::ScramFinalSent {
                expected_server_signature,
            } => {
                let server_final = std::str::from_utf8(message)
                    .map_err(|_| malformed("server-final-message is not UTF-8"))?;
                let attrs = attributes(server_final)
                    .ok_or_else(|| malformed("server-final-message is not a=value pairs"))?;
                match attrs.first() {
                    Some(('e', error)) => Err(SaslClientError::Failed(format!(
                        "the server refused the proof: {error}"
                    ))),
                    Some(('v', signature)) => {
                        let signature = base64_decode(signature).ok_or_else(|| {
                            malformed("server-final-message signature is not base64")
                        })?;
                        if signature == expected_server_signature {
                            Ok(SaslStep::Done)
                        } else {
                            Err(SaslClientError::Failed(
                                "the server's signature is wrong: it does not know the \
                                 credentials"
                                    .into(),
                            ))
                        }
                    }
                    _ => Err(malformed("server-final-message lacks v= or e=")),
                }
            }
        }
    }
}

/// A SCRAM client nonce from the operating system's CSPRNG: 24 random bytes in base64.
pub fn client_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no random bytes for a nonce: {e}"))?;
    Ok(base64_encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256.
    #[test]
    fn the_rfc_7677_exchange_gives_its_proof_and_accepts_its_signature() {
        let password = Password::new("pencil");
        let (mut client, first) = SaslClient::start(
            SaslMechanism::ScramSha256,
            "user",
            &password,
            "rOprNGfwEbeRWgbNEkqO".to_string(),
        );
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let step = client
            .on_server_message(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            )
            .unwrap();
        assert_eq!(
            step,
            SaslStep::Send(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
                    .to_vec()
            )
        );
        assert_eq!(
            client
                .on_server_message(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            SaslStep::Done
        );
    }

    #[test]
    fn a_wrong_server_signature_fails_authentication() {
        let (mut client, _) = SaslClient::start(
            SaslMechanism::ScramSha256,
            "user",
            &Password::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".to_string(),
        );
        client
            .on_server_message(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            )
            .unwrap();
        let bad = base64_encode(&[7u8; 32]);
        assert!(matches!(
            client.on_server_message(format!("v={bad}").as_bytes()),
            Err(SaslClientError::Failed(_))
        ));
    }

    #[test]
    fn a_foreign_nonce_or_few_iterations_fail_and_garbage_is_malformed() {
        let start = || {
            SaslClient::start(
                SaslMechanism::ScramSha512,
                "u",
                &Password::new("p"),
                "abc".to_string(),
            )
            .0
        };
        assert!(matches!(
            start().on_server_message(b"r=xyz123,s=c2FsdA==,i=4096"),
            Err(SaslClientError::Failed(_))
        ));
        assert!(matches!(
            start().on_server_message(b"r=abc123,s=c2FsdA==,i=1000"),
            Err(SaslClientError::Failed(_))
        ));
        assert!(matches!(
            start().on_server_message(b"r=abc123,s=c2FsdA==,i=99999999"),
            Err(SaslClientError::Failed(_))
        ));
        for garbage in [
            &b""[..],
            b"\xff\xfe",
            b"r=abc123",
            b"r=abc1,s=!!,i=4096",
            b"junk",
        ] {
            assert!(matches!(
                start().on_server_message(garbage),
                Err(SaslClientError::Malformed(_))
            ));
        }
    }

    #[test]
    fn plain_sends_the_rfc_4616_message() {
        let (mut client, first) = SaslClient::start(
            SaslMechanism::Plain,
            "alice",
            &Password::new("secret"),
            String::new(),
        );
        assert_eq!(first, b"\0alice\0secret");
        assert_eq!(client.on_server_message(b"").unwrap(), SaslStep::Done);
    }

    #[test]
    fn user_names_escape_and_unescape() {
        assert_eq!(escape_username("a=b,c"), "a=3Db=2Cc");
        assert_eq!(unescape_username("a=3Db=2Cc").as_deref(), Some("a=b,c"));
        assert_eq!(unescape_username("a=4x"), None);
        assert_eq!(unescape_username("a="), None);
    }
}
