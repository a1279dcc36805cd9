//! `metadata.max.idle.ms` (Java's `ProducerMetadata` topic expiry), against the scripted
//! driver.

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;

use super::super::scripted_rig::{Rig, SECOND};
use super::MetadataRefresh;

fn fetched(rig: &Rig) -> Vec<&str> {
    rig.engine
        .metadata()
        .interest
        .iter()
        .map(|t| &**t)
        .collect()
}

/// A producer whose record for `t`-0 is on the wire to broker 1 (never answered), and which
/// asked for `u` at `asked_at`, answered.
fn asked_for_u(idle_ms: &str) -> Rig {
    let mut rig = Rig::new(&[("metadata.max.idle.ms", idle_ms)]);
    rig.start(12);
    rig.negotiate(1, 12);
    rig.take(1, ApiKey::Produce);
    rig.now += SECOND;
    rig.engine.request_topic("u");
    rig.poll();
    let node = rig.refresh().node;
    rig.metadata(node, 1, "old1", code::NONE);
    assert_eq!(fetched(&rig), ["t", "u"]);
    rig
}

/// Asks for `topic`, which makes the next refresh go out, and returns the topics it names.
fn refresh_for(rig: &mut Rig, topic: &str) -> Vec<String> {
    rig.engine.request_topic(topic);
    rig.poll();
    assert!(
        rig.written.iter().any(|w| w.api == ApiKey::Metadata.code()),
        "a refresh goes out"
    );
    fetched(rig).into_iter().map(String::from).collect()
}

#[test]
fn a_topic_not_asked_for_within_metadata_max_idle_ms_is_no_longer_fetched() {
    let mut rig = asked_for_u("5000");
    rig.now += 6 * SECOND;
    assert_eq!(refresh_for(&mut rig, "v"), ["t", "v"]);
    assert!(!rig.engine.metadata().topics.contains_key("u"));
}

#[test]
fn a_topic_asked_for_within_metadata_max_idle_ms_is_still_fetched() {
    let mut rig = asked_for_u("5000");
    rig.now += 4 * SECOND;
    assert_eq!(refresh_for(&mut rig, "v"), ["t", "u", "v"]);
}

#[test]
fn an_idle_topic_whose_partition_holds_batches_is_still_fetched() {
    // `t` was last appended to at the start, far longer ago than the idle time, but its batch
    // is still on the wire.
    let mut rig = asked_for_u("5000");
    rig.now += 60 * SECOND;
    assert_eq!(refresh_for(&mut rig, "v"), ["t", "v"]);
}

#[test]
fn an_expired_topic_asked_for_again_is_fetched_again() {
    let mut rig = asked_for_u("5000");
    rig.now += 6 * SECOND;
    refresh_for(&mut rig, "v");
    rig.written.clear();
    let before = rig.engine.metadata().interest.len();
    rig.engine.request_topic("u");
    assert_eq!(rig.engine.metadata().interest.len(), before + 1);
    assert!(fetched(&rig).contains(&"u"));
}

#[test]
fn a_refresh_goes_out_once_then_waits_for_its_answer_and_the_backoff() {
    let mut refresh = MetadataRefresh::new();
    assert!(refresh.may_send(0), "a new engine refreshes at once");
    refresh.sent(1);
    refresh.request_update();
    assert!(!refresh.may_send(5), "one request in flight at a time");
    refresh.assert_invariants(&[1], false);
    refresh.answered(100);
    refresh.assert_invariants(&[], false);
    assert!(!refresh.may_send(99), "wanted again, after the backoff");
    assert!(refresh.may_send(100));
    assert_eq!(refresh.next_wakeup(50, 1_000, None), Some(100));
}

#[test]
fn an_urged_refresh_skips_the_backoff_but_never_doubles_a_request() {
    let mut refresh = MetadataRefresh::new();
    refresh.sent(1);
    refresh.request_update_now();
    assert!(!refresh.may_send(5));
    refresh.answered(100);
    assert!(!refresh.may_send(50), "the answer restarts the backoff");
    refresh.request_update_now();
    assert!(refresh.may_send(50));
}

#[test]
fn a_lost_request_is_owed_again_at_once() {
    let mut refresh = MetadataRefresh::new();
    refresh.sent(1);
    refresh.lost();
    assert!(refresh.may_send(0));
    refresh.assert_invariants(&[], false);
}

#[test]
fn the_age_limit_and_the_rebootstrap_trigger_count_from_the_answer_and_the_attempt() {
    let mut refresh = MetadataRefresh::new();
    refresh.attempt_started(10);
    refresh.attempt_started(20);
    assert_eq!(refresh.rebootstrap_trigger_at(Some(30)), Some(41));
    assert_eq!(refresh.rebootstrap_trigger_at(None), None);
    assert!(!refresh.attempt_timed_out(40, 30));
    assert!(refresh.attempt_timed_out(41, 30));
    refresh.sent(1);
    refresh.answered(60);
    refresh.applied(50, true);
    assert_eq!(refresh.rebootstrap_trigger_at(Some(30)), None);
    refresh.note_age(549, 500);
    assert!(!refresh.may_send(549));
    assert_eq!(refresh.next_wakeup(100, 500, Some(30)), Some(550));
    refresh.note_age(550, 500);
    assert!(refresh.may_send(550));
}

#[test]
#[should_panic(expected = "that is not in flight")]
fn invariants_refuse_a_refresh_waiting_for_a_request_not_in_flight() {
    let mut refresh = MetadataRefresh::new();
    refresh.sent(1);
    refresh.assert_invariants(&[], false);
}

#[test]
#[should_panic(expected = "is in flight, but the refresh is")]
fn invariants_refuse_a_metadata_request_the_refresh_did_not_send() {
    MetadataRefresh::new().assert_invariants(&[2], false);
}
