//! kacrab over `SASL_PLAINTEXT` against the reference cluster's SASL listeners: PLAIN,
//! SCRAM-SHA-256 and SCRAM-SHA-512 produce and read back exactly once; wrong credentials and a
//! broker without the mechanism are one typed, fatal error after one attempt per broker; the
//! listener serves nothing before authentication.
//!
//! The read-back consumer is librdkafka, authenticating with PLAIN as the same user: the
//! `rdkafka` crate is built without OpenSSL here, and librdkafka's SCRAM needs it. The
//! listeners enable every mechanism, so what kacrab wrote over SCRAM is read independently.
#![cfg(feature = "testkit")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, SaslListener};
use kacrab::{ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use common::{
    assert_ids_exactly_once, check_exactly_once, payload_ids, produce_across_sessions,
    read_back_with, Isolation,
};

const PARTITIONS: i32 = 3;
const USER: &str = "alice";
const PASSWORD: &str = "al1ce-s3cret";

fn module(mechanism: &str) -> &'static str {
    if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    }
}

fn sasl_cluster(mechanisms: &[&str], topic: &str) -> ReferenceCluster {
    let listener = SaslListener::new(mechanisms).user(USER, PASSWORD);
    let cluster = ReferenceCluster::start_with_sasl(3, BrokerRules::default(), listener);
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster
}

fn sasl_producer(cluster: &ReferenceCluster, mechanism: &str, password: &str) -> Producer {
    let jaas = format!(
        "{} required username=\"{USER}\" password=\"{password}\";",
        module(mechanism)
    );
    common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", mechanism),
            ("sasl.jaas.config", &jaas),
            ("reconnect.backoff.ms", "1"),
            ("reconnect.backoff.max.ms", "1"),
            ("max.block.ms", "10000"),
        ],
    )
}

fn record(topic: &str, id: u64) -> ProducerRecord {
    ProducerRecord::new(topic, Bytes::copy_from_slice(&id.to_be_bytes()))
        .with_partition((id % PARTITIONS as u64) as i32)
}

/// Produces ids `0..count` over `mechanism`, every one acknowledged, and reads them back with
/// librdkafka over PLAIN: each exactly once, in order per partition.
fn produce_and_read_back(mechanism: &str) {
    let topic = format!("sasl-{}", mechanism.to_ascii_lowercase());
    let cluster = sasl_cluster(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], &topic);
    let producer = sasl_producer(&cluster, mechanism, PASSWORD);
    let count = 300u64;
    let deliveries: Vec<_> = (0..count)
        .map(|id| producer.send(record(&topic, id)))
        .collect();
    for (id, delivery) in deliveries.into_iter().enumerate() {
        let outcome = delivery
            .wait_timeout(Duration::from_secs(30))
            .expect("the record resolves");
        outcome.unwrap_or_else(|e| panic!("record {id} failed over {mechanism}: {e}"));
    }
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    assert!(
        stats.authentications_succeeded(mechanism) >= 1,
        "kacrab never authenticated with {mechanism}"
    );
    assert_eq!(stats.authentications_failed(mechanism), 0);

    let records = read_back_with(
        &cluster.bootstrap_servers(),
        &topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", USER),
            ("sasl.password", PASSWORD),
        ],
    );
    assert_ids_exactly_once(&records, count);
    assert!(
        stats.authentications_succeeded("PLAIN") >= 1,
        "the reader authenticated"
    );
}

#[test]
fn kacrab_produces_over_sasl_plain_and_the_records_read_back_exactly_once() {
    produce_and_read_back("PLAIN");
}

#[test]
fn kacrab_produces_over_scram_sha_256_and_the_records_read_back_exactly_once() {
    produce_and_read_back("SCRAM-SHA-256");
}

#[test]
fn kacrab_produces_over_scram_sha_512_and_the_records_read_back_exactly_once() {
    produce_and_read_back("SCRAM-SHA-512");
}

