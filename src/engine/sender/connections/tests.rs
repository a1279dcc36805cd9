//! `connections.max.idle.ms` (Java's `Selector` idle expiry), against the scripted driver.

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::engine::TopicPartition;
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;

use super::super::scripted_rig::{Quiet, Rig, MS, SECOND};

/// Bootstrapped, connected to broker 1, its record for `t`-0 on the wire; the bootstrap
/// connection's last answer (Metadata) came at `rig.now`.
fn producing(idle_ms: &str) -> Rig {
    let mut rig = Rig::new(&[("connections.max.idle.ms", idle_ms)]);
    rig.start(12);
    rig.negotiate(1, 12);
    rig
}

fn acknowledge(rig: &mut Rig) {
    let produce = rig.take(1, ApiKey::Produce);
    let response = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("t")))
        .with_partition_responses(vec![PartitionProduceResponse::default()
            .with_index(0)
            .with_error_code(code::NONE)
            .with_base_offset(0)])]);
    rig.answer(&produce, &response);
}

#[test]
fn a_connection_idle_for_connections_max_idle_ms_is_closed_and_one_with_a_request_in_flight_is_not()
{
    let mut rig = producing("5000");
    let bootstrap_quiet_since = rig.now;
    rig.advance(4 * SECOND);
    assert!(rig.disconnects.is_empty());
    let wakeup = rig.engine.next_wakeup(rig.now).expect("a deadline");
    assert!(
        wakeup <= bootstrap_quiet_since + 5 * SECOND,
        "the driver is woken for the idle limit, not later ({wakeup})"
    );
    rig.now = bootstrap_quiet_since + 5 * SECOND;
    rig.poll();
    assert_eq!(rig.disconnects, [-1], "the bootstrap connection idled out");
    let stats = rig.engine.stats();
    assert_eq!((stats.idle_disconnects, stats.disconnects), (1, 0));
    // Broker 1 still has the record in flight: it is not idle, however long it waits.
    rig.advance(10 * SECOND);
    assert_eq!(rig.disconnects, [-1]);
}

#[test]
fn a_connection_closed_for_idling_reconnects_at_once_when_a_record_needs_it() {
    let mut rig = producing("5000");
    acknowledge(&mut rig);
    let answered = rig.now;
    rig.now = answered + 5 * SECOND - MS;
    rig.poll();
    assert!(!rig.disconnects.contains(&1), "an answer is activity");
    rig.now = answered + 5 * SECOND;
    rig.poll();
    assert!(rig.disconnects.contains(&1));
    let connects = rig.connects.len();
    rig.engine.append(
        rig.now,
        &TopicPartition::new("t", 0),
        0,
        None,
        Some(b"w"),
        &[],
        Quiet,
    );
    rig.poll();
    assert_eq!(
        rig.connects.len(),
        connects + 1,
        "no backoff: nothing failed"
    );
    assert_eq!(rig.last_connect().0, 1);
    assert!(
        !rig.engine.metadata_refresh.needed(),
        "the broker did not go away"
    );
}

#[test]
fn a_negative_connections_max_idle_ms_keeps_idle_connections() {
    let mut rig = producing("-1");
    acknowledge(&mut rig);
    rig.advance(3_600 * SECOND);
    assert!(rig.disconnects.is_empty());
}
