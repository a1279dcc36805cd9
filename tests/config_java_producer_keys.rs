//! Every key a Java 4.x producer accepts is accepted by kacrab with Java's default value:
//! honoured, or in the documented list of keys with no effect (`keys::ignored_keys`), so a
//! properties file written for (or dumped from) the Java client loads. Three defaults are
//! refused on purpose, each with the reason in its error (`DELIBERATELY_REFUSED`).

mod common;

use common::config::{build, invalid};
use kacrab::config::{ConfigError, ProducerConfigBuilder};

/// The Java producer's keys and their defaults, typed out from apache/kafka's 4.x sources:
/// `ProducerConfig.java` (its `CONFIG` definitions, which take `bootstrap.servers`,
/// `client.dns.lookup`, the `metadata.recovery.*` keys and others from
/// `CommonClientConfigs`), `SslConfigs.addClientSslSupport` and
/// `SaslConfigs.addClientSaslSupport` (4.1, with KIP-1139's OAUTHBEARER keys). `None`: Java's
/// default is null, a value no properties file can carry. `key.serializer` and
/// `value.serializer` have no default; the value shown is the usual one.
const JAVA_PRODUCER_KEYS: &[(&str, Option<&str>)] = &[
    // ProducerConfig.java
    ("bootstrap.servers", Some("localhost:9092")),
    ("client.dns.lookup", Some("use_all_dns_ips")),
    ("buffer.memory", Some("33554432")),
    ("retries", Some("2147483647")),
    ("acks", Some("all")),
    ("compression.type", Some("none")),
    ("compression.gzip.level", Some("-1")),
    ("compression.lz4.level", Some("9")),
    ("compression.zstd.level", Some("3")),
    ("batch.size", Some("16384")),
    ("partitioner.adaptive.partitioning.enable", Some("true")),
    ("partitioner.availability.timeout.ms", Some("0")),
    ("partitioner.ignore.keys", Some("false")),
    ("linger.ms", Some("5")),
    ("delivery.timeout.ms", Some("120000")),
    ("client.id", Some("")),
    ("send.buffer.bytes", Some("131072")),
    ("receive.buffer.bytes", Some("32768")),
    ("max.request.size", Some("1048576")),
    ("reconnect.backoff.ms", Some("50")),
    ("reconnect.backoff.max.ms", Some("1000")),
    ("retry.backoff.ms", Some("100")),
    ("retry.backoff.max.ms", Some("1000")),
    ("enable.metrics.push", Some("true")),
    ("max.block.ms", Some("60000")),
    ("request.timeout.ms", Some("30000")),
    ("metadata.max.age.ms", Some("300000")),
    ("metadata.max.idle.ms", Some("300000")),
    ("metrics.sample.window.ms", Some("30000")),
    ("metrics.num.samples", Some("2")),
    ("metrics.recording.level", Some("INFO")),
    (
        "metric.reporters",
        Some("org.apache.kafka.common.metrics.JmxReporter"),
    ),
    ("max.in.flight.requests.per.connection", Some("5")),
    (
        "key.serializer",
        Some("org.apache.kafka.common.serialization.ByteArraySerializer"),
    ),
    (
        "value.serializer",
        Some("org.apache.kafka.common.serialization.ByteArraySerializer"),
    ),
    ("socket.connection.setup.timeout.ms", Some("10000")),
    ("socket.connection.setup.timeout.max.ms", Some("30000")),
    ("connections.max.idle.ms", Some("540000")),
    ("partitioner.class", None),
    ("interceptor.classes", Some("")),
    ("security.protocol", Some("PLAINTEXT")),
    ("security.providers", None),
    ("enable.idempotence", Some("true")),
    ("transaction.timeout.ms", Some("60000")),
    ("transactional.id", None),
    ("transaction.two.phase.commit.enable", Some("false")),
    ("metadata.recovery.strategy", Some("rebootstrap")),
    ("metadata.recovery.rebootstrap.trigger.ms", Some("300000")),
    ("config.providers", Some("")),
    // SslConfigs.addClientSslSupport
    ("ssl.protocol", Some("TLSv1.3")),
    ("ssl.provider", None),
    ("ssl.cipher.suites", None),
    ("ssl.enabled.protocols", Some("TLSv1.2,TLSv1.3")),
    ("ssl.keystore.type", Some("JKS")),
    ("ssl.keystore.location", None),
    ("ssl.keystore.password", None),
    ("ssl.key.password", None),
    ("ssl.keystore.key", None),
    ("ssl.keystore.certificate.chain", None),
    ("ssl.truststore.certificates", None),
    ("ssl.truststore.type", Some("JKS")),
    ("ssl.truststore.location", None),
    ("ssl.truststore.password", None),
    ("ssl.keymanager.algorithm", Some("SunX509")),
    ("ssl.trustmanager.algorithm", Some("PKIX")),
    ("ssl.endpoint.identification.algorithm", Some("https")),
    ("ssl.secure.random.implementation", None),
    ("ssl.engine.factory.class", None),
    // SaslConfigs.addClientSaslSupport
    ("sasl.kerberos.service.name", None),
    ("sasl.kerberos.kinit.cmd", Some("/usr/bin/kinit")),
    ("sasl.kerberos.ticket.renew.window.factor", Some("0.8")),
    ("sasl.kerberos.ticket.renew.jitter", Some("0.05")),
    ("sasl.kerberos.min.time.before.relogin", Some("60000")),
    ("sasl.login.refresh.window.factor", Some("0.8")),
    ("sasl.login.refresh.window.jitter", Some("0.05")),
    ("sasl.login.refresh.min.period.seconds", Some("60")),
    ("sasl.login.refresh.buffer.seconds", Some("300")),
    ("sasl.mechanism", Some("GSSAPI")),
    ("sasl.jaas.config", None),
    ("sasl.client.callback.handler.class", None),
    ("sasl.login.callback.handler.class", None),
    ("sasl.login.class", None),
    ("sasl.login.connect.timeout.ms", None),
    ("sasl.login.read.timeout.ms", None),
    ("sasl.login.retry.backoff.max.ms", Some("10000")),
    ("sasl.login.retry.backoff.ms", Some("100")),
    (
        "sasl.oauthbearer.jwt.retriever.class",
        Some("org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever"),
    ),
    (
        "sasl.oauthbearer.jwt.validator.class",
        Some("org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator"),
    ),
    ("sasl.oauthbearer.scope", None),
    ("sasl.oauthbearer.client.credentials.client.id", None),
    ("sasl.oauthbearer.client.credentials.client.secret", None),
    ("sasl.oauthbearer.assertion.algorithm", Some("RS256")),
    ("sasl.oauthbearer.assertion.claim.aud", None),
    ("sasl.oauthbearer.assertion.claim.exp.seconds", Some("300")),
    ("sasl.oauthbearer.assertion.claim.iss", None),
    (
        "sasl.oauthbearer.assertion.claim.jti.include",
        Some("false"),
    ),
    ("sasl.oauthbearer.assertion.claim.nbf.seconds", Some("60")),
    ("sasl.oauthbearer.assertion.claim.sub", None),
    ("sasl.oauthbearer.assertion.file", None),
    ("sasl.oauthbearer.assertion.private.key.file", None),
    ("sasl.oauthbearer.assertion.private.key.passphrase", None),
    ("sasl.oauthbearer.assertion.template.file", None),
    ("sasl.oauthbearer.scope.claim.name", Some("scope")),
    ("sasl.oauthbearer.sub.claim.name", Some("sub")),
    ("sasl.oauthbearer.token.endpoint.url", None),
    ("sasl.oauthbearer.jwks.endpoint.url", None),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", Some("3600000")),
    (
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        Some("10000"),
    ),
    (
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        Some("100"),
    ),
    ("sasl.oauthbearer.clock.skew.seconds", Some("30")),
    ("sasl.oauthbearer.expected.audience", Some("")),
    ("sasl.oauthbearer.expected.issuer", None),
    ("sasl.oauthbearer.header.urlencode", Some("false")),
];

