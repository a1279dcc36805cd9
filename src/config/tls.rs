//! The `ssl.*` keys of `security.protocol=SSL` and `SASL_SSL`: what the producer trusts, the
//! certificate it shows when a broker asks for one, and whether the broker's name is checked.
//!
//! Stores are PEM only, as text in the property (`ssl.truststore.certificates`,
//! `ssl.keystore.certificate.chain` with `ssl.keystore.key`) or as a file (`*.location`), the
//! forms Java reads with `ssl.*.type=PEM` (KIP-651). Every file is read and every certificate and
//! key parsed when the configuration is built, so a bad store is a [`ConfigError`] naming its
//! key, never a failure at the first connection. TLS runs on rustls with the `ring` provider,
//! TLS 1.2 and 1.3 only.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::{keys, parse, ConfigError};

/// The effective TLS settings of an `SSL` or `SASL_SSL` producer.
#[derive(Clone)]
pub struct TlsConfig {
    /// Where the trusted certificates come from.
    pub trust: TrustSource,
    /// A client certificate is shown to brokers that ask for one (`ssl.keystore.*`).
    pub client_certificate: bool,
    /// `ssl.endpoint.identification.algorithm=https` (the default): the broker's certificate
    /// must name the host the producer connected to.
    pub verify_hostname: bool,
    /// The rustls configuration every connection of the producer starts from.
    client: Arc<ClientConfig>,
}

impl TlsConfig {
    /// The rustls client configuration connections use.
    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The rustls configuration holds the client's private key: never shown.
        f.debug_struct("TlsConfig")
            .field("trust", &self.trust)
            .field("client_certificate", &self.client_certificate)
            .field("verify_hostname", &self.verify_hostname)
            .finish_non_exhaustive()
    }
}

/// Where the certificates a broker's chain must lead to come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrustSource {
    /// No truststore set: the Mozilla root program's roots compiled into the producer.
    SystemRoots,
    /// `ssl.truststore.certificates` or `ssl.truststore.location`, with this many certificates.
    Truststore {
        /// How many certificates the truststore holds.
        certificates: usize,
    },
}

/// The `ssl.*` keys as set; turned into a [`TlsConfig`] by [`ExplicitTls::build`].
#[derive(Debug, Clone, Default)]
pub(super) struct ExplicitTls {
    truststore_certificates: Option<String>,
    truststore_location: Option<String>,
    keystore_certificate_chain: Option<String>,
    /// Not shown by `Debug`: a private key.
    keystore_key: Option<Hidden>,
    keystore_location: Option<String>,
    endpoint_identification: Option<bool>,
    enabled_protocols: Option<Vec<Version>>,
}

/// A value `Debug` does not show.
#[derive(Clone)]
struct Hidden(String);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(super::security::HIDDEN_VALUE)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Tls12,
    Tls13,
}

/// What an error shows for a store given as PEM text (it may be long; the key is enough).
const PEM_TEXT: &str = "[PEM text]";

/// How to turn a Java keystore into the PEM kacrab reads.
const CONVERT_HINT: &str = "convert it to PEM: for JKS, `keytool -exportcert -rfc -alias ALIAS \
                            -keystore store.jks -file ca.pem` exports a certificate; for PKCS12, \
                            `openssl pkcs12 -in store.p12 -out store.pem -nodes` writes the \
                            certificates and the unencrypted key";

