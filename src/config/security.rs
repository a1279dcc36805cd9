//! `security.protocol`, `sasl.mechanism` and `sasl.jaas.config`: how the producer
//! authenticates to brokers, and whether connections are encrypted (the `ssl.*` keys are read
//! in `tls`).
//!
//! kacrab speaks `PLAINTEXT`, `SSL`, and `SASL_PLAINTEXT` and `SASL_SSL` with the PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER mechanisms. Credentials come from
//! `sasl.jaas.config` written as the Java client reads it (Kafka's `JaasConfig`): one login
//! module, a control flag, `key=value` options and a closing `;`. A password never appears in
//! an error or in `Debug` output. OAUTHBEARER's token comes from the application's provider
//! (see [`super::oauthbearer`]); its `sasl.jaas.config` may be left out or name
//! `OAuthBearerLoginModule` with no options.

// The mechanism and the password are the SASL exchange's own types (the protocol layer takes
// them as they are); what `sasl.mechanism` and `sasl.jaas.config` add to them is here.
pub use crate::protocol::sasl::{Password, SaslMechanism, HIDDEN_VALUE};

use super::oauthbearer::OAuthTokenProvider;
use super::tls::{ExplicitTls, TlsConfig};
use super::{keys, parse, ConfigError};

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// `PLAINTEXT`: no authentication, no encryption.
    #[default]
    Plaintext,
    /// `SASL_PLAINTEXT`: SASL authentication on every new connection, no encryption.
    SaslPlaintext,
    /// `SSL`: TLS; the broker may authenticate the producer by its certificate.
    Ssl,
    /// `SASL_SSL`: TLS, then SASL authentication inside it.
    SaslSsl,
}

impl SecurityProtocol {
    /// The property value.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Connections run TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl SaslMechanism {
    /// The login module Java pairs with the mechanism.
    pub fn login_module(self) -> &'static str {
        match self {
            SaslMechanism::Plain => PLAIN_LOGIN_MODULE,
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => SCRAM_LOGIN_MODULE,
            SaslMechanism::OAuthBearer => OAUTHBEARER_LOGIN_MODULE,
        }
    }
}

const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
const OAUTHBEARER_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

/// The SASL settings of a `SASL_PLAINTEXT` or `SASL_SSL` producer.
///
/// Invariant: `token_provider` is set exactly when `mechanism` is OAUTHBEARER, and then
/// `username` and `password` are empty (the token is the credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// `sasl.mechanism`.
    pub mechanism: SaslMechanism,
    /// The `username` option of `sasl.jaas.config`.
    pub username: String,
    /// The `password` option of `sasl.jaas.config`.
    pub password: Password,
    /// The OAUTHBEARER token provider set in code.
    pub token_provider: Option<OAuthTokenProvider>,
}

/// The security keys as set, parsed; checked against each other in [`ExplicitSecurity::build`].
#[derive(Debug, Clone, Default)]
pub(super) struct ExplicitSecurity {
    protocol: Option<SecurityProtocol>,
    mechanism: Option<SaslMechanism>,
    jaas: Option<JaasEntry>,
    token_provider: Option<OAuthTokenProvider>,
    tls: ExplicitTls,
}

/// The effective security settings.
pub(super) struct Security {
    pub protocol: SecurityProtocol,
    pub sasl: Option<SaslConfig>,
    pub tls: Option<TlsConfig>,
}

/// The one login module of a `sasl.jaas.config`.
#[derive(Debug, Clone)]
struct JaasEntry {
    module: String,
    /// Required by PLAIN and SCRAM, checked once the mechanism is known.
    username: Option<String>,
    password: Option<Password>,
}

impl ExplicitSecurity {
    /// Parses one of the security keys; `false` if `key` is not one of them.
    pub(super) fn apply(&mut self, key: &str, raw: &str) -> Result<bool, ConfigError> {
        match key {
            keys::SECURITY_PROTOCOL => self.protocol = Some(protocol(key, raw)?),
            keys::SASL_MECHANISM => self.mechanism = Some(mechanism(key, raw)?),
            keys::SASL_JAAS_CONFIG => self.jaas = Some(jaas_config(key, raw)?),
            _ => return self.tls.apply(key, raw),
        }
        Ok(true)
    }

