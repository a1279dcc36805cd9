//! kacrab over `SASL_PLAINTEXT` with OAUTHBEARER against the reference cluster, whose
//! listeners check tokens as Kafka's unsecured validator does: a producer with a token
//! provider produces and every record is in the log once; a provider error and an expired
//! token are one typed, fatal error after one attempt per broker; sessions bounded by
//! `connections.max.reauth.ms` or by the token's expiry end during a run without losing or
//! duplicating a record, and each new authentication asks the provider for a token; a
//! validator a test installs decides instead of the unsecured one.
//!
//! The read-back consumer is librdkafka, authenticating with PLAIN (the listeners enable it
//! too), so what kacrab wrote over OAUTHBEARER is read independently.
#![cfg(feature = "testkit")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::oauthbearer::{unsecured_token, ValidatedToken};
use kacrab::testkit::server::{ReferenceCluster, SaslListener};
use kacrab::{OAuthBearerToken, ProduceError, Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

use common::{
    check_exactly_once, payload_ids, produce_across_sessions, read_back_with, Isolation,
    SessionsRun,
};

const PARTITIONS: i32 = 3;
const READER: &str = "reader";
const READER_PASSWORD: &str = "r3ader";
const MECHANISM: &str = "OAUTHBEARER";
const LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;";

fn listener() -> SaslListener {
    SaslListener::new(&[MECHANISM, "PLAIN"]).user(READER, READER_PASSWORD)
}

/// A cluster of `brokers` with `topic`'s partitions led by brokers 1, 2, 3 in turn, or all
/// by broker 1 on a cluster of one.
fn cluster(brokers: usize, listener: SaslListener, topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start_with_sasl(brokers, BrokerRules::default(), listener);
    let leaders: Vec<i32> = (0..PARTITIONS).map(|p| p % brokers as i32 + 1).collect();
    cluster.create_topic(topic, &leaders);
    cluster
}

/// A provider that counts its calls and answers with `token()`.
fn counting_provider(
    token: impl Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static,
) -> (
    Arc<AtomicU64>,
    impl Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static,
) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let provider = move || {
        counted.fetch_add(1, Ordering::SeqCst);
        token()
    };
    (calls, provider)
}

/// An unsecured token for `alice` that expires `lifetime` from when it is made.
fn fresh_token(lifetime: Duration) -> Result<OAuthBearerToken, String> {
    let expires_at = SystemTime::now() + lifetime;
    Ok(OAuthBearerToken::new(
        unsecured_token("alice", expires_at),
        expires_at,
    ))
}

fn producer(
    cluster: &ReferenceCluster,
    provider: impl Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static,
) -> Producer {
    Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("kacrab.shards", "2")
        .set("linger.ms", "5")
        .set("batch.size", "2048")
        .set("reconnect.backoff.ms", "1")
        .set("reconnect.backoff.max.ms", "1")
        .set("max.block.ms", "10000")
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", MECHANISM)
        .set("sasl.jaas.config", LOGIN_MODULE)
        .oauth_token_provider(provider)
        .build()
        .expect("producer")
}

fn record(topic: &str, id: u64) -> ProducerRecord {
    ProducerRecord::new(topic, Bytes::copy_from_slice(&id.to_be_bytes()))
        .with_partition((id % PARTITIONS as u64) as i32)
}

/// Sends ids `range`, every one acknowledged.
fn send_acknowledged(producer: &Producer, topic: &str, range: std::ops::Range<u64>) {
    let deliveries: Vec<_> = range
        .clone()
        .map(|id| producer.send(record(topic, id)))
        .collect();
    for (id, delivery) in range.zip(deliveries) {
        delivery
            .wait_timeout(Duration::from_secs(30))
            .expect("the record resolves")
            .unwrap_or_else(|e| panic!("record {id} failed: {e}"));
    }
}

/// Reads `topic` back over PLAIN and checks ids `0..count` are each in it once, in order.
fn assert_in_the_log_once(cluster: &ReferenceCluster, topic: &str, count: u64) {
    let records = read_back_with(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", READER),
            ("sasl.password", READER_PASSWORD),
        ],
    );
    let sent: Vec<u64> = (0..count).collect();
    // Panics on a duplicate, a gap or a reordering.
    let verdict = check_exactly_once(&payload_ids(&records), &sent, &sent);
    assert!(
        verdict.starts_with(&format!("{count} records read")),
        "{verdict}"
    );
}

#[test]
fn a_producer_with_a_token_provider_produces_and_the_records_are_in_the_log() {
    let topic = "oauth-produce";
    let cluster = cluster(3, listener(), topic);
    let (calls, provider) = counting_provider(|| fresh_token(Duration::from_secs(3600)));
    let producer = producer(&cluster, provider);
    send_acknowledged(&producer, topic, 0..300);
    producer.close(Duration::from_secs(5));
    let stats = cluster.stats();
    let authenticated = stats.authentications_succeeded(MECHANISM);
    assert!(authenticated >= 1, "kacrab never authenticated");
    assert_eq!(stats.authentications_failed(MECHANISM), 0);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        authenticated,
        "the provider is asked once per authentication"
    );
    assert_in_the_log_once(&cluster, topic, 300);
}

