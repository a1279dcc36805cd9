//! Producer configuration: Java 4.x defaults and validation rules (`ProducerConfig`,
//! `KafkaProducer.configureDeliveryTimeout`, `CommonClientConfigs`), and kacrab's own keys.
//! `cross_key_rules` holds the rules between keys (idempotence, delivery timeout);
//! `properties_and_setters` the `.properties` text and the typed setters.

#[path = "config_validation/cross_key_rules.rs"]
mod cross_key_rules;
#[path = "config_validation/properties_and_setters.rs"]
mod properties_and_setters;

use std::time::Duration;

use kacrab::config::{
    keys, Acks, Codec, Compression, ConfigError, ProducerConfig, ProducerConfigBuilder,
};

fn base() -> ProducerConfigBuilder {
    ProducerConfigBuilder::new().set("bootstrap.servers", "localhost:9092")
}

fn build(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ConfigError> {
    pairs.iter().fold(base(), |b, (k, v)| b.set(k, *v)).build()
}

fn ok(pairs: &[(&str, &str)]) -> ProducerConfig {
    build(pairs).unwrap_or_else(|e| panic!("{pairs:?} was rejected: {e}"))
}

fn err(pairs: &[(&str, &str)]) -> ConfigError {
    match build(pairs) {
        Ok(config) => panic!("{pairs:?} was accepted: {config:?}"),
        Err(e) => e,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Asserts a Conflict whose keys include `key` and whose message names it.
fn assert_conflict_names(e: &ConfigError, key: &str) {
    match e {
        ConfigError::Conflict { keys, rule } => {
            assert!(keys.iter().any(|k| k == key), "{keys:?} lacks {key}");
            assert!(rule.contains(key), "rule `{rule}` does not name {key}");
        }
        other => panic!("expected a conflict naming {key}, got {other:?}"),
    }
    assert!(e.to_string().contains(key), "`{e}` does not name {key}");
}

fn assert_invalid(e: &ConfigError, key: &str, rule_part: &str) {
    match e {
        ConfigError::InvalidValue { key: k, rule, .. } => {
            assert_eq!(k, key, "wrong key in {e:?}");
            assert!(
                rule.contains(rule_part),
                "rule `{rule}` lacks `{rule_part}`"
            );
        }
        other => panic!("expected an invalid value for {key}, got {other:?}"),
    }
    let shown = e.to_string();
    assert!(
        shown.contains(key) && shown.contains(rule_part),
        "`{shown}`"
    );
}

#[test]
fn defaults_equal_java() {
    let c = ok(&[]);
    assert_eq!(c.bootstrap_servers, vec!["localhost:9092".to_string()]);
    assert_eq!(c.client_id, "kacrab");
    assert_eq!(c.acks, Acks::All);
    assert_eq!(c.acks.as_i16(), -1);
    assert!(c.enable_idempotence);
    assert_eq!(c.linger, ms(5));
    assert_eq!(c.batch_size, 16_384);
    assert_eq!(c.max_in_flight_requests_per_connection, 5);
    assert_eq!(c.delivery_timeout, ms(120_000));
    assert_eq!(c.request_timeout, ms(30_000));
    assert_eq!(c.retries, i32::MAX);
    assert_eq!(c.retry_backoff, ms(100));
    assert_eq!(c.retry_backoff_max, ms(1000));
    assert_eq!(c.reconnect_backoff, ms(50));
    assert_eq!(c.reconnect_backoff_max, ms(1000));
    assert_eq!(c.socket_connection_setup_timeout, ms(10_000));
    assert_eq!(c.buffer_memory, 33_554_432);
    assert_eq!(c.max_block, ms(60_000));
    assert_eq!(c.max_request_size, 1_048_576);
    assert_eq!(c.metadata_max_age, ms(300_000));
    assert_eq!(c.transactional_id, None);
    assert_eq!(c.transaction_timeout, ms(60_000));
    assert!(!c.partitioner_ignore_keys);
    assert_eq!(c.compression_type, Compression::None);
    assert_eq!(c.compression_gzip_level, -1);
    assert_eq!(c.compression_lz4_level, 9);
    assert_eq!(c.compression_zstd_level, 3);
    assert_eq!(c.compression_codec(), Codec::None);
    assert_eq!(c.shards, None);
    assert_eq!(c.cores, None);
    assert_eq!(c.io_memory, 65_536);
    assert_eq!(c.spin_before_park, None);
    assert_eq!(c.max_response_size, 104_857_600);
}

#[test]
fn every_value_is_parsed_into_its_field() {
    let c = ok(&[
        ("bootstrap.servers", " b1:9092 , b2:9093 "),
        ("client.id", " perf "),
        ("acks", "all"),
        ("enable.idempotence", "TRUE"),
        ("linger.ms", "10"),
        ("batch.size", "65536"),
        ("max.in.flight.requests.per.connection", "3"),
        ("delivery.timeout.ms", "200000"),
        ("request.timeout.ms", "20000"),
        ("retries", "7"),
        ("retry.backoff.ms", "20"),
        ("retry.backoff.max.ms", "500"),
        ("reconnect.backoff.ms", "10"),
        ("reconnect.backoff.max.ms", "300"),
        ("socket.connection.setup.timeout.ms", "4000"),
        ("buffer.memory", "1048576"),
        ("max.block.ms", "1000"),
        ("max.request.size", "2097152"),
        ("metadata.max.age.ms", "1000"),
        ("transactional.id", " txn-1 "),
        ("transaction.timeout.ms", "30000"),
        ("partitioner.ignore.keys", "true"),
        ("compression.type", "none"),
        ("kacrab.shards", "2"),
        ("kacrab.cores", "3, 5"),
        ("kacrab.io.memory.bytes", "8192"),
        ("kacrab.spin.before.park.us", "50"),
        ("kacrab.max.response.bytes", "1048576"),
    ]);
    assert_eq!(c.bootstrap_servers, vec!["b1:9092", "b2:9093"]);
    assert_eq!(c.client_id, "perf");
    assert!(c.enable_idempotence);
    assert_eq!(c.linger, ms(10));
    assert_eq!(c.batch_size, 65_536);
    assert_eq!(c.max_in_flight_requests_per_connection, 3);
    assert_eq!(c.delivery_timeout, ms(200_000));
    assert_eq!(c.request_timeout, ms(20_000));
    assert_eq!(c.retries, 7);
    assert_eq!(c.retry_backoff, ms(20));
    assert_eq!(c.retry_backoff_max, ms(500));
    assert_eq!(c.reconnect_backoff, ms(10));
    assert_eq!(c.reconnect_backoff_max, ms(300));
    assert_eq!(c.socket_connection_setup_timeout, ms(4000));
    assert_eq!(c.buffer_memory, 1_048_576);
    assert_eq!(c.max_block, ms(1000));
    assert_eq!(c.max_request_size, 2_097_152);
    assert_eq!(c.metadata_max_age, ms(1000));
    assert_eq!(c.transactional_id.as_deref(), Some("txn-1"));
    assert_eq!(c.transaction_timeout, ms(30_000));
    assert!(c.partitioner_ignore_keys);
    assert_eq!(c.shards, Some(2));
    assert_eq!(c.cores, Some(vec![3, 5]));
    assert_eq!(c.io_memory, 8192);
    assert_eq!(c.spin_before_park, Some(Duration::from_micros(50)));
    assert_eq!(c.max_response_size, 1_048_576);
}

#[test]
fn type_errors_name_the_key_and_the_rule() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "linger.ms",
            "abc",
            "milliseconds from 0 to 9223372036854775807",
        ),
        ("linger.ms", "-1", "from 0 to 9223372036854775807"),
        ("linger.ms", "10ms", "without a unit"),
        ("request.timeout.ms", "2147483648", "from 0 to 2147483647"),
        ("delivery.timeout.ms", "1.5", "from 0 to 2147483647"),
        ("transaction.timeout.ms", "-5", "from 0 to 2147483647"),
        ("retries", "-1", "from 0 to 2147483647"),
        ("retries", "", "from 0 to 2147483647"),
        (
            "max.in.flight.requests.per.connection",
            "0",
            "from 1 to 2147483647",
        ),
        ("batch.size", "2147483648", "bytes from 0 to 2147483647"),
        ("max.request.size", "-1", "bytes from 0 to 2147483647"),
        (
            "buffer.memory",
            "lots",
            "bytes from 0 to 9223372036854775807",
        ),
        ("retry.backoff.ms", "x", "milliseconds from 0"),
        ("retry.backoff.max.ms", "-1", "milliseconds from 0"),
        ("reconnect.backoff.ms", "x", "milliseconds from 0"),
        ("reconnect.backoff.max.ms", "x", "milliseconds from 0"),
        (
            "socket.connection.setup.timeout.ms",
            "-1",
            "milliseconds from 0",
        ),
        ("max.block.ms", "1h", "without a unit"),
        ("metadata.max.age.ms", "-1", "milliseconds from 0"),
        ("enable.idempotence", "yes", "must be true or false"),
        ("partitioner.ignore.keys", "1", "must be true or false"),
        ("acks", "2", "must be one of all, -1, 0, 1"),
        ("acks", "ALL", "must be one of all, -1, 0, 1"),
        ("transactional.id", "  ", "must not be empty"),
        ("kacrab.shards", "0", "from 1 to 2147483647"),
        (
            "kacrab.cores",
            "0,x",
            "comma-separated list of distinct CPU ids",
        ),
        ("kacrab.cores", "1,1", "distinct"),
        ("kacrab.cores", "", "comma-separated list"),
        ("kacrab.io.memory.bytes", "4095", "bytes from 4096"),
        ("kacrab.spin.before.park.us", "-1", "microseconds from 0"),
        (
            "kacrab.max.response.bytes",
            "2147483648",
            "bytes from 4096 to 2147483647",
        ),
        (
            "kacrab.transaction.version",
            "3",
            "must be one of auto, 1, 2",
        ),
    ];
    for &(key, value, rule) in cases {
        let e = err(&[(key, value)]);
        assert_invalid(&e, key, rule);
        if let ConfigError::InvalidValue { value: v, .. } = &e {
            assert_eq!(v, value, "the error quotes the value as written");
        }
    }
}

