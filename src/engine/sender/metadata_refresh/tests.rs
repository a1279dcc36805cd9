//! `metadata.max.idle.ms` (Java's `ProducerMetadata` topic expiry), against the scripted
//! driver.

use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;

use super::super::scripted_rig::{Rig, SECOND};

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