    /// The OAUTHBEARER token provider (set in code, not by a property).
    pub(super) fn set_token_provider(&mut self, provider: OAuthTokenProvider) {
        self.token_provider = Some(provider);
    }

    /// The effective protocol, SASL and TLS settings, or the rule the keys break together.
    pub(super) fn build(self) -> Result<Security, ConfigError> {
        use keys::{SASL_JAAS_CONFIG, SASL_MECHANISM, SECURITY_PROTOCOL};
        let protocol = self.protocol.unwrap_or_default();
        let tls = if protocol.uses_tls() {
            Some(self.tls.build()?)
        } else {
            // Java ignores `ssl.*` keys without TLS; a truststore or a client certificate that
            // would never be used is more likely a forgotten `security.protocol` than an intent.
            let stores = self.tls.stores_set();
            if let Some(first) = stores.first() {
                let mut keys: Vec<String> = stores.iter().map(|k| k.to_string()).collect();
                keys.push(SECURITY_PROTOCOL.into());
                return Err(ConfigError::Conflict {
                    keys,
                    rule: format!(
                        "`{first}` is set but `security.protocol` is {}, which does not use TLS; \
                         set `security.protocol=SSL` or `SASL_SSL`",
                        protocol.as_str()
                    ),
                });
            }
            None
        };
        if !protocol.uses_sasl() {
            // Java ignores SASL keys without SASL; credentials that would never be sent are
            // more likely a forgotten `security.protocol` than an intent.
            if self.jaas.is_some() {
                let fix = if protocol.uses_tls() {
                    "SASL_SSL"
                } else {
                    "SASL_PLAINTEXT"
                };
                return Err(ConfigError::Conflict {
                    keys: vec![SASL_JAAS_CONFIG.into(), SECURITY_PROTOCOL.into()],
                    rule: format!(
                        "`sasl.jaas.config` is set but `security.protocol` is {}, which never \
                         sends it; set `security.protocol={fix}`",
                        protocol.as_str()
                    ),
                });
            }
            if self.token_provider.is_some() {
                return Err(token_provider_unused(protocol.as_str(), None));
            }
            return Ok(Security {
                protocol,
                sasl: None,
                tls,
            });
        }
        let Some(mechanism) = self.mechanism else {
            return Err(ConfigError::Conflict {
                keys: vec![SASL_MECHANISM.into(), SECURITY_PROTOCOL.into()],
                rule: format!(
                    "`security.protocol={}` needs `sasl.mechanism`: its Java default, GSSAPI, is \
                     not supported; set PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
                    protocol.as_str()
                ),
            });
        };
        if mechanism == SaslMechanism::OAuthBearer {
            return oauthbearer(protocol, self.jaas, self.token_provider, tls);
        }
        if self.token_provider.is_some() {
            return Err(token_provider_unused(protocol.as_str(), Some(mechanism)));
        }
        let Some(jaas) = self.jaas else {
            return Err(ConfigError::Conflict {
                keys: vec![SASL_JAAS_CONFIG.into(), SECURITY_PROTOCOL.into()],
                rule: format!(
                    "`security.protocol={}` needs `sasl.jaas.config` with the credentials, e.g. \
                     `{} required username=\"alice\" password=\"...\";` (a JAAS file named by \
                     a system property is not read)",
                    protocol.as_str(),
                    mechanism.login_module()
                ),
            });
        };
        if jaas.module != mechanism.login_module() {
            return Err(ConfigError::Conflict {
                keys: vec![SASL_JAAS_CONFIG.into(), SASL_MECHANISM.into()],
                rule: format!(
                    "`sasl.jaas.config` names the login module {} but `sasl.mechanism={}` needs \
                     {}",
                    jaas.module,
                    mechanism,
                    mechanism.login_module()
                ),
            });
        }
        let missing = |option: &str| {
            parse::invalid(
                SASL_JAAS_CONFIG,
                HIDDEN_VALUE,
                format!("the login module {} has no `{option}` option", jaas.module),
            )
        };
        Ok(Security {
            protocol,
            sasl: Some(SaslConfig {
                mechanism,
                username: jaas.username.clone().ok_or_else(|| missing("username"))?,
                password: jaas.password.clone().ok_or_else(|| missing("password"))?,
                token_provider: None,
            }),
            tls,
        })
    }
}

