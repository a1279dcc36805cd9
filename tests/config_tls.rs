//! The `ssl.*` keys: what is accepted, and the typed errors naming the key and the rule for
//! the rest (Java's JKS and PKCS12 stores with how to convert them, missing files, encrypted
//! keys, stores in two forms, stores without TLS). Certificates are made in the test.
#![cfg(feature = "testkit")]

mod common;

use kacrab::config::{ConfigError, ProducerConfig, SecurityProtocol, TrustSource};
use kacrab::testkit::server::TestCa;

use common::config::build;
use common::temp_file::TempFile;

fn ssl(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ConfigError> {
    let mut all = vec![("security.protocol", "SSL")];
    all.extend_from_slice(pairs);
    build(&all)
}

/// The key and the rule of an `InvalidValue`.
fn invalid(e: ConfigError) -> (String, String, String) {
    match e {
        ConfigError::InvalidValue { key, value, rule } => (key, value, rule),
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn jks_and_pkcs12_stores_are_refused_with_how_to_convert_them_to_pem() {
    let (key, _, rule) = invalid(ssl(&[("ssl.truststore.type", "JKS")]).unwrap_err());
    assert_eq!(key, "ssl.truststore.type");
    assert!(rule.contains("keytool -exportcert -rfc"), "{rule}");
    assert!(rule.contains("ssl.truststore.type=PEM"), "{rule}");
    let (key, _, rule) = invalid(ssl(&[("ssl.keystore.type", "PKCS12")]).unwrap_err());
    assert_eq!(key, "ssl.keystore.type");
    assert!(rule.contains("openssl pkcs12 -in"), "{rule}");
    assert!(rule.contains("-nodes"), "{rule}");
    let (_, _, rule) = invalid(ssl(&[("ssl.truststore.type", "BKS")]).unwrap_err());
    assert_eq!(rule, "must be PEM");
    assert!(ssl(&[("ssl.truststore.type", "pem"), ("ssl.keystore.type", "PEM")]).is_ok());
}

#[test]
fn a_missing_store_file_names_its_key_and_path() {
    for key in ["ssl.truststore.location", "ssl.keystore.location"] {
        let path = "/nonexistent/kacrab/store.pem";
        let (k, value, rule) = invalid(ssl(&[(key, path)]).unwrap_err());
        assert_eq!(k, key);
        assert_eq!(value, path);
        assert!(rule.contains("cannot be read"), "{rule}");
    }
}

#[test]
fn a_store_without_certificates_or_key_is_refused_naming_the_key() {
    let (key, _, rule) =
        invalid(ssl(&[("ssl.truststore.certificates", "not a certificate")]).unwrap_err());
    assert_eq!(key, "ssl.truststore.certificates");
    assert!(rule.contains("holds no certificate"), "{rule}");
    let e = ssl(&[("ssl.truststore.certificates", "not a certificate")]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid value `[PEM text]` for `ssl.truststore.certificates`"),
        "{e}"
    );
    // A Java store given as it is (its default type is JKS) is binary.
    let jks = TempFile::new("store.jks", "\u{fe}\u{ed}\u{fe}\u{ed} binary");
    let (key, _, rule) = invalid(ssl(&[("ssl.truststore.location", jks.path())]).unwrap_err());
    assert_eq!(key, "ssl.truststore.location");
    assert!(rule.contains("keytool -exportcert -rfc"), "{rule}");

    let ca = TestCa::new("kacrab test CA");
    let client = ca.issue_client("kacrab-producer");
    let only_chain = TempFile::new("only-chain.pem", &client.certificate_pem);
    let (key, _, rule) = invalid(ssl(&[("ssl.keystore.location", only_chain.path())]).unwrap_err());
    assert_eq!(key, "ssl.keystore.location");
    assert!(rule.contains("holds no private key"), "{rule}");
}

#[test]
fn an_encrypted_key_is_refused_with_how_to_decrypt_it_and_without_the_password() {
    let (key, value, rule) = invalid(ssl(&[("ssl.key.password", "s3cret")]).unwrap_err());
    assert_eq!(key, "ssl.key.password");
    assert_ne!(value, "s3cret");
    assert!(
        rule.contains("encrypted private keys are not supported"),
        "{rule}"
    );
    assert!(rule.contains("openssl pkcs8"), "{rule}");

    let ca = TestCa::new("kacrab test CA");
    let client = ca.issue_client("kacrab-producer");
    let encrypted =
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n";
    let (key, _, rule) = invalid(
        ssl(&[
            ("ssl.keystore.certificate.chain", &client.certificate_pem),
            ("ssl.keystore.key", encrypted),
        ])
        .unwrap_err(),
    );
    assert_eq!(key, "ssl.keystore.key");
    assert!(
        rule.contains("encrypted private keys are not supported"),
        "{rule}"
    );
    // PEM stores have no store password, as in Java.
    let (key, _, rule) = invalid(ssl(&[("ssl.keystore.password", "s3cret")]).unwrap_err());
    assert_eq!(key, "ssl.keystore.password");
    assert!(rule.contains("must be empty"), "{rule}");
}

#[test]
fn stores_set_in_two_forms_or_half_a_keystore_are_conflicts_naming_the_keys() {
    let ca = TestCa::new("kacrab test CA");
    let ca_pem = ca.certificate_pem();
    let file = TempFile::new("both-forms.pem", &ca_pem);
    let e = ssl(&[
        ("ssl.truststore.certificates", &ca_pem),
        ("ssl.truststore.location", file.path()),
    ])
    .unwrap_err();
    assert_eq!(
        e.keys(),
        ["ssl.truststore.certificates", "ssl.truststore.location"]
    );
    let client = ca.issue_client("kacrab-producer");
    let e = ssl(&[("ssl.keystore.certificate.chain", &client.certificate_pem)]).unwrap_err();
    assert_eq!(
        e.keys(),
        ["ssl.keystore.certificate.chain", "ssl.keystore.key"]
    );
    assert!(
        e.to_string().contains("`ssl.keystore.key` is not set"),
        "{e}"
    );
    // A key that is not the chain's.
    let other = ca.issue_client("someone-else");
    let (key, _, rule) = invalid(
        ssl(&[
            ("ssl.keystore.certificate.chain", &client.certificate_pem),
            ("ssl.keystore.key", &other.key_pem),
        ])
        .unwrap_err(),
    );
    assert_eq!(key, "ssl.keystore.key");
    assert!(
        rule.contains("does not go with the certificate chain"),
        "{rule}"
    );
}

#[test]
fn a_store_without_tls_is_a_conflict_naming_security_protocol() {
    let ca = TestCa::new("kacrab test CA");
    let ca_pem = ca.certificate_pem();
    for protocol in ["PLAINTEXT", "SASL_PLAINTEXT"] {
        let mut pairs = vec![
            ("security.protocol", protocol),
            ("ssl.truststore.certificates", ca_pem.as_str()),
        ];
        if protocol == "SASL_PLAINTEXT" {
            pairs.push(("sasl.mechanism", "PLAIN"));
        }
        let e = build(&pairs).unwrap_err();
        assert_eq!(
            e.keys(),
            ["ssl.truststore.certificates", "security.protocol"]
        );
        assert!(e.to_string().contains("set `security.protocol=SSL`"), "{e}");
    }
    // Keys that set no store are harmless without TLS, as in Java.
    let config = build(&[("ssl.endpoint.identification.algorithm", "")]).unwrap();
    assert!(config.tls.is_none());
}

#[test]
fn the_ssl_keys_take_their_documented_values() {
    let config = ssl(&[]).unwrap();
    assert_eq!(config.security_protocol, SecurityProtocol::Ssl);
    let tls = config.tls.expect("TLS settings");
    assert_eq!(tls.trust, TrustSource::SystemRoots);
    assert!(tls.verify_hostname && !tls.client_certificate);

    let ca = TestCa::new("kacrab test CA");
    let ca_pem = ca.certificate_pem();
    let client = ca.issue_client("kacrab-producer");
    let tls = ssl(&[
        ("ssl.truststore.certificates", &ca_pem),
        ("ssl.keystore.certificate.chain", &client.certificate_pem),
        ("ssl.keystore.key", &client.key_pem),
        ("ssl.endpoint.identification.algorithm", ""),
        ("ssl.protocol", "TLSv1.2"),
        ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"),
        ("ssl.cipher.suites", ""),
        ("ssl.keymanager.algorithm", "SunX509"),
    ])
    .unwrap()
    .tls
    .unwrap();
    assert_eq!(tls.trust, TrustSource::Truststore { certificates: 1 });
    assert!(!tls.verify_hostname && tls.client_certificate);
    // The private key never shows.
    let shown = format!("{tls:?}");
    assert!(
        !shown.contains("PRIVATE KEY") && !shown.contains(&client.key_pem[40..80]),
        "{shown}"
    );
    assert!(ssl(&[("ssl.endpoint.identification.algorithm", "HTTPS")]).is_ok());

    for (key, value, rule_part) in [
        (
            "ssl.endpoint.identification.algorithm",
            "ldap",
            "must be `https`",
        ),
        (
            "ssl.enabled.protocols",
            "TLSv1.1,TLSv1.2",
            "lists `TLSv1.1`",
        ),
        ("ssl.enabled.protocols", " , ", "must list"),
        ("ssl.protocol", "SSLv3", "only TLS 1.2 and 1.3"),
        (
            "ssl.cipher.suites",
            "TLS_RSA_WITH_AES_128_CBC_SHA",
            "must be empty",
        ),
    ] {
        let (k, _, rule) = invalid(ssl(&[(key, value)]).unwrap_err());
        assert_eq!(k, key);
        assert!(rule.contains(rule_part), "{key}={value}: {rule}");
    }
}
