//! The three rebootstrap triggers, against the scripted driver.

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;

use super::super::scripted_rig::{Rig, SECOND};

#[test]
fn when_every_known_broker_refuses_connections_the_bootstrap_address_is_connected_again() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(12);
    rig.old_cluster_gone();
    assert_eq!(rig.rebootstraps(), 1);
    // Past every reconnect backoff: the bootstrap address, not the old broker, is tried.
    rig.advance(2 * SECOND);
    assert_eq!(rig.last_connect(), (-1, "boot:9092"));
    // It now leads to a new cluster, whose broker 7 gets the record.
    rig.negotiate(-1, 12);
    rig.metadata(-1, 7, "new7", code::NONE);
    assert_eq!(rig.last_connect(), (7, "new7:9092"));
    rig.negotiate(7, 12);
    rig.take(7, ApiKey::Produce);
    assert!(
        !rig.connects.iter().skip(2).any(|(node, _)| *node == 1),
        "the old broker was tried again: {:?}",
        rig.connects
    );
}

#[test]
fn under_none_the_known_brokers_are_retried_and_the_bootstrap_address_is_not() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "none")]);
    rig.start(12);
    rig.old_cluster_gone();
    for _ in 0..5 {
        rig.advance(2 * SECOND);
        assert_eq!(rig.last_connect(), (1, "old1:9092"));
        rig.lost(1);
    }
    assert_eq!(rig.rebootstraps(), 0);
    assert_eq!(
        rig.connects.iter().filter(|(node, _)| *node == -1).count(),
        1,
        "{:?}",
        rig.connects
    );
}

#[test]
fn no_metadata_answer_for_the_trigger_interval_closes_the_connections_and_rebootstraps() {
    let mut rig = Rig::new(&[
        ("metadata.recovery.strategy", "rebootstrap"),
        ("metadata.recovery.rebootstrap.trigger.ms", "10000"),
    ]);
    rig.start(12);
    rig.negotiate(1, 12);
    rig.take(1, ApiKey::Produce);
    // Later than the metadata backoff after the last answer, so a refresh is due at once.
    rig.now += SECOND;
    // The bootstrap connection goes; the refresh it calls for goes to broker 1, which never
    // answers (request.timeout.ms is 30 s, longer than the trigger).
    rig.lost(-1);
    let asked_at = rig.now;
    rig.take(1, ApiKey::Metadata);
    let trigger_at = asked_at + 10 * SECOND + 1;
    // A driver polls when the engine asks to be woken (or on an event, and none comes here):
    // following the engine's wakeups must reach the trigger's instant exactly.
    let reached = loop {
        let wakeup = rig.engine.next_wakeup(rig.now).expect("a wakeup");
        if wakeup >= trigger_at - 1 {
            break wakeup;
        }
        rig.now = wakeup;
        rig.poll();
    };
    assert_eq!(reached, trigger_at, "the engine's wakeup, and the trigger");
    rig.now = trigger_at - 1;
    rig.poll();
    assert_eq!(
        rig.rebootstraps(),
        0,
        "the trigger fires strictly after its interval"
    );
    assert!(rig.disconnects.is_empty());
    rig.now = trigger_at;
    rig.poll();
    assert_eq!(rig.rebootstraps(), 1);
    assert_eq!(rig.disconnects, vec![1]);
    rig.advance(2 * SECOND);
    assert_eq!(rig.last_connect(), (-1, "boot:9092"));
}

#[test]
fn a_rebootstrap_required_answer_at_metadata_v13_rebootstraps_at_once() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(13);
    rig.negotiate(1, 13);
    rig.take(1, ApiKey::Produce);
    // The next refresh is answered REBOOTSTRAP_REQUIRED; the broker it names is not taken.
    rig.engine.request_topic("u");
    rig.poll();
    let refresh = rig.refresh();
    assert_eq!(refresh.version, 13);
    let node = refresh.node;
    rig.metadata(node, 9, "elsewhere", code::REBOOTSTRAP_REQUIRED);
    assert_eq!(rig.rebootstraps(), 1);
    assert!(rig.disconnects.contains(&1), "{:?}", rig.disconnects);
    assert!(!rig.connects.iter().any(|(n, _)| *n == 9));
    // The bootstrap connection is still up (it is not a broker of the list that was
    // dropped), so fresh metadata is asked of it at once.
    rig.metadata(-1, 7, "new7", code::NONE);
    assert_eq!(rig.last_connect(), (7, "new7:9092"));
}

#[test]
fn under_none_a_rebootstrap_required_answer_is_applied_as_any_answer() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "none")]);
    rig.start(13);
    rig.negotiate(1, 13);
    rig.take(1, ApiKey::Produce);
    rig.engine.request_topic("u");
    rig.poll();
    let node = rig.refresh().node;
    rig.metadata(node, 9, "elsewhere", code::REBOOTSTRAP_REQUIRED);
    assert_eq!(rig.rebootstraps(), 0);
    assert!(rig.disconnects.is_empty(), "{:?}", rig.disconnects);
    assert_eq!(
        rig.engine.metadata().nodes.get(&9).map(String::as_str),
        Some("elsewhere:9092")
    );
}

// Java's `hasNodeAvailableOrConnectionReady`: a known broker that is being connected to, or
// whose reconnect backoff is over, is still available, so a due refresh waits for it and the
// broker list is not replaced.
#[test]
fn a_known_broker_being_connected_is_waited_for_not_rebootstrapped() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(12);
    // Broker 1 is being connected to; the bootstrap connection goes and a refresh is due.
    rig.now += SECOND;
    rig.lost(-1);
    rig.advance(SECOND);
    assert_eq!(rig.rebootstraps(), 0, "broker 1 is connecting");
    rig.negotiate(1, 12);
    rig.take(1, ApiKey::Metadata);
    assert_eq!(rig.rebootstraps(), 0);
}

#[test]
fn a_known_broker_out_of_its_reconnect_backoff_is_tried_again_not_rebootstrapped() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(12);
    // Broker 1 refuses right after the bootstrap answer: no refresh is due yet (the backoff
    // after the last answer), and by the time one is, broker 1's reconnect backoff is over.
    rig.lost(1);
    assert_eq!(rig.rebootstraps(), 0);
    rig.advance(2 * SECOND);
    assert_eq!(rig.rebootstraps(), 0, "{:?}", rig.connects);
    assert_eq!(rig.last_connect(), (1, "old1:9092"));
}