/// OAUTHBEARER's settings: the provider is required; `sasl.jaas.config`, if set, must name
/// `OAuthBearerLoginModule` (its options, such as `unsecuredLoginStringClaim_sub`, configure
/// Java's own token sources and mean nothing here).
fn oauthbearer(
    protocol: SecurityProtocol,
    jaas: Option<JaasEntry>,
    provider: Option<OAuthTokenProvider>,
    tls: Option<TlsConfig>,
) -> Result<Security, ConfigError> {
    if let Some(jaas) = jaas.filter(|j| j.module != OAUTHBEARER_LOGIN_MODULE) {
        return Err(ConfigError::Conflict {
            keys: vec![keys::SASL_JAAS_CONFIG.into(), keys::SASL_MECHANISM.into()],
            rule: format!(
                "`sasl.jaas.config` names the login module {} but `sasl.mechanism=OAUTHBEARER` \
                 needs {OAUTHBEARER_LOGIN_MODULE}",
                jaas.module
            ),
        });
    }
    let Some(provider) = provider else {
        return Err(parse::invalid(
            keys::SASL_MECHANISM,
            "OAUTHBEARER",
            "needs a token provider: install one with `ProducerBuilder::oauth_token_provider` \
             (the login callback handler classes of Java are not loaded)",
        ));
    };
    Ok(Security {
        protocol,
        sasl: Some(SaslConfig {
            mechanism: SaslMechanism::OAuthBearer,
            username: String::new(),
            password: Password::new(""),
            token_provider: Some(provider),
        }),
        tls,
    })
}

/// A token provider with a mechanism that never calls it: more likely a forgotten
/// `sasl.mechanism` than an intent.
fn token_provider_unused(protocol: &str, mechanism: Option<SaslMechanism>) -> ConfigError {
    let now = match mechanism {
        Some(mechanism) => format!("`sasl.mechanism` is {mechanism}"),
        None => format!("`security.protocol` is {protocol}, which does not use SASL"),
    };
    ConfigError::Conflict {
        keys: vec![keys::SASL_MECHANISM.into(), keys::SECURITY_PROTOCOL.into()],
        rule: format!(
            "an OAUTHBEARER token provider is installed but {now}; set \
             `sasl.mechanism=OAUTHBEARER` under SASL_PLAINTEXT or SASL_SSL"
        ),
    }
}

/// `security.protocol`: case-insensitive, as Java's `CaseInsensitiveValidString`.
fn protocol(key: &str, raw: &str) -> Result<SecurityProtocol, ConfigError> {
    let v = raw.trim();
    if v.eq_ignore_ascii_case("PLAINTEXT") {
        Ok(SecurityProtocol::Plaintext)
    } else if v.eq_ignore_ascii_case("SASL_PLAINTEXT") {
        Ok(SecurityProtocol::SaslPlaintext)
    } else if v.eq_ignore_ascii_case("SSL") {
        Ok(SecurityProtocol::Ssl)
    } else if v.eq_ignore_ascii_case("SASL_SSL") {
        Ok(SecurityProtocol::SaslSsl)
    } else {
        Err(parse::invalid(
            key,
            raw,
            "must be one of PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL",
        ))
    }
}