impl ExplicitTls {
    /// Parses one of the `ssl.*` keys; `false` if `key` is not one of them.
    pub(super) fn apply(&mut self, key: &str, raw: &str) -> Result<bool, ConfigError> {
        use keys::*;
        match key {
            SSL_TRUSTSTORE_TYPE | SSL_KEYSTORE_TYPE => store_type(key, raw)?,
            SSL_TRUSTSTORE_CERTIFICATES => self.truststore_certificates = non_empty(raw),
            SSL_TRUSTSTORE_LOCATION => self.truststore_location = non_empty(raw),
            SSL_KEYSTORE_CERTIFICATE_CHAIN => self.keystore_certificate_chain = non_empty(raw),
            SSL_KEYSTORE_KEY => self.keystore_key = non_empty(raw).map(Hidden),
            SSL_KEYSTORE_LOCATION => self.keystore_location = non_empty(raw),
            SSL_TRUSTSTORE_PASSWORD | SSL_KEYSTORE_PASSWORD => {
                // Java refuses a store password with PEM stores (`DefaultSslEngineFactory`):
                // PEM certificates are not protected, and only the key may be (ssl.key.password).
                if !raw.trim().is_empty() {
                    return Err(parse::invalid(
                        key,
                        super::security::HIDDEN_VALUE,
                        "must be empty: a PEM store has no store password (only an encrypted key \
                         has one, `ssl.key.password`)",
                    ));
                }
            }
            SSL_KEY_PASSWORD => {
                if !raw.trim().is_empty() {
                    return Err(parse::invalid(
                        key,
                        super::security::HIDDEN_VALUE,
                        ENCRYPTED_KEY_RULE,
                    ));
                }
            }
            SSL_ENDPOINT_IDENTIFICATION_ALGORITHM => {
                let v = raw.trim();
                self.endpoint_identification = Some(if v.is_empty() {
                    false
                } else if v.eq_ignore_ascii_case("https") {
                    true
                } else {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must be `https` (check that the broker's certificate names the host) or \
                         empty (do not check)",
                    ));
                });
            }
            SSL_PROTOCOL => {
                // Java's SSLContext protocol: rustls negotiates TLS 1.3 or 1.2 itself, and the
                // versions offered are `ssl.enabled.protocols`.
                let v = raw.trim();
                if !["TLSv1.3", "TLSv1.2", "TLS"].contains(&v) {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must be TLSv1.3, TLSv1.2 or TLS: only TLS 1.2 and 1.3 are supported",
                    ));
                }
            }
            SSL_ENABLED_PROTOCOLS => {
                let mut versions = Vec::new();
                for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let version = match item {
                        "TLSv1.2" => Version::Tls12,
                        "TLSv1.3" => Version::Tls13,
                        _ => {
                            return Err(parse::invalid(
                                key,
                                raw,
                                format!("lists `{item}`; only TLSv1.2 and TLSv1.3 are supported"),
                            ))
                        }
                    };
                    if !versions.contains(&version) {
                        versions.push(version);
                    }
                }
                if versions.is_empty() {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must list TLSv1.2, TLSv1.3 or both",
                    ));
                }
                self.enabled_protocols = Some(versions);
            }
            SSL_CIPHER_SUITES => {
                if !raw.trim().is_empty() {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must be empty: the producer offers rustls's default suites (AES-GCM and \
                         ChaCha20-Poly1305 with forward secrecy) and cannot be given others",
                    ));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The keys among the stores that are set, for the check that TLS is on.
    pub(super) fn stores_set(&self) -> Vec<&'static str> {
        use keys::*;
        [
            (
                self.truststore_certificates.is_some(),
                SSL_TRUSTSTORE_CERTIFICATES,
            ),
            (self.truststore_location.is_some(), SSL_TRUSTSTORE_LOCATION),
            (
                self.keystore_certificate_chain.is_some(),
                SSL_KEYSTORE_CERTIFICATE_CHAIN,
            ),
            (self.keystore_key.is_some(), SSL_KEYSTORE_KEY),
            (self.keystore_location.is_some(), SSL_KEYSTORE_LOCATION),
        ]
        .into_iter()
        .filter_map(|(set, key)| set.then_some(key))
        .collect()
    }

    /// Reads and parses the stores and builds the rustls configuration.
    pub(super) fn build(self) -> Result<TlsConfig, ConfigError> {
        use keys::*;
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let mut roots = RootCertStore::empty();
        let trust = match (&self.truststore_certificates, &self.truststore_location) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Conflict {
                    keys: vec![
                        SSL_TRUSTSTORE_CERTIFICATES.into(),
                        SSL_TRUSTSTORE_LOCATION.into(),
                    ],
                    rule: "set the trusted certificates either as PEM text \
                           (`ssl.truststore.certificates`) or as a file \
                           (`ssl.truststore.location`), not both"
                        .to_string(),
                })
            }
            (Some(text), None) => {
                let certs = certificates(SSL_TRUSTSTORE_CERTIFICATES, PEM_TEXT, text.as_bytes())?;
                add_roots(&mut roots, SSL_TRUSTSTORE_CERTIFICATES, PEM_TEXT, certs)?
            }
            (None, Some(path)) => {
                let bytes = read_file(SSL_TRUSTSTORE_LOCATION, path)?;
                let certs = certificates(SSL_TRUSTSTORE_LOCATION, path, &bytes)?;
                add_roots(&mut roots, SSL_TRUSTSTORE_LOCATION, path, certs)?
            }
            (None, None) => {
                // webpki-roots rather than the operating system's store: like the JDK's own
                // `cacerts`, the roots travel with the program, so a producer trusts the same
                // authorities in a minimal container without a CA bundle as on a full host,
                // and nothing is read from disk at startup. A private CA is given with
                // `ssl.truststore.*`.
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                TrustSource::SystemRoots
            }
        };

        let identity = self.identity()?;
        let client_certificate = identity.is_some();
        let verify_hostname = self.endpoint_identification.unwrap_or(true);

        let versions: Vec<&'static rustls::SupportedProtocolVersion> = self
            .enabled_protocols
            .as_deref()
            .unwrap_or(&[Version::Tls13, Version::Tls12])
            .iter()
            .map(|v| match v {
                Version::Tls12 => &rustls::version::TLS12,
                Version::Tls13 => &rustls::version::TLS13,
            })
            .collect();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|err| {
                // Unreachable with ring, which has both versions; kept typed all the same.
                parse::invalid(
                    SSL_ENABLED_PROTOCOLS,
                    &format!("{:?}", self.enabled_protocols),
                    format!("no usable version: {err}"),
                )
            })?;
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|err| ConfigError::Conflict {
                keys: vec![
                    SSL_TRUSTSTORE_CERTIFICATES.into(),
                    SSL_TRUSTSTORE_LOCATION.into(),
                ],
                rule: format!("the truststore cannot verify brokers: {err}"),
            })?;
        let builder = if verify_hostname {
            builder.with_webpki_verifier(verifier)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostname(verifier)))
        };
        let client = match identity {
            None => builder.with_no_client_auth(),
            Some(Identity { key, chain, source }) => {
                builder.with_client_auth_cert(chain, key).map_err(|err| {
                    parse::invalid(
                        source,
                        super::security::HIDDEN_VALUE,
                        format!("the key does not go with the certificate chain: {err}"),
                    )
                })?
            }
        };
        Ok(TlsConfig {
            trust,
            client_certificate,
            verify_hostname,
            client: Arc::new(client),
        })
    }

    /// The client certificate and key, if a keystore is set.
    fn identity(&self) -> Result<Option<Identity>, ConfigError> {
        use keys::*;
        let text_form = self.keystore_certificate_chain.is_some() || self.keystore_key.is_some();
        match (text_form, &self.keystore_location) {
            (true, Some(_)) => Err(ConfigError::Conflict {
                keys: vec![
                    SSL_KEYSTORE_CERTIFICATE_CHAIN.into(),
                    SSL_KEYSTORE_KEY.into(),
                    SSL_KEYSTORE_LOCATION.into(),
                ],
                rule: "set the client certificate either as PEM text \
                       (`ssl.keystore.certificate.chain` and `ssl.keystore.key`) or as one PEM \
                       file with the key and the chain (`ssl.keystore.location`), not both"
                    .to_string(),
            }),
            (true, None) => {
                let (Some(chain), Some(key)) =
                    (&self.keystore_certificate_chain, &self.keystore_key)
                else {
                    let missing = if self.keystore_key.is_none() {
                        SSL_KEYSTORE_KEY
                    } else {
                        SSL_KEYSTORE_CERTIFICATE_CHAIN
                    };
                    return Err(ConfigError::Conflict {
                        keys: vec![
                            SSL_KEYSTORE_CERTIFICATE_CHAIN.into(),
                            SSL_KEYSTORE_KEY.into(),
                        ],
                        rule: format!(
                            "`ssl.keystore.certificate.chain` and `ssl.keystore.key` go \
                             together; `{missing}` is not set"
                        ),
                    });
                };
                let chain =
                    certificates(SSL_KEYSTORE_CERTIFICATE_CHAIN, PEM_TEXT, chain.as_bytes())?;
                let key = private_key(SSL_KEYSTORE_KEY, key.0.as_bytes())?;
                Ok(Some(Identity {
                    key,
                    chain,
                    source: SSL_KEYSTORE_KEY,
                }))
            }
            (false, Some(path)) => {
                let bytes = read_file(SSL_KEYSTORE_LOCATION, path)?;
                let chain = certificates(SSL_KEYSTORE_LOCATION, path, &bytes)?;
                let key = private_key(SSL_KEYSTORE_LOCATION, &bytes)?;
                Ok(Some(Identity {
                    key,
                    chain,
                    source: SSL_KEYSTORE_LOCATION,
                }))
            }
            (false, None) => Ok(None),
        }
    }
}