#[test]
fn acks_accepts_java_spellings() {
    for (value, acks) in [
        ("all", Acks::All),
        ("-1", Acks::All),
        (" all ", Acks::All),
        ("1", Acks::Leader),
        ("0", Acks::None),
    ] {
        let c = ok(&[("acks", value)]);
        assert_eq!(c.acks, acks, "acks={value}");
    }
    assert_eq!(Acks::Leader.as_i16(), 1);
    assert_eq!(Acks::None.as_i16(), 0);
}

#[test]
fn booleans_are_case_insensitive() {
    assert!(!ok(&[("enable.idempotence", "FALSE")]).enable_idempotence);
    assert!(ok(&[("enable.idempotence", " True ")]).enable_idempotence);
}

#[test]
fn unknown_key_names_the_key() {
    let e = err(&[("fetch.min.bytes", "1")]);
    assert_eq!(
        e,
        ConfigError::UnknownKey {
            key: "fetch.min.bytes".into()
        }
    );
    assert_eq!(e.to_string(), "unknown configuration key `fetch.min.bytes`");
}

#[test]
fn unknown_key_suggests_a_close_name() {
    let e = err(&[("lingr.ms", "1")]);
    assert_eq!(
        e.to_string(),
        "unknown configuration key `lingr.ms`; did you mean `linger.ms`?"
    );
    let e = err(&[("kacrab.shard", "1")]);
    assert!(
        e.to_string().ends_with("did you mean `kacrab.shards`?"),
        "{e}"
    );
    let e = err(&[("ssl.keystore.format", "PEM")]);
    assert!(
        e.to_string().contains("of the TLS settings kacrab reads"),
        "{e}"
    );
}

