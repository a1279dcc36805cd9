//! kacrab over `SSL` and `SASL_SSL` against the reference cluster's TLS listeners, with
//! certificates made in the test: records land exactly once and in order; a certificate the
//! producer cannot trust (unknown authority, another host's name, expired) or a broker that
//! wants a client certificate the producer lacks is one typed, fatal error after one attempt
//! per broker. The `ssl.*` keys' typed errors are in `config_tls.rs`.
//!
//! The read-back consumer is librdkafka on each broker's second, plaintext listener (the
//! `rdkafka` crate is built without OpenSSL here): it reads what kacrab wrote over TLS
//! independently, from the same brokers.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{
    Issued, ReferenceCluster, SaslListener, TestCa, TlsListener, TlsVersion, Validity,
};
use kacrab::{ProduceError, Producer, ProducerRecord};

use common::temp_file::TempFile;
use common::{
    assert_read_back_exactly_once, check_exactly_once, payload_ids, read_back_with, Isolation,
};

const PARTITIONS: i32 = 3;
const USER: &str = "alice";
const PASSWORD: &str = "al1ce-s3cret";
const SCRAM_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// The names the brokers are reached by: the bootstrap list and the Metadata answers give
/// 127.0.0.1, a client that resolves it would use `localhost`.
const BROKER_NAMES: &[&str] = &["localhost", "127.0.0.1"];

fn tls_cluster(listener: TlsListener, sasl: Option<SaslListener>, topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start_with_tls(3, BrokerRules::default(), listener, sasl);
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster
}

/// A cluster whose listeners present a certificate of `validity` for the brokers' names from a
/// fresh test CA, and that CA's certificate (PEM), for a producer to trust.
fn ssl_cluster(topic: &str, validity: Validity) -> (ReferenceCluster, String) {
    let ca = TestCa::new("kacrab test CA");
    let server = ca.issue_server(BROKER_NAMES, validity);
    let cluster = tls_cluster(TlsListener::new(&server), None, topic);
    (cluster, ca.certificate_pem())
}

/// A producer over SSL that trusts `ca_pem`, with `settings` on top.
fn ssl_producer(cluster: &ReferenceCluster, ca_pem: &str, settings: &[(&str, &str)]) -> Producer {
    let mut all = vec![
        ("security.protocol", "SSL"),
        ("ssl.truststore.certificates", ca_pem),
    ];
    all.extend_from_slice(settings);
    producer(cluster, &all)
}

fn producer(cluster: &ReferenceCluster, settings: &[(&str, &str)]) -> Producer {
    let mut all = vec![
        ("reconnect.backoff.ms", "1"),
        ("reconnect.backoff.max.ms", "1"),
        ("max.block.ms", "10000"),
    ];
    all.extend_from_slice(settings);
    common::kacrab_producer(&cluster.bootstrap_servers(), &all)
}

fn record(topic: &str, id: u64) -> ProducerRecord {
    padded_record(topic, id, 0)
}

/// The id, then `filler` bytes.
fn padded_record(topic: &str, id: u64, filler: usize) -> ProducerRecord {
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(8 + filler, b'k');
    ProducerRecord::new(topic, Bytes::from(payload)).with_partition((id % PARTITIONS as u64) as i32)
}

/// Sends ids `0..count`, each with `filler` bytes after it; every one must be acknowledged.
fn produce_all(producer: &Producer, topic: &str, count: u64, filler: usize) {
    let deliveries: Vec<_> = (0..count)
        .map(|id| producer.send(padded_record(topic, id, filler)))
        .collect();
    for (id, delivery) in deliveries.into_iter().enumerate() {
        let outcome = delivery
            .wait_timeout(Duration::from_secs(30))
            .expect("the record resolves");
        outcome.unwrap_or_else(|e| panic!("record {id} failed: {e}"));
    }
}

/// Reads `topic` back through the plaintext listeners and checks ids `0..count` are there
/// exactly once, in order per partition.
fn read_back_exactly_once(
    cluster: &ReferenceCluster,
    topic: &str,
    count: u64,
    extra: &[(&str, &str)],
) {
    let bootstrap = cluster.plaintext_bootstrap_servers();
    assert_read_back_exactly_once(&bootstrap, topic, PARTITIONS, count, extra);
}