/// Sends `count` records and returns each one's error; panics if one succeeds.
fn send_expecting_failures(producer: &Producer, topic: &str, count: u64) -> Vec<ProduceError> {
    common::send_expecting_failures(
        producer,
        count,
        |id| record(topic, id),
        "without authentication",
    )
}

fn assert_authentication_error(
    error: &ProduceError,
    cluster: &ReferenceCluster,
    mechanism: &str,
    reason_part: &str,
) {
    match error {
        ProduceError::Authentication {
            broker,
            mechanism: m,
            reason,
        } => {
            assert_eq!(m, mechanism);
            assert!(
                (1..=3).any(|b| broker.contains(&cluster.broker_address(b).to_string())),
                "the error does not name a broker's address: {broker}"
            );
            assert!(reason.contains(reason_part), "{reason}");
            let shown = error.to_string();
            assert!(
                shown.contains(broker) && shown.contains(mechanism),
                "{shown}"
            );
        }
        other => panic!("expected ProduceError::Authentication, got {other:?}"),
    }
}

// Wrong credentials are fatal, as Java's SaslAuthenticationException: every waiting record,
// on both shards, fails with the typed error naming the broker and the broker's refusal, and
// no further connection is opened. Each shard connects on its own and stops at its first
// refusal, so the three brokers see at most two attempts in all (at most one per broker).
// With a reconnect backoff of 1 ms a retrying producer makes a third attempt within
// milliseconds; the broker is watched for one for half a second (a wait for an event that
// must not come, so the assertion cannot pass by timing).
#[test]
fn a_wrong_password_fails_every_waiting_record_with_the_typed_error_after_one_attempt_per_broker() {
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let topic = "sasl-wrong-password";
        let cluster = sasl_cluster(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], topic);
        let producer = sasl_producer(&cluster, mechanism, "not-the-password");
        let errors = send_expecting_failures(&producer, topic, 20);
        for error in &errors {
            assert_authentication_error(error, &cluster, mechanism, "SASL_AUTHENTICATION_FAILED");
            assert!(!error.to_string().contains("not-the-password"), "{error}");
        }
        // Records sent after the failure fail with it at once.
        let later = send_expecting_failures(&producer, topic, 20);
        assert!(later.iter().all(|e| *e == errors[0]), "{later:?}");
        let stats = cluster.stats();
        assert!(
            !stats.wait_for_requests(ApiKey::SaslHandshake, 3, Duration::from_millis(500)),
            "{mechanism}: the producer kept authenticating after the refusal"
        );
        let runtime = producer.runtime_stats();
        producer.close(Duration::from_secs(5));
        let attempts = stats.requests(ApiKey::SaslHandshake);
        assert!(
            (1..=2).contains(&attempts),
            "{mechanism}: {attempts} authentication attempts"
        );
        assert_eq!(stats.authentications_failed(mechanism), attempts);
        assert_eq!(stats.authentications_succeeded(mechanism), 0);
        assert!(
            runtime.connects_started <= 2,
            "{mechanism}: {} connects",
            runtime.connects_started
        );
    }
}

#[test]
fn a_broker_offering_only_other_mechanisms_fails_with_unsupported_sasl_mechanism() {
    let topic = "sasl-other-mechanisms";
    let cluster = sasl_cluster(&["GSSAPI", "OAUTHBEARER"], topic);
    let producer = sasl_producer(&cluster, "SCRAM-SHA-256", PASSWORD);
    let errors = send_expecting_failures(&producer, topic, 5);
    for error in &errors {
        assert_authentication_error(
            error,
            &cluster,
            "SCRAM-SHA-256",
            "UNSUPPORTED_SASL_MECHANISM",
        );
        assert!(error.to_string().contains("GSSAPI, OAUTHBEARER"), "{error}");
    }
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    assert!((1..=2).contains(&stats.requests(ApiKey::SaslHandshake)));
    assert_eq!(stats.requests(ApiKey::SaslAuthenticate), 0);
}