#[test]
fn batch_size_zero_means_one_record_per_batch() {
    let c = ok(&[("batch.size", "0")]);
    assert_eq!(c.batch_size, 0);
    assert_eq!(c.effective_batch_size(), 1);
    assert_eq!(ok(&[]).effective_batch_size(), 16_384);
}

#[test]
fn empty_bootstrap_servers_is_an_error_naming_it() {
    for value in ["", "  ", " , ,"] {
        let e = err(&[("bootstrap.servers", value)]);
        assert_invalid(&e, "bootstrap.servers", "at least one broker");
    }
}

#[test]
fn missing_bootstrap_servers_is_an_error_naming_it() {
    let e = ProducerConfigBuilder::new().build().unwrap_err();
    assert_invalid(&e, "bootstrap.servers", "is required");
}

#[test]
fn malformed_host_port_is_an_error() {
    let cases = [
        ("localhost", "the port is missing"),
        (":9092", "the host is missing"),
        ("host:", "is not a port number"),
        ("host:abc", "is not a port number"),
        ("host:0", "from 1 to 65535"),
        ("host:65536", "from 1 to 65535"),
        ("::1:9092", "in brackets"),
        ("[::1:9092", "IPv6"),
        ("bad host:9092", "may contain only"),
        ("SSL://h:9093", "only PLAINTEXT"),
    ];
    for (entry, rule) in cases {
        let e = err(&[("bootstrap.servers", &format!("ok:1,{entry}"))]);
        assert_invalid(&e, "bootstrap.servers", rule);
        if let ConfigError::InvalidValue { value, .. } = &e {
            assert_eq!(value, entry, "the error quotes the bad entry");
        }
    }
}