#[test]
fn kacrab_produces_over_ssl_and_the_records_read_back_exactly_once_and_in_order() {
    let topic = "tls-ssl";
    let (cluster, ca_pem) = ssl_cluster(topic, Validity::Current);
    // Batches of up to 64 KiB, written from their own buffers (not copied into the small
    // segments' run), several per write: more than rustls buffers at once.
    let producer = producer(
        &cluster,
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.certificates", &ca_pem),
            ("batch.size", "65536"),
            ("linger.ms", "20"),
        ],
    );
    let count = 3000;
    produce_all(&producer, topic, count, 1000);
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    let handshakes: u64 = (1..=3).map(|b| stats.tls_handshakes_succeeded(b)).sum();
    assert!(handshakes >= 3, "{handshakes} TLS handshakes");
    assert_eq!(
        (1..=3).map(|b| stats.tls_handshakes_failed(b)).sum::<u64>(),
        0
    );
    // Both sides prefer TLS 1.3.
    assert_eq!(stats.tls_sessions_at(TlsVersion::Tls13), handshakes);
    read_back_exactly_once(&cluster, topic, count, &[]);
}

#[test]
fn ssl_enabled_protocols_limits_the_producer_to_tls_1_2() {
    let topic = "tls-1-2";
    let (cluster, ca_pem) = ssl_cluster(topic, Validity::Current);
    let producer = ssl_producer(&cluster, &ca_pem, &[("ssl.enabled.protocols", "TLSv1.2")]);
    let count = 300;
    produce_all(&producer, topic, count, 0);
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    assert!(stats.tls_sessions_at(TlsVersion::Tls12) >= 1);
    assert_eq!(stats.tls_sessions_at(TlsVersion::Tls13), 0);
    read_back_exactly_once(&cluster, topic, count, &[]);
}

#[test]
fn a_broker_sharing_no_tls_version_with_the_producer_fails_with_the_typed_error() {
    let topic = "tls-no-common-version";
    let ca = TestCa::new("kacrab test CA");
    let server = ca.issue_server(BROKER_NAMES, Validity::Current);
    let listener = TlsListener::with_versions(&server, &[TlsVersion::Tls13]);
    let cluster = tls_cluster(listener, None, topic);
    let ca_pem = ca.certificate_pem();
    let producer = ssl_producer(&cluster, &ca_pem, &[("ssl.enabled.protocols", "TLSv1.2")]);
    assert_fatal_tls_refusal(&cluster, producer, topic, "ProtocolVersion");
}

#[test]
fn kacrab_produces_over_sasl_ssl_with_scram_sha_512_and_the_records_read_back_exactly_once() {
    let topic = "tls-sasl-ssl";
    let ca = TestCa::new("kacrab test CA");
    let server = ca.issue_server(BROKER_NAMES, Validity::Current);
    let sasl = SaslListener::new(&["PLAIN", "SCRAM-SHA-512"]).user(USER, PASSWORD);
    let cluster = tls_cluster(TlsListener::new(&server), Some(sasl), topic);
    let truststore = TempFile::new("sasl-ssl-ca.pem", &ca.certificate_pem());
    let jaas = format!("{SCRAM_MODULE} required username=\"{USER}\" password=\"{PASSWORD}\";");
    let producer = producer(
        &cluster,
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", &jaas),
            ("ssl.truststore.location", truststore.path()),
        ],
    );
    let count = 300;
    produce_all(&producer, topic, count, 0);
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    assert!(stats.authentications_succeeded("SCRAM-SHA-512") >= 1);
    assert_eq!(stats.authentications_failed("SCRAM-SHA-512"), 0);
    let handshakes: u64 = (1..=3).map(|b| stats.tls_handshakes_succeeded(b)).sum();
    assert!(handshakes >= 1, "SCRAM ran without TLS");
    // The plaintext listeners authenticate too (SASL_PLAINTEXT); librdkafka's SCRAM needs
    // OpenSSL, so the reader uses PLAIN as the same user.
    read_back_exactly_once(
        &cluster,
        topic,
        count,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", USER),
            ("sasl.password", PASSWORD),
        ],
    );
}

// The transaction coordinator is found and reached over TLS too (FindCoordinator answers with
// the TLS listener's address); the commit's markers make the records visible to a
// read_committed reader on the plaintext listeners, the aborted ones stay hidden.
#[test]
fn a_transactional_producer_commits_over_ssl_and_read_committed_sees_only_the_committed_records() {
    let topic = "tls-transactions";
    let (cluster, ca_pem) = ssl_cluster(topic, Validity::Current);
    let producer = ssl_producer(&cluster, &ca_pem, &[("transactional.id", "tls-txn")]);
    let call = Duration::from_secs(30);
    producer.init_transactions(call).expect("init_transactions");
    let mut committed = Vec::new();
    for (txn, ids) in [0..60u64, 60..120, 120..180].into_iter().enumerate() {
        producer.begin_transaction().expect("begin_transaction");
        let deliveries: Vec<_> = ids
            .clone()
            .map(|id| producer.send(record(topic, id)))
            .collect();
        if txn == 1 {
            producer.abort_transaction(call).expect("abort_transaction");
        } else {
            producer
                .commit_transaction(call)
                .expect("commit_transaction");
            committed.extend(ids.clone());
        }
        for (id, delivery) in ids.zip(deliveries) {
            let outcome = delivery.wait_timeout(call).expect("the record resolves");
            if txn != 1 {
                outcome.unwrap_or_else(|e| panic!("record {id} of a committed transaction: {e}"));
            }
        }
    }
    producer.close(Duration::from_secs(5));
    let records = read_back_with(
        &cluster.plaintext_bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadCommitted,
        Duration::from_secs(30),
        &[],
    );
    let ids = payload_ids(&records);
    // The aborted ids may not appear at all: only the committed ones bound what is read.
    let verdict = check_exactly_once(&ids, &committed, &committed);
    assert!(verdict.starts_with("120 records read"), "{verdict}");
}