/// Sends records that must all fail; checks each is the typed authentication error naming a
/// broker and `reason_part`, then that the producer made one attempt per broker at most
/// (each of its two shards connects on its own and stops at its first refusal).
fn assert_fails_after_one_attempt_per_broker(
    cluster: &ReferenceCluster,
    producer: &Producer,
    topic: &str,
    reason_part: &str,
) {
    let errors =
        common::send_expecting_failures(producer, 20, |id| record(topic, id), "without a token");
    for error in &errors {
        match error {
            ProduceError::Authentication {
                broker,
                mechanism,
                reason,
            } => {
                assert_eq!(mechanism, MECHANISM);
                assert!(
                    (1..=3).any(|b| broker.contains(&cluster.broker_address(b).to_string())),
                    "the error does not name a broker's address: {broker}"
                );
                assert!(reason.contains(reason_part), "{reason}");
            }
            other => panic!("expected ProduceError::Authentication, got {other:?}"),
        }
    }
    let stats = cluster.stats();
    // With a reconnect backoff of 1 ms a retrying producer would make a third attempt within
    // milliseconds; watching half a second for an event that must not come cannot pass by
    // timing.
    assert!(
        !stats.wait_for_requests(ApiKey::SaslHandshake, 3, Duration::from_millis(500)),
        "the producer kept authenticating after the failure"
    );
    let runtime = producer.runtime_stats();
    producer.close(Duration::from_secs(5));
    let attempts = stats.requests(ApiKey::SaslHandshake);
    assert!((1..=2).contains(&attempts), "{attempts} attempts");
    assert!(
        stats.connections_accepted() <= 2,
        "{} connections",
        stats.connections_accepted()
    );
    assert!(
        runtime.connects_started <= 2,
        "{}",
        runtime.connects_started
    );
    assert_eq!(stats.authentications_succeeded(MECHANISM), 0);
}

// The provider is the application's code, run on a shard thread: its panic is that
// authentication's failure (as an `Err` from it would be), not the end of the shard. Every
// record then fails with the typed error, and flush and close return.
#[test]
fn a_panicking_token_provider_fails_that_authentication_and_the_shard_lives() {
    let topic = "oauth-provider-panic";
    let cluster = cluster(3, listener(), topic);
    let (calls, provider) = counting_provider(|| panic!("the token cache is poisoned"));
    let producer = producer(&cluster, provider);
    assert_fails_after_one_attempt_per_broker(
        &cluster,
        &producer,
        topic,
        "the token provider panicked: the token cache is poisoned",
    );
    assert!(calls.load(Ordering::SeqCst) >= 1);
    assert!(
        producer.flush_timeout(Duration::from_secs(5)),
        "every record has completed"
    );
    let watch = producer.runtime_watch();
    let (closed_tx, closed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        producer.close(Duration::from_secs(1));
        let _ = closed_tx.send(());
    });
    assert!(
        closed.recv_timeout(Duration::from_secs(20)).is_ok(),
        "close returns after a token provider panicked"
    );
    assert_eq!(
        watch.stats().shards_running,
        0,
        "the shards stopped at close"
    );
}

#[test]
fn a_provider_error_fails_every_record_with_the_typed_error_after_one_attempt_per_broker() {
    let topic = "oauth-provider-error";
    let cluster = cluster(3, listener(), topic);
    let (calls, provider) = counting_provider(|| Err("the identity provider is down".into()));
    let producer = producer(&cluster, provider);
    assert_fails_after_one_attempt_per_broker(
        &cluster,
        &producer,
        topic,
        "the token provider failed: the identity provider is down",
    );
    let stats = cluster.stats();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        stats.requests(ApiKey::SaslHandshake)
    );
    assert_eq!(
        stats.requests(ApiKey::SaslAuthenticate),
        0,
        "nothing is sent without a token"
    );
}

#[test]
fn an_expired_token_fails_with_the_typed_error_after_one_attempt_per_broker() {
    let topic = "oauth-expired";
    let cluster = cluster(3, listener(), topic);
    let expired = || {
        let expires_at = SystemTime::now() - Duration::from_secs(60);
        Ok(OAuthBearerToken::new(
            unsecured_token("alice", expires_at),
            expires_at,
        ))
    };
    let (calls, provider) = counting_provider(expired);
    let producer = producer(&cluster, provider);
    assert_fails_after_one_attempt_per_broker(&cluster, &producer, topic, "invalid_token");
    let stats = cluster.stats();
    let attempts = stats.requests(ApiKey::SaslHandshake);
    assert_eq!(calls.load(Ordering::SeqCst), attempts);
    assert_eq!(stats.authentications_failed(MECHANISM), attempts);
    // The initial response, then the `\x01` that ends a refused exchange, per attempt.
    assert_eq!(stats.requests(ApiKey::SaslAuthenticate), 2 * attempts);
}

