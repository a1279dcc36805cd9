//! `security.protocol`, `sasl.mechanism` and `sasl.jaas.config`: what is accepted, the typed
//! errors for the rest, and a password that never shows in an error or `Debug` output;
//! OAUTHBEARER and its token provider.

mod common;

use std::time::{Duration, SystemTime};

use common::config::build;
use kacrab::config::{ConfigError, ProducerConfig, SaslMechanism, SecurityProtocol};
use kacrab::OAuthBearerToken;

const PLAIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
const SCRAM_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

fn jaas(module: &str, user: &str, password: &str) -> String {
    format!("{module} required username=\"{user}\" password=\"{password}\";")
}

fn conflict_keys(e: &ConfigError) -> Vec<&str> {
    match e {
        ConfigError::Conflict { .. } => e.keys(),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn sasl_plaintext_with_each_mechanism_and_its_module_is_accepted() {
    for (mechanism, module, expected) in [
        ("PLAIN", PLAIN_MODULE, SaslMechanism::Plain),
        ("SCRAM-SHA-256", SCRAM_MODULE, SaslMechanism::ScramSha256),
        ("SCRAM-SHA-512", SCRAM_MODULE, SaslMechanism::ScramSha512),
    ] {
        let config = build(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", mechanism),
            ("sasl.jaas.config", &jaas(module, "alice", "secret")),
        ])
        .unwrap();
        assert_eq!(config.security_protocol, SecurityProtocol::SaslPlaintext);
        let sasl = config.sasl.expect("sasl settings");
        assert_eq!(sasl.mechanism, expected);
        assert_eq!(sasl.username, "alice");
        assert_eq!(sasl.password.expose(), "secret");
    }
}

#[test]
fn plaintext_is_the_default_and_carries_no_sasl() {
    let config = build(&[]).unwrap();
    assert_eq!(config.security_protocol, SecurityProtocol::Plaintext);
    assert!(config.sasl.is_none());
    // Java ignores a mechanism under PLAINTEXT, and so does kacrab.
    let config = build(&[("sasl.mechanism", "PLAIN")]).unwrap();
    assert!(config.sasl.is_none());
}

#[test]
fn sasl_ssl_needs_the_mechanism_and_credentials_sasl_plaintext_needs() {
    let e = build(&[("security.protocol", "SASL_SSL")]).unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.mechanism", "security.protocol"]);
    assert!(e.to_string().contains("security.protocol=SASL_SSL"), "{e}");
    let config = build(&[
        ("security.protocol", "sasl_ssl"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.jaas.config", &jaas(SCRAM_MODULE, "alice", "s3cret")),
    ])
    .unwrap();
    assert_eq!(config.security_protocol, SecurityProtocol::SaslSsl);
    assert_eq!(config.sasl.unwrap().mechanism, SaslMechanism::ScramSha512);
    assert!(config.tls.is_some());
    // Credentials under SSL alone would never be sent.
    let e = build(&[
        ("security.protocol", "SSL"),
        ("sasl.jaas.config", &jaas(PLAIN_MODULE, "alice", "s3cret")),
    ])
    .unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.jaas.config", "security.protocol"]);
    assert!(e.to_string().contains("security.protocol=SASL_SSL"), "{e}");
}

#[test]
fn gssapi_is_refused_as_not_supported_yet() {
    let e = build(&[("sasl.mechanism", "GSSAPI")]).unwrap_err();
    assert_eq!(e.keys(), ["sasl.mechanism"]);
    assert!(e.to_string().contains("not supported yet"), "{e}");
    let e = build(&[("sasl.mechanism", "scram-sha-256")]).unwrap_err();
    assert!(e.to_string().contains("must be one of PLAIN"), "{e}");
}

#[test]
fn sasl_plaintext_without_a_mechanism_names_the_gssapi_default() {
    let e = build(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.jaas.config", &jaas(PLAIN_MODULE, "a", "b")),
    ])
    .unwrap_err();
    assert!(conflict_keys(&e).contains(&"sasl.mechanism"));
    assert!(e.to_string().contains("GSSAPI"), "{e}");
}

#[test]
fn sasl_plaintext_without_credentials_is_a_conflict_naming_the_jaas_key() {
    let e = build(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
    ])
    .unwrap_err();
    assert!(conflict_keys(&e).contains(&"sasl.jaas.config"));
}

#[test]
fn credentials_under_plaintext_are_a_conflict_not_silently_unused() {
    let e = build(&[("sasl.jaas.config", &jaas(PLAIN_MODULE, "a", "s3cret"))]).unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.jaas.config", "security.protocol"]);
    assert!(!format!("{e} {e:?}").contains("s3cret"));
}

