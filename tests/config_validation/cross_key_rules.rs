//! Java's rules between keys (`ProducerConfig.postProcessAndValidateIdempotenceConfigs`,
//! `KafkaProducer.configureDeliveryTimeout`): what idempotence allows of in-flight requests,
//! `acks`, `retries` and `transactional.id`; the least delivery timeout: linger + request timeout.

use kacrab::config::Acks;

use super::{assert_conflict_names, err, ms, ok};

#[test]
fn max_in_flight_6_with_defaults_is_an_error_naming_the_key() {
    let e = err(&[("max.in.flight.requests.per.connection", "6")]);
    assert_conflict_names(&e, "max.in.flight.requests.per.connection");
    assert!(e.to_string().contains("enable.idempotence=false"), "{e}");
}

#[test]
fn max_in_flight_5_with_idempotence_is_allowed() {
    let c = ok(&[("max.in.flight.requests.per.connection", "5")]);
    assert!(c.enable_idempotence);
}

#[test]
fn max_in_flight_6_fails_even_when_acks_turns_idempotence_off() {
    // Java 4.x checks max.in.flight while idempotence is still requested by default, so acks=1
    // does not rescue it; only an explicit enable.idempotence=false does.
    let e = err(&[
        ("acks", "1"),
        ("max.in.flight.requests.per.connection", "10"),
    ]);
    assert_conflict_names(&e, "max.in.flight.requests.per.connection");
    let e = err(&[
        ("retries", "0"),
        ("max.in.flight.requests.per.connection", "6"),
    ]);
    assert_conflict_names(&e, "max.in.flight.requests.per.connection");
}

#[test]
fn max_in_flight_6_with_idempotence_explicitly_off_is_allowed() {
    let c = ok(&[
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "6"),
    ]);
    assert!(!c.enable_idempotence);
    assert_eq!(c.max_in_flight_requests_per_connection, 6);
}

#[test]
fn max_in_flight_6_with_idempotence_explicitly_on_is_an_error() {
    let e = err(&[
        ("enable.idempotence", "true"),
        ("max.in.flight.requests.per.connection", "6"),
    ]);
    assert_conflict_names(&e, "max.in.flight.requests.per.connection");
}

#[test]
fn acks_1_with_idempotence_unset_turns_idempotence_off() {
    let c = ok(&[("acks", "1")]);
    assert!(!c.enable_idempotence);
    assert_eq!(c.acks, Acks::Leader);
    assert!(!ok(&[("acks", "0")]).enable_idempotence);
}

#[test]
fn acks_1_with_idempotence_set_true_is_an_error() {
    let e = err(&[("acks", "1"), ("enable.idempotence", "true")]);
    assert_conflict_names(&e, "acks");
    assert_conflict_names(&e, "enable.idempotence");
}

#[test]
fn acks_1_with_idempotence_set_false_is_allowed() {
    let c = ok(&[("acks", "1"), ("enable.idempotence", "false")]);
    assert!(!c.enable_idempotence);
}

#[test]
fn retries_0_turns_idempotence_off_unless_it_was_set() {
    assert!(!ok(&[("retries", "0")]).enable_idempotence);
    let e = err(&[("retries", "0"), ("enable.idempotence", "true")]);
    assert_conflict_names(&e, "retries");
}

#[test]
fn transactional_id_with_idempotence_disabled_is_an_error() {
    let e = err(&[("transactional.id", "t1"), ("enable.idempotence", "false")]);
    assert_conflict_names(&e, "transactional.id");
    assert_conflict_names(&e, "enable.idempotence");
}

#[test]
fn transactional_id_with_idempotence_quietly_off_is_an_error() {
    let e = err(&[("transactional.id", "t1"), ("acks", "0")]);
    assert_conflict_names(&e, "transactional.id");
    assert_conflict_names(&e, "acks");
    assert!(e.to_string().contains("acks=0"), "{e}");
}

#[test]
fn transactional_id_with_default_idempotence_is_allowed() {
    let c = ok(&[("transactional.id", "t1")]);
    assert!(c.enable_idempotence);
    assert_eq!(c.transactional_id.as_deref(), Some("t1"));
}

#[test]
fn explicit_delivery_timeout_below_linger_plus_request_timeout_is_an_error() {
    let e = err(&[("delivery.timeout.ms", "30004")]);
    assert_conflict_names(&e, "delivery.timeout.ms");
    assert!(e.to_string().contains("5 + 30000 = 30005"), "{e}");
    let e = err(&[
        ("delivery.timeout.ms", "1000"),
        ("linger.ms", "0"),
        ("request.timeout.ms", "1001"),
    ]);
    assert_conflict_names(&e, "delivery.timeout.ms");
}

#[test]
fn explicit_delivery_timeout_equal_to_linger_plus_request_timeout_is_allowed() {
    let c = ok(&[("delivery.timeout.ms", "30005")]);
    assert_eq!(c.delivery_timeout, ms(30_005));
}

#[test]
fn default_delivery_timeout_is_raised_when_request_timeout_is_large() {
    let c = ok(&[("request.timeout.ms", "200000")]);
    assert_eq!(c.delivery_timeout, ms(200_005));
    let c = ok(&[("request.timeout.ms", "100000"), ("linger.ms", "30000")]);
    assert_eq!(c.delivery_timeout, ms(130_000));
}

#[test]
fn linger_is_capped_to_int_max() {
    let c = ok(&[("linger.ms", "9223372036854775807")]);
    assert_eq!(c.linger, ms(i32::MAX as u64));
    // The sum is capped as in Java, so the default delivery timeout is raised to i32::MAX.
    assert_eq!(c.delivery_timeout, ms(i32::MAX as u64));
}
