//! A configuration from `.properties` text (Java's syntax) and from the builder's typed setters:
//! later values override earlier ones, the first error is reported, and a typed setter equals its
//! string key, counts as explicit and is range-checked.

use std::time::Duration;

use kacrab::config::{Acks, ConfigError, ProducerConfigBuilder};

use super::{assert_conflict_names, assert_invalid, base, ms};

#[test]
fn properties_text_is_parsed() {
    let text = "\
# producer.properties for the perf tool
! another comment

bootstrap.servers = b1:9092,\\
                    b2:9092
acks:1
linger.ms     20
   enable.idempotence=false
client.id=perf\\u002D1
";
    let c = ProducerConfigBuilder::new()
        .set_properties(text)
        .build()
        .unwrap();
    assert_eq!(c.bootstrap_servers, vec!["b1:9092", "b2:9092"]);
    assert_eq!(c.acks, Acks::Leader);
    assert_eq!(c.linger, ms(20));
    assert!(!c.enable_idempotence);
    assert_eq!(c.client_id, "perf-1");
}

#[test]
fn properties_text_reports_unknown_keys_and_bad_values() {
    let e = base()
        .set_properties("linger.ms=5\nlinger.mss=5\n")
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::UnknownKey { key } if key == "linger.mss"),
        "{e:?}"
    );
    let e = base()
        .set_properties("retries = many\n")
        .build()
        .unwrap_err();
    assert_invalid(&e, "retries", "from 0 to 2147483647");
}

#[test]
fn later_properties_override_earlier_ones_and_typed_setters() {
    let c = base()
        .linger(ms(1))
        .set_properties("linger.ms=7\nlinger.ms=8\n")
        .build()
        .unwrap();
    assert_eq!(c.linger, ms(8));
}

#[test]
fn the_first_error_is_reported() {
    let e = base()
        .set("linger.ms", "x")
        .set("retries", "y")
        .set("nope", "1")
        .build()
        .unwrap_err();
    assert_invalid(&e, "linger.ms", "milliseconds");
}

#[test]
fn typed_setters_equal_string_setters() {
    let typed = ProducerConfigBuilder::new()
        .bootstrap_servers("b:1")
        .client_id("c")
        .acks(Acks::All)
        .enable_idempotence(true)
        .linger(ms(7))
        .batch_size(1000)
        .max_in_flight_requests_per_connection(2)
        .delivery_timeout(ms(100_000))
        .request_timeout(ms(10_000))
        .retries(3)
        .retry_backoff(ms(10))
        .retry_backoff_max(ms(20))
        .buffer_memory(1 << 20)
        .max_block(ms(5))
        .max_request_size(1 << 16)
        .transactional_id("t")
        .transaction_timeout(ms(9000))
        .partitioner_ignore_keys(true)
        .shards(2)
        .cores(&[0, 2])
        .io_memory(1 << 13)
        .spin_before_park(Duration::from_micros(30))
        .max_response_size(1 << 22)
        .build()
        .unwrap();
    let strings = ProducerConfigBuilder::new()
        .set_properties(
            "bootstrap.servers=b:1\nclient.id=c\nacks=all\nenable.idempotence=true\nlinger.ms=7\n\
             batch.size=1000\nmax.in.flight.requests.per.connection=2\n\
             delivery.timeout.ms=100000\nrequest.timeout.ms=10000\nretries=3\n\
             retry.backoff.ms=10\nretry.backoff.max.ms=20\nbuffer.memory=1048576\nmax.block.ms=5\n\
             max.request.size=65536\ntransactional.id=t\ntransaction.timeout.ms=9000\n\
             partitioner.ignore.keys=true\nkacrab.shards=2\nkacrab.cores=0,2\n\
             kacrab.io.memory.bytes=8192\nkacrab.spin.before.park.us=30\n\
             kacrab.max.response.bytes=4194304\n",
        )
        .build()
        .unwrap();
    assert_eq!(format!("{typed:?}"), format!("{strings:?}"));
}

#[test]
fn typed_setters_count_as_explicit() {
    // enable_idempotence(true) is explicit, so acks=1 becomes an error instead of quietly
    // turning idempotence off.
    let e = base()
        .enable_idempotence(true)
        .acks(Acks::Leader)
        .build()
        .unwrap_err();
    assert_conflict_names(&e, "acks");
    // delivery_timeout() is explicit, so a low value is an error instead of being raised.
    let e = base().delivery_timeout(ms(1000)).build().unwrap_err();
    assert_conflict_names(&e, "delivery.timeout.ms");
}

#[test]
fn typed_setters_check_ranges() {
    let e = base().batch_size(usize::MAX).build().unwrap_err();
    assert_invalid(&e, "batch.size", "from 0 to 2147483647");
    let e = base().request_timeout(ms(1 << 40)).build().unwrap_err();
    assert_invalid(&e, "request.timeout.ms", "from 0 to 2147483647");
}