// A connection lost for another reason than a refusal is not fatal: the producer reconnects,
// with a new handshake, as over plaintext.
#[test]
fn a_tls_connection_lost_with_its_broker_is_reopened_when_the_broker_returns() {
    let topic = "tls-broker-restart";
    let (cluster, ca_pem) = ssl_cluster(topic, Validity::Current);
    let producer = ssl_producer(&cluster, &ca_pem, &[]);
    produce_all(&producer, topic, 90, 0);
    let stats = cluster.stats();
    let before = stats.tls_handshakes_succeeded(1);
    assert!(before >= 1);
    cluster.broker_down(1);
    let deliveries: Vec<_> = (90..180)
        .map(|id| producer.send(record(topic, id)))
        .collect();
    cluster.broker_up(1);
    for (id, delivery) in (90..).zip(deliveries) {
        let outcome = delivery
            .wait_timeout(Duration::from_secs(30))
            .expect("the record resolves");
        outcome.unwrap_or_else(|e| panic!("record {id} failed: {e}"));
    }
    producer.close(Duration::from_secs(5));
    assert!(stats.tls_handshakes_succeeded(1) > before);
    assert_eq!(
        (1..=3).map(|b| stats.tls_handshakes_failed(b)).sum::<u64>(),
        0
    );
    read_back_exactly_once(&cluster, topic, 180, &[]);
}

/// Sends `count` records and returns each one's error; panics if one succeeds.
fn send_expecting_failures(producer: &Producer, topic: &str, count: u64) -> Vec<ProduceError> {
    common::send_expecting_failures(
        producer,
        count,
        |id| record(topic, id),
        "over a refused TLS session",
    )
}

/// Every waiting record, and every later one, fails with `ProduceError::Tls` naming a broker
/// and a reason containing `reason_part`, and no connection is opened after the refusal. Each
/// of the two shards connects on its own and stops at its first refusal, so the brokers see
/// at most two handshakes in all (both may go to the same bootstrap broker), none completed.
///
/// With a reconnect backoff of 1 ms a retrying producer makes a third attempt within
/// milliseconds; the brokers are watched for one for half a second (a wait for an event that
/// must not come, so the assertion cannot pass by timing).
fn assert_fatal_tls_refusal(
    cluster: &ReferenceCluster,
    producer: Producer,
    topic: &str,
    reason_part: &str,
) {
    let errors = send_expecting_failures(&producer, topic, 20);
    for error in &errors {
        match error {
            ProduceError::Tls { broker, reason } => {
                assert!(
                    (1..=3).any(|b| broker.contains(&cluster.broker_address(b).to_string())),
                    "the error does not name a broker's address: {broker}"
                );
                assert!(reason.contains(reason_part), "{reason}");
                let shown = error.to_string();
                assert!(shown.contains(broker) && shown.contains("TLS"), "{shown}");
            }
            other => panic!("expected ProduceError::Tls, got {other:?}"),
        }
    }
    let later = send_expecting_failures(&producer, topic, 20);
    assert!(later.iter().all(|e| *e == errors[0]), "{later:?}");
    let stats = cluster.stats();
    // The broker's side of the refused handshake ends as the producer's does.
    assert!(stats.wait_for_tls_handshakes(1, Duration::from_secs(10)));
    assert!(
        !stats.wait_for_tls_handshakes(3, Duration::from_millis(500)),
        "the producer kept connecting after the refusal"
    );
    let runtime = producer.runtime_stats();
    producer.close(Duration::from_secs(5));
    let attempts = stats.tls_handshakes();
    assert!((1..=2).contains(&attempts), "{attempts} TLS handshakes");
    for broker in 1..=3 {
        assert_eq!(stats.tls_handshakes_succeeded(broker), 0, "broker {broker}");
    }
    assert!(
        runtime.connects_started <= 2,
        "{} connects",
        runtime.connects_started
    );
    assert_eq!(runtime.tls_failures, attempts);
}