/// A client certificate chain and its private key.
struct Identity {
    key: PrivateKeyDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    /// The key they were set with, for errors.
    source: &'static str,
}

const ENCRYPTED_KEY_RULE: &str = "encrypted private keys are not supported; write the key \
                                  unencrypted (`openssl pkcs8 -in key.pem -out plain.pem \
                                  -nocrypt`, or `-nodes` when exporting from PKCS12) and leave \
                                  `ssl.key.password` unset";

fn non_empty(raw: &str) -> Option<String> {
    let v = raw.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// `ssl.truststore.type` and `ssl.keystore.type`: PEM only.
fn store_type(key: &str, raw: &str) -> Result<(), ConfigError> {
    let v = raw.trim();
    if v.eq_ignore_ascii_case("PEM") {
        Ok(())
    } else if v.eq_ignore_ascii_case("JKS") || v.eq_ignore_ascii_case("PKCS12") {
        Err(parse::invalid(
            key,
            raw,
            format!("only PEM stores are read; {CONVERT_HINT}, then set `{key}=PEM`"),
        ))
    } else {
        Err(parse::invalid(key, raw, "must be PEM"))
    }
}

fn read_file(key: &str, path: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|err| parse::invalid(key, path, format!("cannot be read: {err}")))
}

/// Every certificate of a PEM text; `shown` is what an error quotes (a path, or nothing).
fn certificates(
    key: &str,
    shown: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| parse::invalid(key, shown, format!("is not valid PEM: {err}")))?;
    if certs.is_empty() {
        // A Java store left at its default type (JKS) is binary: say how to convert it.
        let hint = if pem.windows(11).any(|w| w == b"-----BEGIN ") {
            String::new()
        } else {
            format!("; it is not PEM at all, if it is a JKS or PKCS12 store {CONVERT_HINT}")
        };
        return Err(parse::invalid(
            key,
            shown,
            format!("holds no certificate (a `-----BEGIN CERTIFICATE-----` block){hint}"),
        ));
    }
    Ok(certs)
}

