//! The metadata keys: `metadata.max.idle.ms`, `metadata.recovery.strategy` and
//! `metadata.recovery.rebootstrap.trigger.ms` (KIP-899, KIP-1102), with Java 4.x's defaults
//! and checks (`CommonClientConfigs`, `ProducerConfig`).

mod common;

use std::time::Duration;

use kacrab::config::MetadataRecoveryStrategy;

use common::config::{build, invalid};

#[test]
fn the_defaults_are_java_4s_rebootstrap_after_five_minutes() {
    let config = build(&[]).unwrap();
    assert_eq!(
        config.metadata_recovery_strategy,
        MetadataRecoveryStrategy::Rebootstrap
    );
    assert_eq!(
        config.metadata_recovery_rebootstrap_trigger,
        Duration::from_millis(300_000)
    );
}

#[test]
fn the_strategy_is_read_case_insensitively_as_javas_validator_does() {
    for (raw, strategy) in [
        ("none", MetadataRecoveryStrategy::None),
        ("NONE", MetadataRecoveryStrategy::None),
        (" rebootstrap ", MetadataRecoveryStrategy::Rebootstrap),
        ("Rebootstrap", MetadataRecoveryStrategy::Rebootstrap),
    ] {
        let config = build(&[("metadata.recovery.strategy", raw)]).unwrap();
        assert_eq!(config.metadata_recovery_strategy, strategy, "{raw:?}");
        assert_eq!(
            strategy.as_str(),
            raw.trim().to_ascii_lowercase(),
            "the property spelling"
        );
    }
}

#[test]
fn an_unknown_strategy_names_the_key_and_the_allowed_values() {
    let (key, rule) = invalid(&[("metadata.recovery.strategy", "reconnect")]);
    assert_eq!(key, "metadata.recovery.strategy");
    assert!(rule.contains("none, rebootstrap"), "{rule}");
}

#[test]
fn the_trigger_is_a_non_negative_long_of_milliseconds() {
    let config = build(&[("metadata.recovery.rebootstrap.trigger.ms", "0")]).unwrap();
    assert_eq!(config.metadata_recovery_rebootstrap_trigger, Duration::ZERO);
    let config = build(&[(
        "metadata.recovery.rebootstrap.trigger.ms",
        "9223372036854775807",
    )])
    .unwrap();
    assert_eq!(
        config.metadata_recovery_rebootstrap_trigger,
        Duration::from_millis(i64::MAX as u64)
    );
    for raw in ["-1", "5s", "soon"] {
        let (key, rule) = invalid(&[("metadata.recovery.rebootstrap.trigger.ms", raw)]);
        assert_eq!(key, "metadata.recovery.rebootstrap.trigger.ms");
        assert!(rule.contains("milliseconds from 0"), "{raw}: {rule}");
    }
}

#[test]
fn metadata_max_idle_defaults_to_five_minutes_and_is_at_least_five_seconds() {
    let config = build(&[]).unwrap();
    assert_eq!(config.metadata_max_idle, Duration::from_millis(300_000));
    let config = build(&[("metadata.max.idle.ms", "5000")]).unwrap();
    assert_eq!(config.metadata_max_idle, Duration::from_millis(5000));
    let (key, rule) = invalid(&[("metadata.max.idle.ms", "4999")]);
    assert_eq!(key, "metadata.max.idle.ms");
    assert!(rule.contains("milliseconds from 5000"), "{rule}");
}
