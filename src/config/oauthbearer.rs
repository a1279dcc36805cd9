//! `sasl.mechanism=OAUTHBEARER` (KIP-255): the token the producer presents comes from a
//! provider the application installs with
//! [`ProducerBuilder::oauth_token_provider`](crate::ProducerBuilder::oauth_token_provider),
//! where Java's client calls the login callback handler named by
//! `sasl.login.callback.handler.class`.
//!
//! The provider is called on a shard thread, once for each authentication: each new
//! connection and each re-authentication. It must not block for long (a shard serves every
//! connection it owns from that one thread): hand it a token already fetched, e.g. one an
//! application thread refreshes ahead of expiry, rather than fetching one over the network
//! inside the call.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A token for one authentication, as Java's `OAuthBearerToken` describes it.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthBearerToken {
    /// The compact JWS serialization of the token (`header.payload.signature`, base64url).
    pub value: String,
    /// When the token expires (Java's `lifetimeMs`, as a wall-clock time). The broker reads
    /// the expiry from the token itself and ends the session by then, announcing the session
    /// lifetime (KIP-368); the producer re-authenticates before that on what the broker
    /// announced, so this field is informational (logs, and the application's own cache).
    pub expires_at: SystemTime,
    /// The authorization id sent with the token (`a=` of RFC 7628); Kafka's broker requires
    /// it to equal the token's principal when given. `None` sends none, as Java's client does.
    pub principal: Option<String>,
    /// SASL extensions (KIP-342), sent as `key=value` after the token. Keys are letters only
    /// and `auth` is reserved.
    pub extensions: Vec<(String, String)>,
}

impl OAuthBearerToken {
    /// A token with its expiry, no authorization id and no extensions.
    pub fn new(value: impl Into<String>, expires_at: SystemTime) -> Self {
        OAuthBearerToken {
            value: value.into(),
            expires_at,
            principal: None,
            extensions: Vec::new(),
        }
    }

    /// A token that expires `lifetime` from now.
    pub fn expiring_in(value: impl Into<String>, lifetime: Duration) -> Self {
        OAuthBearerToken::new(value, SystemTime::now() + lifetime)
    }

    /// The same token, sent with the authorization id `principal`.
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// The same token, with the SASL extension `key=value` added.
    pub fn with_extension(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extensions.push((key.into(), value.into()));
        self
    }
}

impl fmt::Debug for OAuthBearerToken {
    // The token is a credential: it never appears in output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthBearerToken")
            .field("value", &super::security::HIDDEN_VALUE)
            .field("expires_at", &self.expires_at)
            .field("principal", &self.principal)
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// The signature of a token provider: a token, or why none could be had. An error is fatal
/// to the producer, as a refused authentication is.
pub type TokenProviderFn = dyn Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static;

/// The application's token provider, shared by every shard.
#[derive(Clone)]
pub struct OAuthTokenProvider(Arc<TokenProviderFn>);

impl OAuthTokenProvider {
    /// Wraps the application's provider.
    pub fn new(
        provider: impl Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static,
    ) -> Self {
        OAuthTokenProvider(Arc::new(provider))
    }

    /// Asks the provider for a token (on the calling shard's thread).
    pub fn token(&self) -> Result<OAuthBearerToken, String> {
        (self.0)()
    }

    /// Asks the provider for a token, isolated from it: the provider is the application's
    /// code, and a panic in it must not stop the shard that calls it. A panic is that
    /// authentication's failure, as an `Err` is; the reason says which it was.
    pub(crate) fn token_isolated(&self) -> Result<OAuthBearerToken, String> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.0)())) {
            Ok(Ok(token)) => Ok(token),
            Ok(Err(reason)) => Err(format!("the token provider failed: {reason}")),
            Err(panic) => {
                let message = crate::panics::panic_message(panic.as_ref());
                tracing::error!(
                    target: "kacrab::producer",
                    thread = std::thread::current().name().unwrap_or("?"),
                    panic = %message,
                    "the OAUTHBEARER token provider panicked"
                );
                Err(format!("the token provider panicked: {message}"))
            }
        }
    }
}

impl fmt::Debug for OAuthTokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OAuthTokenProvider")
    }
}

/// Two providers are equal when they are the same closure.
impl PartialEq for OAuthTokenProvider {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for OAuthTokenProvider {}