fn add_roots(
    roots: &mut RootCertStore,
    key: &str,
    shown: &str,
    certs: Vec<CertificateDer<'static>>,
) -> Result<TrustSource, ConfigError> {
    let count = certs.len();
    for cert in certs {
        roots.add(cert).map_err(|err| {
            parse::invalid(
                key,
                shown,
                format!("holds a certificate that cannot be a trust anchor: {err}"),
            )
        })?;
    }
    Ok(TrustSource::Truststore {
        certificates: count,
    })
}

/// The one private key of a PEM text (PKCS#8, PKCS#1 or SEC1), never quoted in an error.
fn private_key(key: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let hidden = super::security::HIDDEN_VALUE;
    let text = String::from_utf8_lossy(pem);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(parse::invalid(key, hidden, ENCRYPTED_KEY_RULE));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|err| {
        let rule = match err {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "holds no private key (a `-----BEGIN PRIVATE KEY-----`, `RSA PRIVATE KEY` or `EC \
                 PRIVATE KEY` block)"
                    .to_string()
            }
            other => format!("is not valid PEM: {other}"),
        };
        parse::invalid(key, hidden, rule)
    })
}

/// Java's `ssl.endpoint.identification.algorithm=` (empty): the chain must still lead to a
/// trusted root and be in its validity period; only the name check is skipped.
#[derive(Debug)]
struct AnyHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain, the validity period and the key usage before the name, so
        // a name error means everything else passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