/// `sasl.mechanism`: case-sensitive, as Java compares mechanism names.
fn mechanism(key: &str, raw: &str) -> Result<SaslMechanism, ConfigError> {
    match raw.trim() {
        "PLAIN" => Ok(SaslMechanism::Plain),
        "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
        "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
        "OAUTHBEARER" => Ok(SaslMechanism::OAuthBearer),
        "GSSAPI" => Err(parse::invalid(
            key,
            raw,
            "is not supported yet; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
        )),
        _ => Err(parse::invalid(
            key,
            raw,
            "must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        )),
    }
}

/// An error about `sasl.jaas.config`; the value is never quoted, it holds a password.
fn jaas_invalid(key: &str, rule: impl Into<String>) -> ConfigError {
    parse::invalid(key, HIDDEN_VALUE, rule)
}

fn jaas_config(key: &str, raw: &str) -> Result<JaasEntry, ConfigError> {
    let entries = parse_jaas(raw).map_err(|rule| jaas_invalid(key, rule))?;
    let [entry] = <[_; 1]>::try_from(entries).map_err(|entries: Vec<RawJaasEntry>| {
        jaas_invalid(
            key,
            format!(
                "holds {} login modules; write exactly one, e.g. `{PLAIN_LOGIN_MODULE} required \
                 username=\"alice\" password=\"...\";`",
                entries.len()
            ),
        )
    })?;
    let mut username = None;
    let mut password = None;
    for (name, value) in entry.options {
        match name.as_str() {
            "username" => username = Some(value),
            "password" => password = Some(Password::new(value)),
            // Other options (`serviceName`, `tokenauth`, ...) mean nothing to these modules.
            _ => {}
        }
    }
    Ok(JaasEntry {
        username,
        password,
        module: entry.module,
    })
}

struct RawJaasEntry {
    module: String,
    options: Vec<(String, String)>,
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Equals,
    Semicolon,
}

/// Tokens as Java's `StreamTokenizer` cuts them for `JaasConfig`: words of letters, digits and
/// `. - _ $`, double-quoted strings with backslash escapes, `=` and `;`; `//` and `/* */`
/// comments are skipped. The error never quotes the text (it may be inside a password).
fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '=' => tokens.push(Token::Equals),
            ';' => tokens.push(Token::Semicolon),
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                loop {
                    match chars.next() {
                        Some('/') if last == '*' => break,
                        Some(c) => last = c,
                        None => return Err("has a `/*` comment that is never closed".into()),
                    }
                }
            }
            '"' => {
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => value.push('\n'),
                            Some('t') => value.push('\t'),
                            Some('r') => value.push('\r'),
                            Some(other) => value.push(other),
                            None => return Err("ends inside a quoted value".into()),
                        },
                        Some(c) => value.push(c),
                        None => return Err("has a quoted value without its closing `\"`".into()),
                    }
                }
                tokens.push(Token::Quoted(value));
            }
            c if is_word_char(c) => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek() {
                    if !is_word_char(next) {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
            other => {
                return Err(format!(
                    "has an unexpected `{}` outside a quoted value",
                    if other.is_ascii_graphic() { other } else { '?' }
                ))
            }
        }
    }
    Ok(tokens)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '$')
}