// KIP-368: with `connections.max.reauth.ms` of 2 s the broker closes a connection whose
// session ended at its next request other than SaslHandshake. kacrab stops sending on a
// connection before its session ends and re-authenticates on it, asking the provider for a
// new token each time; over a run of several sessions no request comes after a session's end,
// no connection is replaced, and every record is in the log exactly once.
#[test]
fn a_run_longer_than_connections_max_reauth_ms_delivers_every_record_exactly_once() {
    let topic = "oauth-reauth";
    let listener = listener().session_lifetime(Duration::from_secs(2));
    let cluster = cluster(1, listener, topic);
    let (calls, provider) = counting_provider(|| fresh_token(Duration::from_secs(3600)));
    let producer = producer(&cluster, provider);
    // Two tokens more than the first connections took: sessions were renewed.
    let renewed = || calls.load(Ordering::SeqCst);
    let run = produce_across_sessions(&cluster, &producer, topic, PARTITIONS, &renewed, 2);
    producer.close(Duration::from_secs(5));
    assert_renewed_in_place(&cluster, &calls, &run);
    assert_in_the_log_once(&cluster, topic, run.sent);
}

/// Sessions were renewed by re-authenticating on the same connections (KIP-368), each
/// renewal with a new token, and no request came after a session's end.
fn assert_renewed_in_place(cluster: &ReferenceCluster, calls: &AtomicU64, run: &SessionsRun) {
    let stats = cluster.stats();
    assert_eq!(
        stats.ended_sessions_closed(),
        0,
        "a request came after its session ended"
    );
    assert!(
        stats.reauthentications() >= 2,
        "{} re-authentications",
        stats.reauthentications()
    );
    assert_eq!(
        stats.connections_accepted(),
        run.connections_after_first_round,
        "a connection was replaced instead of re-authenticated"
    );
    // Once per authentication: a renewal the close cut short asked for its token but was
    // never accepted, at most one per connection.
    let calls = calls.load(Ordering::SeqCst);
    let succeeded = stats.authentications_succeeded(MECHANISM);
    assert!(
        (succeeded..=succeeded + stats.connections_accepted()).contains(&calls),
        "{calls} tokens for {succeeded} authentications"
    );
    assert_eq!(stats.authentications_failed(MECHANISM), 0);
}

// Without `connections.max.reauth.ms` the token's expiry alone bounds the session (Kafka's
// `calcCompletionTimesAndReturnSessionLifetimeMs`): tokens that live 2 s are renewed on the
// same connections during a longer run, and nothing is lost or duplicated.
#[test]
fn a_session_bounded_by_the_token_expiry_is_renewed_with_a_new_token() {
    let topic = "oauth-token-expiry";
    let cluster = cluster(1, listener(), topic);
    let (calls, provider) = counting_provider(|| fresh_token(Duration::from_secs(2)));
    let producer = producer(&cluster, provider);
    let renewed = || calls.load(Ordering::SeqCst);
    let run = produce_across_sessions(&cluster, &producer, topic, PARTITIONS, &renewed, 2);
    producer.close(Duration::from_secs(5));
    assert_renewed_in_place(&cluster, &calls, &run);
    assert_in_the_log_once(&cluster, topic, run.sent);
}

// A validator the test installs replaces the unsecured one: the status it refuses a token
// with reaches the application in the typed error, and a token it accepts is served.
#[test]
fn an_installed_validator_decides_and_its_refusal_status_is_in_the_error() {
    let topic = "oauth-validator";
    let validator = |token: &str| match token {
        "good.token" => Ok(ValidatedToken {
            principal: "alice".into(),
            expires_at: SystemTime::now() + Duration::from_secs(3600),
        }),
        _ => Err("insufficient_scope".to_string()),
    };
    let cluster = cluster(1, listener().oauthbearer_validator(validator), topic);
    let accepted = producer(&cluster, || {
        Ok(
            OAuthBearerToken::expiring_in("good.token", Duration::from_secs(3600))
                .with_principal("alice")
                .with_extension("traceId", "t1"),
        )
    });
    send_acknowledged(&accepted, topic, 0..10);
    accepted.close(Duration::from_secs(5));
    assert_in_the_log_once(&cluster, topic, 10);

    let refused_topic = "oauth-validator-refused";
    cluster.create_topic(refused_topic, &[1, 1, 1]);
    let refused = producer(&cluster, || {
        Ok(OAuthBearerToken::expiring_in(
            "other.token",
            Duration::from_secs(3600),
        ))
    });
    let errors = common::send_expecting_failures(
        &refused,
        5,
        |id| record(refused_topic, id),
        "with a refused token",
    );
    for error in &errors {
        assert!(
            error
                .to_string()
                .contains(r#"{"status":"insufficient_scope"}"#),
            "{error}"
        );
    }
    refused.close(Duration::from_secs(5));
}