#[test]
fn an_unknown_ca_fails_every_waiting_record_with_the_typed_error_after_one_attempt_per_broker() {
    let topic = "tls-unknown-ca";
    let ca = TestCa::new("kacrab test CA");
    let other = TestCa::new("another CA");
    let server = ca.issue_server(BROKER_NAMES, Validity::Current);
    let cluster = tls_cluster(TlsListener::new(&server), None, topic);
    let trusted = other.certificate_pem();
    let producer = producer(
        &cluster,
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.certificates", &trusted),
        ],
    );
    assert_fatal_tls_refusal(&cluster, producer, topic, "UnknownIssuer");
}

#[test]
fn a_hostname_mismatch_fails_with_the_typed_error_and_passes_without_endpoint_identification() {
    let topic = "tls-hostname";
    let ca = TestCa::new("kacrab test CA");
    let server = ca.issue_server(&["broker.example.com"], Validity::Current);
    let cluster = tls_cluster(TlsListener::new(&server), None, topic);
    let ca_pem = ca.certificate_pem();
    let settings = [
        ("security.protocol", "SSL"),
        ("ssl.truststore.certificates", ca_pem.as_str()),
    ];
    assert_fatal_tls_refusal(
        &cluster,
        producer(&cluster, &settings),
        topic,
        "not valid for name",
    );

    // Without the name check the same certificate, from the trusted authority, is accepted.
    let mut unchecked = settings.to_vec();
    unchecked.push(("ssl.endpoint.identification.algorithm", ""));
    let producer = producer(&cluster, &unchecked);
    let count = 60;
    produce_all(&producer, topic, count, 0);
    producer.close(Duration::from_secs(5));
    read_back_exactly_once(&cluster, topic, count, &[]);
}

#[test]
fn an_expired_server_certificate_fails_every_waiting_record_with_the_typed_error() {
    let topic = "tls-expired";
    let (cluster, ca_pem) = ssl_cluster(topic, Validity::Expired);
    let producer = ssl_producer(&cluster, &ca_pem, &[]);
    assert_fatal_tls_refusal(&cluster, producer, topic, "it has expired");
}

fn client_certificate_cluster(ca: &TestCa, topic: &str) -> ReferenceCluster {
    let server = ca.issue_server(BROKER_NAMES, Validity::Current);
    tls_cluster(
        TlsListener::requiring_client_certificates(&server, ca),
        None,
        topic,
    )
}

#[test]
fn a_broker_requiring_a_client_certificate_accepts_one_from_the_keystore() {
    let topic = "tls-client-cert";
    let ca = TestCa::new("kacrab test CA");
    let cluster = client_certificate_cluster(&ca, topic);
    let ca_pem = ca.certificate_pem();
    let client: Issued = ca.issue_client("kacrab-producer");
    // One PEM file with the key and the chain (`ssl.keystore.location`) ...
    let keystore = TempFile::new("client-keystore.pem", &client.combined_pem());
    let producer = ssl_producer(
        &cluster,
        &ca_pem,
        &[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", keystore.path()),
        ],
    );
    produce_all(&producer, topic, 60, 0);
    producer.close(Duration::from_secs(5));
    // ... or the chain and the key as PEM text.
    let producer = producer_with_text_keystore(&cluster, &ca_pem, &client);
    let deliveries: Vec<_> = (60..120)
        .map(|id| producer.send(record(topic, id)))
        .collect();
    for delivery in deliveries {
        delivery
            .wait_timeout(Duration::from_secs(30))
            .expect("the record resolves")
            .expect("acknowledged");
    }
    producer.close(Duration::from_secs(5));
    read_back_exactly_once(&cluster, topic, 120, &[]);
}

fn producer_with_text_keystore(
    cluster: &ReferenceCluster,
    ca_pem: &str,
    client: &Issued,
) -> Producer {
    producer(
        cluster,
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.certificates", ca_pem),
            ("ssl.keystore.certificate.chain", &client.certificate_pem),
            ("ssl.keystore.key", &client.key_pem),
        ],
    )
}

#[test]
fn a_broker_requiring_a_client_certificate_refuses_a_producer_without_one_with_the_typed_error() {
    let topic = "tls-no-client-cert";
    let ca = TestCa::new("kacrab test CA");
    let cluster = client_certificate_cluster(&ca, topic);
    let ca_pem = ca.certificate_pem();
    let producer = ssl_producer(&cluster, &ca_pem, &[]);
    assert_fatal_tls_refusal(&cluster, producer, topic, "requires a client certificate");
}

#[test]
fn a_client_certificate_from_another_authority_is_refused_with_the_typed_error() {
    let topic = "tls-foreign-client-cert";
    let ca = TestCa::new("kacrab test CA");
    let cluster = client_certificate_cluster(&ca, topic);
    let ca_pem = ca.certificate_pem();
    let foreign = TestCa::new("another CA").issue_client("kacrab-producer");
    let producer = producer_with_text_keystore(&cluster, &ca_pem, &foreign);
    assert_fatal_tls_refusal(
        &cluster,
        producer,
        topic,
        "refused the producer's client certificate",
    );
}