/// `LoginModuleClass flag key="value" ...;`, one or more times.
fn parse_jaas(text: &str) -> Result<Vec<RawJaasEntry>, String> {
    let mut tokens = tokenize(text)?.into_iter().peekable();
    let mut entries = Vec::new();
    if tokens.peek().is_none() {
        return Err("is empty; write the login module, `required`, the options and `;`".into());
    }
    while let Some(token) = tokens.next() {
        let Token::Word(module) = token else {
            return Err("must start with a login module class name".into());
        };
        match tokens.next() {
            Some(Token::Word(flag))
                if ["required", "requisite", "sufficient", "optional"]
                    .iter()
                    .any(|f| flag.eq_ignore_ascii_case(f)) => {}
            _ => {
                return Err(format!(
                    "needs a control flag (required, requisite, sufficient or optional) after \
                     the login module {module}"
                ))
            }
        }
        let mut options = Vec::new();
        loop {
            match tokens.next() {
                Some(Token::Semicolon) => break,
                Some(Token::Word(name)) => {
                    if tokens.next() != Some(Token::Equals) {
                        return Err(format!("needs `=` after the option `{name}`"));
                    }
                    match tokens.next() {
                        Some(Token::Quoted(value) | Token::Word(value)) => {
                            options.push((name, value))
                        }
                        _ => return Err(format!("has no value for the option `{name}`")),
                    }
                }
                None => {
                    return Err(format!(
                        "must end the login module {module} with `;` (Java requires it)"
                    ))
                }
                Some(_) => {
                    return Err(format!(
                        "has an option of the login module {module} that is not `name=\"value\"`"
                    ))
                }
            }
        }
        entries.push(RawJaasEntry { module, options });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` and checks it as `security.protocol=SASL_PLAINTEXT` with its module's
    /// mechanism would.
    fn parse(text: &str) -> Result<JaasEntry, ConfigError> {
        let entry = jaas_config(keys::SASL_JAAS_CONFIG, text)?;
        let mechanism = if entry.module == SCRAM_LOGIN_MODULE {
            SaslMechanism::ScramSha256
        } else {
            SaslMechanism::Plain
        };
        ExplicitSecurity {
            protocol: Some(SecurityProtocol::SaslPlaintext),
            mechanism: Some(mechanism),
            jaas: Some(entry.clone()),
            ..ExplicitSecurity::default()
        }
        .build()?;
        Ok(entry)
    }

    #[test]
    fn the_java_form_parses_with_escapes_and_comments() {
        let entry = parse(
            "org.apache.kafka.common.security.scram.ScramLoginModule required\n \
             username=\"al\\\"ice\" /* who */ password=\"p;a\\\\ss=\" // trailing\n;",
        )
        .unwrap();
        assert_eq!(entry.module, SCRAM_LOGIN_MODULE);
        assert_eq!(entry.username.as_deref(), Some("al\"ice"));
        assert_eq!(entry.password.unwrap().expose(), "p;a\\ss=");
        let bare = parse(&format!(
            "{PLAIN_LOGIN_MODULE} REQUIRED username=bob password=x1;"
        ))
        .unwrap();
        assert_eq!(bare.username.as_deref(), Some("bob"));
        assert_eq!(bare.password.unwrap().expose(), "x1");
    }

    #[test]
    fn malformed_strings_are_refused_without_showing_the_password() {
        let cases = [
            (
                format!("{PLAIN_LOGIN_MODULE} required username=\"a\" password=\"s3cret\""),
                "must end",
            ),
            (
                format!("{PLAIN_LOGIN_MODULE} username=\"a\" password=\"s3cret\";"),
                "control flag",
            ),
            (
                format!("{PLAIN_LOGIN_MODULE} required username=\"a\" password=\"s3cret;"),
                "closing",
            ),
            (
                format!("{PLAIN_LOGIN_MODULE} required username=\"a\";"),
                "no `password`",
            ),
            (
                format!("{PLAIN_LOGIN_MODULE} required password=\"s3cret\";"),
                "no `username`",
            ),
            (
                format!(
                    "{PLAIN_LOGIN_MODULE} required username=\"a\" password=\"s3cret\"; \
                     {PLAIN_LOGIN_MODULE} required username=\"b\" password=\"s3cret\";"
                ),
                "2 login modules",
            ),
            (
                format!("{PLAIN_LOGIN_MODULE} required username \"a\" password=\"s3cret\";"),
                "needs `=`",
            ),
            (String::new(), "is empty"),
        ];
        for (text, expected) in cases {
            let err = parse(&text).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(shown.contains(expected), "{text}: {shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[test]
    fn a_password_is_hidden_in_debug_output() {
        let entry = parse(&format!(
            "{PLAIN_LOGIN_MODULE} required username=\"a\" password=\"s3cret\";"
        ))
        .unwrap();
        let shown = format!("{entry:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains(HIDDEN_VALUE),
            "{shown}"
        );
    }
}