#[test]
fn well_formed_bootstrap_entries_are_kept_trimmed() {
    let c = ok(&[(
        "bootstrap.servers",
        " b1:9092,,[::1]:9093 , PLAINTEXT://b3:65535, 10.0.0.1:1 ",
    )]);
    assert_eq!(
        c.bootstrap_servers,
        vec!["b1:9092", "[::1]:9093", "b3:65535", "10.0.0.1:1"]
    );
}

#[test]
fn every_compression_type_is_accepted_with_its_level() {
    for (value, expected) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        (" snappy ", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let c = ok(&[("compression.type", value)]);
        assert_eq!(c.compression_type, expected);
        assert_eq!(c.compression_type.as_str(), value.trim());
    }
    let c = ok(&[
        ("compression.type", "gzip"),
        ("compression.gzip.level", "9"),
    ]);
    assert_eq!(c.compression_codec(), Codec::Gzip { level: 9 });
    let c = ok(&[("compression.type", "lz4"), ("compression.lz4.level", "17")]);
    assert_eq!(c.compression_codec(), Codec::Lz4 { level: 17 });
    let c = ok(&[
        ("compression.type", "zstd"),
        ("compression.zstd.level", "-131072"),
    ]);
    assert_eq!(c.compression_codec(), Codec::Zstd { level: -131_072 });
    let c = ok(&[("compression.type", "snappy")]);
    assert_eq!(c.compression_codec(), Codec::Snappy);
    // A level for another codec is accepted and has no effect, as in Java.
    let c = ok(&[
        ("compression.type", "zstd"),
        ("compression.gzip.level", "1"),
    ]);
    assert_eq!(c.compression_codec(), Codec::Zstd { level: 3 });
}

#[test]
fn an_unknown_compression_type_is_rejected() {
    for value in ["brotli", "GZIP", "", "lz4hc"] {
        let e = err(&[("compression.type", value)]);
        assert_invalid(
            &e,
            "compression.type",
            "must be one of none, gzip, snappy, lz4, zstd",
        );
    }
}

#[test]
fn compression_levels_outside_javas_ranges_are_rejected() {
    for value in ["0", "10", "-2", "x", ""] {
        let e = err(&[("compression.gzip.level", value)]);
        assert_invalid(
            &e,
            "compression.gzip.level",
            "must be a number from 1 to 9, or -1 for the default level",
        );
    }
    for value in ["0", "18", "-1"] {
        let e = err(&[("compression.lz4.level", value)]);
        assert_invalid(&e, "compression.lz4.level", "from 1 to 17");
    }
    for value in ["23", "-131073", "3.5"] {
        let e = err(&[("compression.zstd.level", value)]);
        assert_invalid(&e, "compression.zstd.level", "from -131072 to 22");
    }
    // The edges are in.
    ok(&[
        ("compression.gzip.level", "1"),
        ("compression.lz4.level", "1"),
    ]);
    ok(&[
        ("compression.zstd.level", "22"),
        ("compression.lz4.level", "17"),
    ]);
}

#[test]
fn ignored_java_keys_are_accepted() {
    let c = ok(&[
        (
            "key.serializer",
            "org.apache.kafka.common.serialization.ByteArraySerializer",
        ),
        (
            "value.serializer",
            "org.apache.kafka.common.serialization.ByteArraySerializer",
        ),
        ("send.buffer.bytes", "-1"),
        ("receive.buffer.bytes", "65536"),
        ("connections.max.idle.ms", "-1"),
        ("metadata.max.idle.ms", "5000"),
        ("partitioner.adaptive.partitioning.enable", "false"),
        ("partitioner.availability.timeout.ms", "100"),
        ("security.protocol", "plaintext"),
        ("client.dns.lookup", "use_all_dns_ips"),
        ("metrics.recording.level", "DEBUG"),
        ("partitioner.class", ""),
        ("interceptor.classes", ""),
        ("transaction.two.phase.commit.enable", "false"),
    ]);
    assert!(c.enable_idempotence);
    assert!(keys::ignored_keys().any(|k| k == "send.buffer.bytes"));
}

