//! The failover soak of `failover.rs` over `SASL_SSL` (SCRAM-SHA-512 inside TLS) with zstd
//! batches: every fault the reference cluster makes (answers dropped after the append,
//! connections reset, also in the middle of a TLS record, answers delayed past the request
//! timeout, injected errors, leaders moving, brokers going down) now also tears down TLS
//! sessions and SASL authentications, and every retry carries the same compressed bytes.
//! The log is read back by librdkafka's consumer on the brokers' plaintext listeners
//! (`SASL_PLAINTEXT` with PLAIN, as the same user: the `rdkafka` crate is built without
//! OpenSSL here), and checked record by record as in `failover.rs`.
#![cfg(feature = "testkit")]

mod common;
#[path = "failover/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::sync::Arc;

use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, SaslListener, TestCa, TlsListener, Validity};

use harness::*;

const USER: &str = "soak-user";
const PASSWORD: &str = "s0ak-pa55word";

// Bounded for CI (10 s of faults, 60 000 records); `KACRAB_SOAK_SECS`, `KACRAB_SOAK_RECORDS`
// and `KACRAB_SOAK_SEED` lengthen it or pick another fault schedule, as for `failover.rs`.
#[test]
fn soak_over_sasl_ssl_with_zstd_batches_loses_and_duplicates_nothing() {
    let secs = env_u64("KACRAB_SOAK_SECS", 10);
    let records = env_u64("KACRAB_SOAK_RECORDS", 60_000) as usize;
    let seed = env_u64("KACRAB_SOAK_SEED", 0x5a51_55e1).max(1);
    let topic = "soak-sasl-ssl";

    let ca = TestCa::new("kacrab soak CA");
    let server = ca.issue_server(&["localhost", "127.0.0.1"], Validity::Current);
    let sasl = SaslListener::new(&["PLAIN", "SCRAM-SHA-512"]).user(USER, PASSWORD);
    let cluster = ReferenceCluster::start_with_tls(
        BROKERS as usize,
        BrokerRules::default(),
        TlsListener::new(&server),
        Some(sasl),
    );
    let leaders: Vec<i32> = (0..PARTITIONS).map(leader_of).collect();
    cluster.create_topic(topic, &leaders);

    let ca_pem = ca.certificate_pem();
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{USER}\" password=\"{PASSWORD}\";"
    );
    let mut settings: Vec<(&str, &str)> = SOAK_SETTINGS.to_vec();
    settings.extend_from_slice(&[
        ("security.protocol", "SASL_SSL"),
        ("ssl.truststore.certificates", &ca_pem),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.jaas.config", &jaas),
        ("compression.type", "zstd"),
    ]);
    let producer = producer(&cluster, &settings);
    let reader = Reader {
        bootstrap: cluster.plaintext_bootstrap_servers(),
        settings: vec![
            ("security.protocol", "SASL_PLAINTEXT".to_string()),
            ("sasl.mechanism", "PLAIN".to_string()),
            ("sasl.username", USER.to_string()),
            ("sasl.password", PASSWORD.to_string()),
        ],
    };
    let cluster = Arc::new(cluster);
    soak(
        cluster.clone(),
        topic,
        producer,
        &reader,
        secs,
        records,
        seed,
    );

    assert_eq!(
        log_codecs(&cluster, topic),
        BTreeSet::from([4]),
        "every stored batch is zstd"
    );
    let stats = cluster.stats();
    assert_eq!(stats.authentications_failed("SCRAM-SHA-512"), 0);
    let handshakes: u64 = (1..=BROKERS)
        .map(|b| stats.tls_handshakes_succeeded(b))
        .sum();
    let authentications = stats.authentications_succeeded("SCRAM-SHA-512");
    println!("{handshakes} TLS handshakes, {authentications} SCRAM authentications");
    assert!(
        handshakes > BROKERS as u64 && authentications > BROKERS as u64,
        "the faults reconnected nothing: {handshakes} TLS handshakes, {authentications} \
         SCRAM authentications"
    );
}