/// Writes one request frame and reads until the peer closes or answers; returns the bytes
/// read before the close (empty when it closed without answering).
fn raw_exchange(
    address: std::net::SocketAddr,
    api: ApiKey,
    version: i16,
    body: &impl Encodable,
) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&request_frame(api, version, 7, body))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

// Kafka's SaslServerAuthenticator: before the handshake only ApiVersions and SaslHandshake
// are served; any other request closes the connection unanswered.
#[test]
fn the_sasl_listener_closes_a_connection_whose_first_request_is_not_a_handshake() {
    let topic = "sasl-raw";
    let cluster = sasl_cluster(&["PLAIN"], topic);
    let answer = raw_exchange(
        cluster.broker_address(1),
        ApiKey::Metadata,
        12,
        &MetadataRequest::default(),
    );
    assert!(
        answer.is_empty(),
        "answered {} bytes before authentication",
        answer.len()
    );
    assert_eq!(cluster.stats().authentications_succeeded("PLAIN"), 0);
}

// A broker offering only SaslAuthenticate v0 (Kafka 1.x) is spoken to at v0: the negotiated
// version, not the newest, carries the exchange.
#[test]
fn a_broker_offering_only_sasl_authenticate_v0_is_authenticated_at_v0() {
    let topic = "sasl-v0";
    let cluster = sasl_cluster(&["SCRAM-SHA-512"], topic);
    cluster.set_api_versions(None, ApiKey::SaslAuthenticate, Some((0, 0)));
    let producer = sasl_producer(&cluster, "SCRAM-SHA-512", PASSWORD);
    let outcome = producer
        .send(record(topic, 1))
        .wait_timeout(Duration::from_secs(30))
        .expect("the record resolves");
    outcome.expect("acknowledged over SaslAuthenticate v0");
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    assert_eq!(stats.versions_seen(ApiKey::SaslAuthenticate), [0]);
    assert!(stats.authentications_succeeded("SCRAM-SHA-512") >= 1);
}

/// A request frame (length prefix included).
fn request_frame(api: ApiKey, version: i16, correlation_id: i32, body: &impl Encodable) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    out.to_vec()
}

/// Reads one size-prefixed frame; `None` if the peer closed first.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