#[test]
fn ignored_java_keys_are_still_checked_as_java_checks_them() {
    assert_invalid(
        &err(&[("send.buffer.bytes", "-2")]),
        "send.buffer.bytes",
        "from -1 to 2147483647",
    );
    assert_invalid(
        &err(&[("metadata.max.idle.ms", "4999")]),
        "metadata.max.idle.ms",
        "milliseconds from 5000",
    );
    assert_invalid(
        &err(&[("partitioner.adaptive.partitioning.enable", "maybe")]),
        "partitioner.adaptive.partitioning.enable",
        "true or false",
    );
    assert_invalid(
        &err(&[("client.dns.lookup", "default")]),
        "client.dns.lookup",
        "must be one of",
    );
}

#[test]
fn unsupported_java_features_are_rejected() {
    let e = err(&[("security.protocol", "tls")]);
    assert_invalid(
        &e,
        "security.protocol",
        "must be one of PLAINTEXT, SASL_PLAINTEXT",
    );
    assert_invalid(
        &err(&[("partitioner.class", "com.example.P")]),
        "partitioner.class",
        "ProducerBuilder::partitioner",
    );
    assert_invalid(
        &err(&[("interceptor.classes", "com.example.I")]),
        "interceptor.classes",
        "not supported",
    );
    assert_invalid(
        &err(&[("transaction.two.phase.commit.enable", "true")]),
        "transaction.two.phase.commit.enable",
        "not supported",
    );
}

#[test]
fn partitioner_keys_default_as_java_and_are_read_and_checked() {
    let c = ok(&[]);
    assert!(
        c.partitioner_adaptive,
        "adaptive partitioning is on by default"
    );
    assert_eq!(c.partitioner_availability_timeout, ms(0));
    assert!(!c.partitioner_ignore_keys);
    let c = ok(&[
        ("partitioner.adaptive.partitioning.enable", "false"),
        ("partitioner.availability.timeout.ms", "250"),
        ("partitioner.ignore.keys", "true"),
    ]);
    assert!(!c.partitioner_adaptive);
    assert_eq!(c.partitioner_availability_timeout, ms(250));
    assert!(c.partitioner_ignore_keys);
    assert_invalid(
        &err(&[("partitioner.availability.timeout.ms", "-1")]),
        "partitioner.availability.timeout.ms",
        "from 0",
    );
    assert_invalid(
        &err(&[("partitioner.ignore.keys", "yes")]),
        "partitioner.ignore.keys",
        "true or false",
    );
    for key in [
        "partitioner.adaptive.partitioning.enable",
        "partitioner.availability.timeout.ms",
        "partitioner.ignore.keys",
    ] {
        assert!(
            !keys::ignored_keys().any(|k| k == key),
            "{key} has an effect now"
        );
    }
}

#[test]
fn reconnect_backoff_max_follows_an_explicit_reconnect_backoff() {
    let c = ok(&[("reconnect.backoff.ms", "200")]);
    assert_eq!(c.reconnect_backoff, ms(200));
    assert_eq!(c.reconnect_backoff_max, ms(200));
    let c = ok(&[
        ("reconnect.backoff.ms", "200"),
        ("reconnect.backoff.max.ms", "5000"),
    ]);
    assert_eq!(c.reconnect_backoff_max, ms(5000));
}

#[test]
fn shards_and_cores() {
    let e = err(&[("kacrab.shards", "3"), ("kacrab.cores", "0,1")]);
    assert_conflict_names(&e, "kacrab.shards");
    assert_conflict_names(&e, "kacrab.cores");
    let c = ok(&[("kacrab.cores", "4,5,6")]);
    assert_eq!(c.shards, Some(3), "cores alone fix the shard count");
    let c = ok(&[("kacrab.shards", "2"), ("kacrab.cores", "0,1")]);
    assert_eq!((c.shards, c.cores), (Some(2), Some(vec![0, 1])));
    let c = ok(&[("kacrab.shards", "4")]);
    assert_eq!((c.shards, c.cores), (Some(4), None));
}

#[test]
fn spin_before_park_zero_means_none() {
    assert_eq!(
        ok(&[("kacrab.spin.before.park.us", "0")]).spin_before_park,
        None
    );
}