#[test]
fn a_login_module_that_does_not_match_the_mechanism_is_a_conflict() {
    for (mechanism, module) in [
        ("PLAIN", SCRAM_MODULE),
        ("SCRAM-SHA-256", PLAIN_MODULE),
        ("SCRAM-SHA-512", "com.example.OtherLoginModule"),
    ] {
        let e = build(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", mechanism),
            ("sasl.jaas.config", &jaas(module, "a", "s3cret")),
        ])
        .unwrap_err();
        assert_eq!(conflict_keys(&e), ["sasl.jaas.config", "sasl.mechanism"]);
        let shown = format!("{e} {e:?}");
        assert!(shown.contains(module), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

#[test]
fn a_malformed_jaas_string_is_a_typed_error_that_hides_the_value() {
    for text in [
        format!("{PLAIN_MODULE} required username=\"a\" password=\"s3cret\""),
        format!("{PLAIN_MODULE} required username=\"a\" password=\"s3cret"),
        format!("{PLAIN_MODULE} username=\"a\" password=\"s3cret\";"),
        format!("{PLAIN_MODULE} required username=\"a\" password:\"s3cret\";"),
    ] {
        let e = build(&[("sasl.jaas.config", &text)]).unwrap_err();
        match &e {
            ConfigError::InvalidValue { key, value, .. } => {
                assert_eq!(key, "sasl.jaas.config");
                assert_eq!(value, "[hidden]");
            }
            other => panic!("expected an invalid value, got {other:?}"),
        }
        assert!(!format!("{e} {e:?}").contains("s3cret"), "{e}");
    }
}

#[test]
fn the_password_never_shows_in_debug_output_of_the_config_or_its_builder() {
    let pairs = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.jaas.config", &jaas(SCRAM_MODULE, "alice", "s3cret")),
    ];
    let builder = pairs.iter().fold(
        ProducerConfig::builder().set("bootstrap.servers", "localhost:9092"),
        |b, (k, v)| b.set(k, *v),
    );
    assert!(!format!("{builder:?}").contains("s3cret"));
    let config = builder.build().unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("alice"),
        "{shown}"
    );
}

#[test]
fn properties_text_carries_a_jaas_line_as_java_writes_it() {
    let text = format!(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
         sasl.jaas.config={SCRAM_MODULE} required \\\n    username=\"bob\" \\\n    password=\"p w\";\n"
    );
    let config = ProducerConfig::builder()
        .set("bootstrap.servers", "localhost:9092")
        .set_properties(&text)
        .build()
        .unwrap();
    let sasl = config.sasl.unwrap();
    assert_eq!(sasl.username, "bob");
    assert_eq!(sasl.password.expose(), "p w");
}

const OAUTHBEARER_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

fn build_with_provider(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ConfigError> {
    pairs
        .iter()
        .fold(
            ProducerConfig::builder()
                .set("bootstrap.servers", "localhost:9092")
                .oauth_token_provider(|| {
                    Ok(OAuthBearerToken::expiring_in(
                        "h.p.",
                        Duration::from_secs(60),
                    ))
                }),
            |b, (k, v)| b.set(k, *v),
        )
        .build()
}

#[test]
fn oauthbearer_without_a_token_provider_is_refused_naming_sasl_mechanism() {
    let e = build(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "OAUTHBEARER"),
        (
            "sasl.jaas.config",
            &format!("{OAUTHBEARER_MODULE} required;"),
        ),
    ])
    .unwrap_err();
    match &e {
        ConfigError::InvalidValue { key, value, rule } => {
            assert_eq!(
                (key.as_str(), value.as_str()),
                ("sasl.mechanism", "OAUTHBEARER")
            );
            assert!(rule.contains("token provider"), "{rule}");
        }
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn oauthbearer_with_a_token_provider_and_its_login_module_is_accepted() {
    for jaas in [Some(format!("{OAUTHBEARER_MODULE} required;")), None] {
        let mut pairs = vec![
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ];
        if let Some(jaas) = &jaas {
            pairs.push(("sasl.jaas.config", jaas));
        }
        let config = build_with_provider(&pairs).unwrap();
        let sasl = config.sasl.unwrap();
        assert_eq!(sasl.mechanism, SaslMechanism::OAuthBearer);
        let token = sasl.token_provider.expect("installed").token().unwrap();
        assert_eq!(token.value, "h.p.");
        assert!(token.expires_at > SystemTime::now());
        assert!(
            !format!("{token:?}").contains("h.p."),
            "the token is hidden"
        );
    }
}

#[test]
fn oauthbearer_with_another_login_module_is_a_conflict() {
    let e = build_with_provider(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.jaas.config", &jaas(PLAIN_MODULE, "a", "b")),
    ])
    .unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.jaas.config", "sasl.mechanism"]);
    assert!(e.to_string().contains("OAuthBearerLoginModule"), "{e}");
}

#[test]
fn a_token_provider_with_another_mechanism_or_without_sasl_is_a_conflict() {
    let e = build_with_provider(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.jaas.config", &jaas(PLAIN_MODULE, "a", "b")),
    ])
    .unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.mechanism", "security.protocol"]);
    assert!(e.to_string().contains("`sasl.mechanism` is PLAIN"), "{e}");
    let e = build_with_provider(&[]).unwrap_err();
    assert_eq!(conflict_keys(&e), ["sasl.mechanism", "security.protocol"]);
    assert!(
        e.to_string().contains("PLAINTEXT, which does not use SASL"),
        "{e}"
    );
}