/// SaslHandshake v0 for PLAIN, then the PLAIN message as a bare frame; returns the stream and
/// the bare answer (`None` if the broker closed instead).
fn bare_plain_exchange(cluster: &ReferenceCluster, password: &str) -> (TcpStream, Option<Vec<u8>>) {
    let mut stream = TcpStream::connect(cluster.broker_address(1)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    stream
        .write_all(&request_frame(ApiKey::SaslHandshake, 0, 1, &handshake))
        .unwrap();
    let mut answer = Bytes::from(read_frame(&mut stream).expect("the handshake is answered"));
    ResponseHeader::decode(&mut answer, 0).unwrap();
    let response = SaslHandshakeResponse::decode(&mut answer, 0).unwrap();
    assert_eq!(response.error_code, 0);
    let token = format!("\0{USER}\0{password}");
    let mut bare = (token.len() as i32).to_be_bytes().to_vec();
    bare.extend_from_slice(token.as_bytes());
    stream.write_all(&bare).unwrap();
    let answer = read_frame(&mut stream);
    (stream, answer)
}

// SaslHandshake v0 (before KIP-152): the tokens travel as bare frames without a Kafka header;
// once authenticated, the connection serves Kafka requests, and wrong credentials close it.
#[test]
fn the_sasl_listener_speaks_handshake_v0_with_bare_tokens() {
    let cluster = sasl_cluster(&["PLAIN"], "sasl-bare");
    let (mut stream, answer) = bare_plain_exchange(&cluster, PASSWORD);
    assert_eq!(
        answer.as_deref(),
        Some(&[][..]),
        "PLAIN answers an empty token"
    );
    stream
        .write_all(&request_frame(
            ApiKey::Metadata,
            12,
            2,
            &MetadataRequest::default(),
        ))
        .unwrap();
    let metadata = read_frame(&mut stream).expect("served once authenticated");
    assert_eq!(&metadata[..4], &2i32.to_be_bytes());

    let (_, answer) = bare_plain_exchange(&cluster, "wrong");
    assert_eq!(answer, None, "a failed bare exchange closes the connection");
    let stats = cluster.stats();
    assert_eq!(stats.authentications_succeeded("PLAIN"), 1);
    assert_eq!(stats.authentications_failed("PLAIN"), 1);
}

// A transactional producer learns the refusal in its first call: init_transactions fails
// fatally with the broker's reason, rather than waiting out its timeout.
#[test]
fn a_wrong_password_fails_init_transactions_fatally_naming_the_refusal() {
    let cluster = sasl_cluster(&["PLAIN"], "sasl-txn");
    let jaas = format!(
        "{} required username=\"{USER}\" password=\"wrong\";",
        module("PLAIN")
    );
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", &jaas),
            ("transactional.id", "sasl-txn-1"),
        ],
    );
    let error = producer
        .init_transactions(Duration::from_secs(60))
        .expect_err("init_transactions cannot succeed");
    match &error {
        kacrab::TransactionError::Fatal(cause) => {
            let reason = cause.to_string();
            assert!(reason.contains("SASL_AUTHENTICATION_FAILED"), "{reason}")
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
    producer.close(Duration::from_secs(5));
}

// A SASL_PLAINTEXT producer pointed at a PLAINTEXT listener: the broker does not offer
// SaslHandshake, which no retry changes; the error says so.
#[test]
fn a_sasl_producer_against_a_plaintext_listener_fails_naming_the_missing_handshake() {
    let topic = "sasl-on-plaintext";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1, 2, 3]);
    let producer = sasl_producer(&cluster, "PLAIN", PASSWORD);
    let errors = send_expecting_failures(&producer, topic, 3);
    for error in &errors {
        assert_authentication_error(error, &cluster, "PLAIN", "SaslHandshake");
    }
    producer.close(Duration::from_secs(5));
    assert_eq!(cluster.stats().requests(ApiKey::Metadata), 0);
}

// KIP-368: a broker with `connections.max.reauth.ms` closes a connection whose session ended
// at its next request other than SaslHandshake. kacrab stops sending on a connection at 90% of
// its session, waits for the answers in flight and re-authenticates on it, with each
// mechanism; over a run of several session lifetimes the broker never has to close a
// connection for an ended session, no connection is replaced, and every record is in the log
// once. The run lasts until two sessions were renewed (time passing is what is under test).
#[test]
fn sasl_sessions_are_renewed_on_the_same_connection_before_they_end() {
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let topic = "sasl-session";
        let listener = SaslListener::new(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
            .user(USER, PASSWORD)
            .session_lifetime(Duration::from_secs(2));
        let cluster = ReferenceCluster::start_with_sasl(1, BrokerRules::default(), listener);
        cluster.create_topic(topic, &[1]);
        let producer = sasl_producer(&cluster, mechanism, PASSWORD);
        let renewed = || cluster.stats().reauthentications();
        let run = produce_across_sessions(&cluster, &producer, topic, 1, &renewed, 2);
        producer.close(Duration::from_secs(5));
        let stats = cluster.stats();
        assert_eq!(
            stats.ended_sessions_closed(),
            0,
            "{mechanism}: a request came after its session ended"
        );
        assert_eq!(
            stats.connections_accepted(),
            run.connections_after_first_round,
            "{mechanism}: a connection was replaced instead of re-authenticated"
        );
        assert_eq!(stats.authentications_failed(mechanism), 0, "{mechanism}");
        let records = read_back_with(
            &cluster.bootstrap_servers(),
            topic,
            1,
            Isolation::ReadUncommitted,
            Duration::from_secs(30),
            &[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", USER),
                ("sasl.password", PASSWORD),
            ],
        );
        let sent: Vec<u64> = (0..run.sent).collect();
        let verdict = check_exactly_once(&payload_ids(&records), &sent, &sent);
        assert!(
            verdict.starts_with(&format!("{} records read", run.sent)),
            "{mechanism}: {verdict}"
        );
    }
}