#[test]
fn display_reads_well() {
    assert_eq!(
        err(&[("linger.ms", "soon")]).to_string(),
        "invalid value `soon` for `linger.ms`: must be a whole number of milliseconds from 0 \
         to 9223372036854775807"
    );
    assert_eq!(
        err(&[("max.in.flight.requests.per.connection", "6")]).to_string(),
        "conflicting configuration: `max.in.flight.requests.per.connection` is 6, but \
         idempotence is on by default and allows at most 5; set `enable.idempotence=false` to \
         allow more"
    );
    assert_eq!(
        err(&[("acks", "1"), ("enable.idempotence", "true")]).to_string(),
        "conflicting configuration: `enable.idempotence=true` requires `acks=all`, but it is 1; \
         with fewer acknowledgements idempotence cannot be guaranteed"
    );
    assert_eq!(
        err(&[("delivery.timeout.ms", "1000")]).to_string(),
        "conflicting configuration: `delivery.timeout.ms` is 1000 but must be at least \
         `linger.ms` + `request.timeout.ms` = 5 + 30000 = 30005"
    );
    assert_eq!(
        err(&[("transactional.id", "t"), ("enable.idempotence", "false")]).to_string(),
        "conflicting configuration: `transactional.id` requires idempotence, but \
         `enable.idempotence` is false"
    );
    assert_eq!(
        err(&[("compression.type", "brotli")]).to_string(),
        "invalid value `brotli` for `compression.type`: must be one of none, gzip, snappy, lz4, \
         zstd"
    );
    assert_eq!(
        err(&[("bootstrap.servers", "localhost")]).to_string(),
        "invalid value `localhost` for `bootstrap.servers`: the port is missing; expected \
         host:port, e.g. localhost:9092"
    );
}

fn backoff_config(pairs: &[(&str, &str)]) -> ProducerConfig {
    ok(pairs)
}

#[test]
fn retry_backoff_grows_twofold_per_attempt_within_jitter() {
    let c = backoff_config(&[]);
    // attempts 1..=3 with defaults: 100, 200, 400 ms before jitter.
    for (attempts, base) in [(1u32, 100.0f64), (2, 200.0), (3, 400.0)] {
        let low = c.retry_backoff_for(attempts, 0.0);
        let mid = c.retry_backoff_for(attempts, 0.5);
        let high = c.retry_backoff_for(attempts, 0.999_999);
        assert_eq!(low, ms((base * 0.8) as u64), "attempt {attempts}");
        assert_eq!(mid, ms(base as u64), "attempt {attempts}");
        assert!(high < ms((base * 1.2) as u64) && high >= ms((base * 1.2) as u64 - 1));
    }
}

#[test]
fn retry_backoff_never_exceeds_the_max() {
    let c = backoff_config(&[]);
    for attempts in [5u32, 10, 64, u32::MAX] {
        for unit in [0.0, 0.3, 0.5, 0.7, 0.999_999] {
            let b = c.retry_backoff_for(attempts, unit);
            assert!(b <= ms(1000), "attempt {attempts}, unit {unit}: {b:?}");
            assert!(b >= ms(800), "attempt {attempts}, unit {unit}: {b:?}");
        }
    }
    // At the cap, jitter above 1.0 is cut off at the max.
    assert_eq!(c.retry_backoff_for(20, 0.999_999), ms(1000));
    assert_eq!(c.retry_backoff_for(20, 0.0), ms(800));
}

#[test]
fn retry_backoff_is_a_fixed_max_when_backoff_is_not_below_max() {
    let c = backoff_config(&[
        ("retry.backoff.ms", "2000"),
        ("retry.backoff.max.ms", "500"),
    ]);
    for attempts in [1u32, 2, 10] {
        for unit in [0.0, 0.5, 0.999] {
            assert_eq!(c.retry_backoff_for(attempts, unit), ms(500));
        }
    }
    let c = backoff_config(&[("retry.backoff.ms", "300"), ("retry.backoff.max.ms", "300")]);
    assert_eq!(c.retry_backoff_for(1, 0.0), ms(300));
    assert_eq!(c.retry_backoff_for(4, 0.999), ms(300));
}

#[test]
fn retry_backoff_edge_inputs() {
    let c = backoff_config(&[]);
    assert_eq!(
        c.retry_backoff_for(0, 0.5),
        Duration::ZERO,
        "a batch never sent"
    );
    // Out-of-range draws are clamped rather than trusted.
    assert_eq!(c.retry_backoff_for(1, -3.0), ms(80));
    assert_eq!(c.retry_backoff_for(1, f64::NAN), ms(100));
    let zero = backoff_config(&[("retry.backoff.ms", "0")]);
    assert_eq!(zero.retry_backoff_for(3, 0.5), Duration::ZERO);
}