/// Java defaults kacrab refuses by design, and a word of the rule each error gives: the GSSAPI
/// mechanism is not implemented, and stores are read as PEM only (the error says how to
/// convert a JKS store).
const DELIBERATELY_REFUSED: &[(&str, &str)] = &[
    ("sasl.mechanism", "not supported yet"),
    ("ssl.keystore.type", "only PEM stores are read"),
    ("ssl.truststore.type", "only PEM stores are read"),
];

fn refusal(key: &str) -> Option<&'static str> {
    DELIBERATELY_REFUSED
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, rule)| *rule)
}

#[test]
fn every_java_producer_key_is_accepted_with_javas_default() {
    let mut failures = Vec::new();
    for &(key, default) in JAVA_PRODUCER_KEYS {
        let Some(default) = default else { continue };
        match (build(&[(key, default)]), refusal(key)) {
            (Ok(_), None) => {}
            (Err(e), Some(rule)) if e.keys() == [key] && e.to_string().contains(rule) => {}
            (result, refusal) => failures.push(format!(
                "{key}={default:?}: {result:?} (refusal: {refusal:?})"
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_java_producer_key_whose_default_is_null_is_known() {
    // Any value will do: the key must be read (honoured, or checked and ignored), never be
    // refused as unknown.
    for &(key, default) in JAVA_PRODUCER_KEYS {
        if default.is_some() {
            continue;
        }
        if let Err(ConfigError::UnknownKey { .. }) = build(&[(key, "x")]) {
            panic!("{key} is unknown");
        }
    }
}

#[test]
fn a_properties_file_of_every_java_default_loads() {
    let text: String = JAVA_PRODUCER_KEYS
        .iter()
        .filter(|(key, _)| refusal(key).is_none())
        .filter_map(|(key, default)| default.map(|d| format!("{key}={d}\n")))
        .collect();
    let config = ProducerConfigBuilder::new()
        .set_properties(&text)
        .build()
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(config.enable_idempotence);
}

#[test]
fn the_list_names_each_key_once() {
    let mut keys: Vec<&str> = JAVA_PRODUCER_KEYS.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    let before = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), before);
}

#[test]
fn a_java_class_key_with_a_value_is_refused_naming_what_is_not_supported() {
    for key in [
        "ssl.engine.factory.class",
        "security.providers",
        "config.providers",
        "sasl.client.callback.handler.class",
        "sasl.login.callback.handler.class",
        "sasl.login.class",
    ] {
        let (named, rule) = invalid(&[(key, "com.example.Custom")]);
        assert_eq!(named, key);
        assert!(rule.starts_with("must be empty: "), "{key}: {rule}");
        assert!(rule.contains("not supported"), "{key}: {rule}");
        build(&[(key, "")]).unwrap_or_else(|e| panic!("{key} empty: {e}"));
    }
}

#[test]
fn inert_sasl_keys_are_still_checked_as_java_checks_them() {
    let (key, rule) = invalid(&[("sasl.login.refresh.window.factor", "2")]);
    assert_eq!(key, "sasl.login.refresh.window.factor");
    assert!(rule.contains("from 0.5 to 1"), "{rule}");
    let (key, rule) = invalid(&[("sasl.kerberos.ticket.renew.jitter", "often")]);
    assert_eq!(key, "sasl.kerberos.ticket.renew.jitter");
    assert_eq!(rule, "must be a number");
    let (key, rule) = invalid(&[("sasl.login.refresh.buffer.seconds", "3601")]);
    assert_eq!(key, "sasl.login.refresh.buffer.seconds");
    assert!(rule.contains("from 0 to 3600"), "{rule}");
    let (key, rule) = invalid(&[("sasl.oauthbearer.assertion.algorithm", "HS256")]);
    assert_eq!(key, "sasl.oauthbearer.assertion.algorithm");
    assert!(rule.contains("ES256, RS256 (case-insensitive)"), "{rule}");
    build(&[("sasl.oauthbearer.assertion.algorithm", "es256")]).unwrap();
}