/// SaslHandshake v1 and SaslAuthenticate v2 with PLAIN on `stream`; returns the announced
/// session lifetime. Correlation ids start at `first_id`.
fn raw_plain_authentication(stream: &mut TcpStream, first_id: i32) -> i64 {
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    stream
        .write_all(&request_frame(
            ApiKey::SaslHandshake,
            1,
            first_id,
            &handshake,
        ))
        .unwrap();
    let mut answer = Bytes::from(read_frame(stream).expect("the handshake is answered"));
    ResponseHeader::decode(&mut answer, 0).unwrap();
    assert_eq!(
        SaslHandshakeResponse::decode(&mut answer, 1)
            .unwrap()
            .error_code,
        0
    );
    let authenticate = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from(format!("\0{USER}\0{PASSWORD}")));
    stream
        .write_all(&request_frame(
            ApiKey::SaslAuthenticate,
            2,
            first_id + 1,
            &authenticate,
        ))
        .unwrap();
    let mut answer = Bytes::from(read_frame(stream).expect("the authentication is answered"));
    ResponseHeader::decode(&mut answer, 1).unwrap();
    let response = SaslAuthenticateResponse::decode(&mut answer, 2).unwrap();
    assert_eq!(response.error_code, 0);
    response.session_lifetime_ms
}

// KIP-368 on the listener, as Kafka's broker does: once a session has ended, SaslHandshake
// still begins a re-authentication on the connection, after which requests are served again;
// any other request after the end closes the connection unanswered. The brokers' clock is
// frozen: a session ends only when the test advances the clock past its end, and nothing
// ends while the test talks to the broker between advances, however slow the machine.
#[test]
fn after_its_session_ends_a_connection_may_re_authenticate_and_is_closed_at_any_other_request() {
    let lifetime = Duration::from_millis(300);
    let listener = SaslListener::new(&["PLAIN"])
        .user(USER, PASSWORD)
        .session_lifetime(lifetime);
    let cluster = ReferenceCluster::start_with_sasl(1, BrokerRules::default(), listener);
    cluster.freeze_clock();
    let mut stream = TcpStream::connect(cluster.broker_address(1)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // No time passes on the frozen clock between the authentication and its answer.
    assert_eq!(raw_plain_authentication(&mut stream, 1), 300);
    // Up to the end, the session holds.
    cluster.advance_clock(lifetime - Duration::from_millis(1));
    let metadata = request_frame(ApiKey::Metadata, 12, 3, &MetadataRequest::default());
    stream.write_all(&metadata).unwrap();
    let answer = read_frame(&mut stream).expect("served before the session's end");
    assert_eq!(&answer[..4], &3i32.to_be_bytes());
    // Past the end, a re-authentication is still allowed and starts a whole new session.
    cluster.advance_clock(Duration::from_millis(1));
    assert_eq!(raw_plain_authentication(&mut stream, 4), 300);
    let metadata = request_frame(ApiKey::Metadata, 12, 6, &MetadataRequest::default());
    stream.write_all(&metadata).unwrap();
    let answer = read_frame(&mut stream).expect("served on the renewed session");
    assert_eq!(&answer[..4], &6i32.to_be_bytes());
    assert_eq!(cluster.stats().ended_sessions_closed(), 0);
    // Past the renewed session's end, any other request closes the connection.
    cluster.advance_clock(lifetime);
    let metadata = request_frame(ApiKey::Metadata, 12, 7, &MetadataRequest::default());
    stream.write_all(&metadata).unwrap();
    assert_eq!(read_frame(&mut stream), None, "closed unanswered");
    let stats = cluster.stats();
    assert_eq!(stats.ended_sessions_closed(), 1);
    assert_eq!(stats.reauthentications(), 1);
    assert_eq!(stats.authentications_succeeded("PLAIN"), 2);
}
