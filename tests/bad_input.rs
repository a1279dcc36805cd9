//! Bad input gets a clear, typed error and loses nothing.
#![cfg(feature = "testkit")]

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ConfigError, Error, ProduceError, Producer, ProducerRecord};

fn config_error(builder: kacrab::ProducerBuilder) -> ConfigError {
    match builder.build() {
        Err(Error::Config(e)) => e,
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("expected a configuration error, got a producer"),
    }
}

#[test]
fn unknown_config_key_names_the_key() {
    let err = config_error(
        Producer::builder()
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("lingr.ms", "5"),
    );
    assert!(
        matches!(&err, ConfigError::UnknownKey { key } if key == "lingr.ms"),
        "{err}"
    );
    assert!(err.to_string().contains("lingr.ms"));
}

#[test]
fn ill_typed_config_value_names_the_key_and_the_rule() {
    let err = config_error(
        Producer::builder()
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("linger.ms", "soon"),
    );
    match &err {
        ConfigError::InvalidValue { key, value, .. } => {
            assert_eq!(key, "linger.ms");
            assert_eq!(value, "soon");
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn max_in_flight_above_five_with_idempotence_is_refused_as_java_refuses_it() {
    let err = config_error(
        Producer::builder()
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("max.in.flight.requests.per.connection", "6"),
    );
    assert!(
        err.to_string()
            .contains("max.in.flight.requests.per.connection"),
        "{err}"
    );
}

#[test]
fn empty_bootstrap_servers_is_a_clear_error() {
    let err = config_error(Producer::builder().set("bootstrap.servers", ""));
    assert!(err.to_string().contains("bootstrap.servers"), "{err}");
}

#[test]
fn unreachable_bootstrap_server_fails_the_send_within_max_block_ms() {
    // Port 1 on loopback: nothing listens there, every connect is refused at once.
    let producer = Producer::builder()
        .set("bootstrap.servers", "127.0.0.1:1")
        .set("max.block.ms", "1500")
        .set("kacrab.shards", "1")
        .build()
        .expect("producer");
    let err = producer
        .send(ProducerRecord::new("nowhere", Bytes::from_static(b"x")))
        .wait()
        .expect_err("no broker can be reached");
    assert!(
        matches!(err, ProduceError::MetadataTimeout { ref topic, .. } if &**topic == "nowhere"),
        "{err}"
    );
    producer.close(Duration::from_secs(1));
}

#[test]
fn a_record_larger_than_max_request_size_fails_alone_while_its_neighbours_land() {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic("sizes", &[1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("max.request.size", "100000")
        .set("kacrab.shards", "1")
        .build()
        .expect("producer");
    let before = producer.send(ProducerRecord::new("sizes", Bytes::from_static(b"before")));
    let too_large = producer.send(ProducerRecord::new(
        "sizes",
        Bytes::from(vec![7u8; 200_000]),
    ));
    let after = producer.send(ProducerRecord::new("sizes", Bytes::from_static(b"after")));
    match too_large.wait() {
        Err(ProduceError::RecordTooLarge { key, limit, .. }) => {
            assert_eq!(key, "max.request.size");
            assert_eq!(limit, 100_000);
        }
        other => panic!("expected RecordTooLarge, got {other:?}"),
    }
    let first = before.wait().expect("the record before lands");
    let second = after.wait().expect("the record after lands");
    assert_eq!((first.offset, second.offset), (0, 1));
    let stored: i64 = cluster.with_cluster(|c| {
        c.partition_log("sizes", 0)
            .iter()
            .map(|b| b.last_offset - b.base_offset + 1)
            .sum()
    });
    assert_eq!(stored, 2, "only the two small records are in the log");
    producer.close(Duration::from_secs(5));
}

#[test]
fn an_explicit_partition_outside_the_topic_fails_with_a_typed_error() {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("two", &[1, 1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("kacrab.shards", "1")
        .build()
        .expect("producer");
    let err = producer
        .send(ProducerRecord::new("two", Bytes::from_static(b"x")).with_partition(2))
        .wait()
        .expect_err("partition 2 does not exist");
    assert!(
        matches!(
            err,
            ProduceError::InvalidPartition {
                partition: 2,
                partition_count: 2,
                ..
            }
        ),
        "{err}"
    );
    producer.close(Duration::from_secs(5));
}
