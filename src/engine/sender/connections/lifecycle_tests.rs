//! A connection's life against the scripted driver: generations, reconnect backoff, the setup
//! timeout, the choice of a node to connect to, correlation ids and the ApiVersions fallback
//! (Java's `NetworkClient` and `ClusterConnectionStates`).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;

use super::super::scripted_rig::{metadata_answer, Rig, Written, MS, SECOND};

/// Bootstrapped, and connecting to broker 1 (its connection not up yet). A batch waits
/// `retry.backoff.ms` (10 ms) to be sent again, a connection `reconnect.backoff.ms` (50 ms) to
/// be opened again.
fn connecting() -> Rig {
    let mut rig = Rig::new(&[
        ("retry.backoff.ms", "10"),
        ("retry.backoff.max.ms", "10"),
        ("reconnect.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "50"),
        ("socket.connection.setup.timeout.ms", "2000"),
        ("socket.connection.setup.timeout.max.ms", "2000"),
    ]);
    rig.start(12);
    rig
}

/// Broker 1's connection is lost with the record on it; the metadata refresh this asks for is
/// answered at once (broker 1 still leads `t`-0).
fn lost_and_refreshed(rig: &mut Rig) {
    rig.now += SECOND;
    rig.lost(1);
    rig.metadata(-1, 1, "old1", code::NONE);
}

fn connects_to(rig: &Rig, node: i32) -> usize {
    rig.connects.iter().filter(|(n, _)| *n == node).count()
}

#[test]
fn a_lost_connection_is_opened_again_only_after_reconnect_backoff_ms() {
    let mut rig = connecting();
    rig.negotiate(1, 12);
    lost_and_refreshed(&mut rig);
    assert_eq!(rig.engine.stats().disconnects, 1);
    rig.advance(49 * MS);
    assert_eq!(connects_to(&rig, 1), 1, "not again within the backoff");
    rig.advance(MS);
    assert_eq!(connects_to(&rig, 1), 2, "again once it ran out");
}

#[test]
fn an_event_about_an_earlier_connection_to_a_node_changes_nothing_on_the_current_one() {
    let mut rig = connecting();
    rig.negotiate(1, 12);
    let old = rig.generations[&1];
    lost_and_refreshed(&mut rig);
    rig.advance(SECOND);
    assert_ne!(
        rig.generations[&1], old,
        "a new connection, a new generation"
    );
    // The old socket's late events: its connect completing, then its close.
    rig.written.clear();
    rig.engine.on_connected(rig.now, 1, old);
    rig.poll();
    assert!(
        !rig.written.iter().any(|w| w.node == 1),
        "no handshake starts on a connection that is not up"
    );
    rig.connected(1);
    rig.engine.on_disconnected(rig.now, 1, old);
    rig.poll();
    assert_eq!(
        rig.engine.stats().disconnects,
        1,
        "only the first loss counts"
    );
    let versions = rig.take(1, ApiKey::ApiVersions);
    assert_eq!(
        versions.node, 1,
        "the current connection's handshake goes on"
    );
}

#[test]
fn a_second_disconnect_of_a_connection_already_down_is_not_counted() {
    let mut rig = connecting();
    rig.lost(1);
    rig.lost(1);
    assert_eq!(rig.engine.stats().disconnects, 1);
}

#[test]
fn a_connect_that_does_not_complete_within_the_setup_timeout_is_given_up() {
    let mut rig = connecting();
    // The second attempt, a second into the run, is the one left hanging.
    lost_and_refreshed(&mut rig);
    rig.advance(50 * MS);
    assert_eq!(connects_to(&rig, 1), 2);
    let since = rig.now;
    rig.now = since + 1999 * MS;
    rig.poll();
    assert!(rig.disconnects.is_empty());
    rig.now = since + 2000 * MS;
    rig.poll();
    assert_eq!(
        rig.disconnects,
        [1],
        "the attempt is closed at the setup timeout"
    );
    assert_eq!(rig.engine.stats().disconnects, 2);
}

#[test]
fn requests_on_a_connection_carry_distinct_correlation_ids() {
    let mut rig = connecting();
    rig.negotiate(1, 12);
    rig.engine.request_topic("u");
    rig.advance(SECOND);
    let ids: Vec<i32> = rig.written.iter().map(|w| w.correlation_id).collect();
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(ids.len() >= 2, "{ids:?}");
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
}

/// An UNSUPPORTED_VERSION answer to ApiVersions offering versions up to `max`.
fn unsupported_up_to(max: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(code::UNSUPPORTED_VERSION)
        .with_api_keys(vec![ApiVersion::default()
            .with_api_key(ApiKey::ApiVersions.code())
            .with_min_version(0)
            .with_max_version(max)])
}

#[test]
fn an_api_versions_request_the_broker_does_not_support_is_sent_again_at_its_highest_version() {
    let mut rig = connecting();
    rig.connected(1);
    let first = rig.take(1, ApiKey::ApiVersions);
    assert!(first.version > 2);
    // Kafka writes this refusal in the v0 layout, whatever version was asked for.
    let as_v0 = Written {
        version: 0,
        ..first
    };
    rig.answer(&as_v0, &unsupported_up_to(2));
    assert!(rig.engine.fatal_error().is_none());
    let again = rig.take(1, ApiKey::ApiVersions);
    assert_eq!(again.version, 2);
}

#[test]
fn a_broker_refusing_even_api_versions_v0_is_fatal() {
    let mut rig = connecting();
    rig.connected(1);
    let first = rig.take(1, ApiKey::ApiVersions);
    rig.answer(
        &Written {
            version: 0,
            ..first
        },
        &unsupported_up_to(0),
    );
    let v0 = rig.take(1, ApiKey::ApiVersions);
    assert_eq!(v0.version, 0);
    assert!(rig.engine.fatal_error().is_none());
    rig.answer(
        &v0,
        &ApiVersionsResponse::default().with_error_code(code::UNSUPPORTED_VERSION),
    );
    assert!(rig.engine.fatal_error().is_some());
}

/// Bootstrapped into a cluster of brokers 1 and 2, connecting to `leader` (`t`-0's); the
/// metadata backoff after that answer has run out.
fn two_brokers(leader: i32) -> Rig {
    let mut rig = Rig::new(&[
        ("reconnect.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "50"),
    ]);
    rig.poll();
    rig.negotiate(-1, 12);
    let request = rig.take(-1, ApiKey::Metadata);
    rig.answer(&request, &metadata_answer(&[(1, "b1"), (2, "b2")], leader));
    assert_eq!(rig.last_connect(), (leader, &*format!("b{leader}:9092")));
    rig.now += SECOND;
    rig
}

#[test]
fn with_no_connection_up_and_one_coming_up_no_other_is_opened() {
    // Broker 2's connection is coming up; broker 1 was never tried.
    let mut rig = two_brokers(2);
    rig.lost(-1);
    rig.advance(SECOND);
    assert_eq!(connects_to(&rig, 1), 0, "{:?}", rig.connects);
}

#[test]
fn with_no_connection_up_the_next_attempt_goes_to_a_node_out_of_its_backoff() {
    let mut rig = two_brokers(1);
    rig.lost(-1);
    rig.lost(1);
    // Broker 1 is in its reconnect backoff; broker 2 was never tried.
    assert_eq!(connects_to(&rig, 2), 1, "{:?}", rig.connects);
}
