//! Producer configuration under Java property names, with the Java producer's defaults and
//! validation rules (Apache Kafka 4.x: `ProducerConfig`, `KafkaProducer`, `CommonClientConfigs`).
//!
//! Settings are given as Java property names and string values, one at a time with
//! [`ProducerConfigBuilder::set`] or as `.properties` text with
//! [`ProducerConfigBuilder::set_properties`], so a configuration written for the Java client
//! carries over. [`ProducerConfigBuilder::build`] applies Java's cross-key rules and yields the
//! effective values the producer runs with.
//!
//! Where kacrab departs from Java, on purpose:
//! - An unknown key is an error. Java logs a warning and ignores it, which leaves a mistyped
//!   key's default silently in place.
//! - `client.id` defaults to `kacrab`; Java uses `producer-N`, or `producer-<transactional.id>`.
//! - `security.protocol` may be `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`, the SASL
//!   ones with `sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 and the credentials in
//!   `sasl.jaas.config` (see [`security`]), or OAUTHBEARER with a token provider set in code
//!   (see [`oauthbearer`]); TLS stores are PEM only (see [`tls`]), and
//!   `ssl.*` keys that set a store are refused without TLS; `partitioner.class` and
//!   `interceptor.classes` must be empty and
//!   `transaction.two.phase.commit.enable` must be `false`.
//! - `transaction.timeout.ms` and `socket.connection.setup.timeout.ms`, which Java leaves
//!   unchecked, must not be negative: they become a [`Duration`].
//! - `bootstrap.servers` entries are checked for shape when set, not resolved.
//! - Java keys with no effect in kacrab are accepted and type-checked; see
//!   [`keys::ignored_keys`].
//! - `kacrab.transaction.version` (`auto`, `1`, `2`) chooses the transaction protocol, which
//!   Java always takes from the cluster; see [`TransactionVersion`].

use std::fmt;
use std::time::Duration;

mod explicit;
pub mod keys;
mod metadata;
pub mod oauthbearer;
mod parse;
pub mod security;
pub mod tls;
mod transaction_version;

use explicit::{Explicit, I32_MAX};
pub use metadata::MetadataRecoveryStrategy;
pub use oauthbearer::{OAuthBearerToken, OAuthTokenProvider};
pub use security::{Password, SaslConfig, SaslMechanism, SecurityProtocol};
pub use tls::{TlsConfig, TrustSource};
pub use transaction_version::TransactionVersion;

use crate::protocol::compression;
// What `ProducerConfig::compression_codec` gives: the codec and level batches are written with.
pub use crate::protocol::compression::Codec;

/// `acks`: how many replicas must have a batch before the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker does not answer.
    None,
    /// `acks=1`: the leader has written it.
    Leader,
    /// `acks=all` or `acks=-1`: every in-sync replica has it. The only value idempotence allows.
    All,
}

impl Acks {
    /// The value sent in a ProduceRequest.
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    fn as_property(self) -> &'static str {
        match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        }
    }
}

impl Default for Acks {
    /// `all`, Java's default since 3.0 (KIP-679).
    fn default() -> Self {
        Acks::All
    }
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_property())
    }
}

/// `compression.type`: the codec of each batch's records section (the header stays
/// uncompressed). Levels are the `compression.*.level` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// `none`
    #[default]
    None,
    /// `gzip`, at `compression.gzip.level`.
    Gzip,
    /// `snappy`, in snappy-java's framing as Java writes it.
    Snappy,
    /// `lz4` (the LZ4 frame format), at `compression.lz4.level`.
    Lz4,
    /// `zstd`, at `compression.zstd.level`.
    Zstd,
}

impl Compression {
    /// The property value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    fn from_property(value: &str) -> Option<Compression> {
        [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ]
        .into_iter()
        .find(|c| c.as_str() == value)
    }
}

/// The effective producer configuration: defaults filled in and Java's post-processing applied.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: trimmed `host:port` entries (`[v6addr]:port` for IPv6), at least one.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, default `kacrab` (Java: `producer-N`, or `producer-<transactional.id>`).
    pub client_id: String,
    /// `acks`, default `all`.
    pub acks: Acks,
    /// `enable.idempotence` after `ProducerConfig.postProcessAndValidateIdempotenceConfigs`:
    /// default on, quietly off when `acks` is not `all` or `retries` is 0 and the key was not set.
    pub enable_idempotence: bool,
    /// `linger.ms`, default 5 ms (KIP-1030; 0 before 4.0), capped to `i32::MAX` ms as
    /// `KafkaProducer.lingerMs` does.
    pub linger: Duration,
    /// `batch.size`, default 16384. May be 0; see [`ProducerConfig::effective_batch_size`].
    pub batch_size: usize,
    /// `max.in.flight.requests.per.connection`, default 5; at least 1, at most 5 with idempotence.
    pub max_in_flight_requests_per_connection: usize,
    /// `delivery.timeout.ms`, default 120000, at least `linger.ms + request.timeout.ms`
    /// (`KafkaProducer.configureDeliveryTimeout`): the default is raised to that sum.
    pub delivery_timeout: Duration,
    /// `request.timeout.ms`, default 30000.
    pub request_timeout: Duration,
    /// `retries`, default `i32::MAX`.
    pub retries: i32,
    /// `retry.backoff.ms`, default 100.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`, default 1000.
    pub retry_backoff_max: Duration,
    /// `reconnect.backoff.ms`, default 50.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`, default 1000; equal to `reconnect.backoff.ms` when only that
    /// was set (`CommonClientConfigs.postProcessReconnectBackoffConfigs`).
    pub reconnect_backoff_max: Duration,
    /// `socket.connection.setup.timeout.ms`, default 10000.
    pub socket_connection_setup_timeout: Duration,
    /// `connections.max.idle.ms`, default 540000: a connection with nothing in flight and no
    /// traffic for this long is closed, before the broker's own idle limit (600000 by default)
    /// can close it under a request. `None` (a negative value, as in Java's `Selector`):
    /// never.
    pub connections_max_idle: Option<Duration>,
    /// `buffer.memory`, default 33554432 (32 MiB).
    pub buffer_memory: usize,
    /// `max.block.ms`, default 60000.
    pub max_block: Duration,
    /// `max.request.size`, default 1048576.
    pub max_request_size: usize,
    /// `metadata.max.age.ms`, default 300000.
    pub metadata_max_age: Duration,
    /// `metadata.max.idle.ms`, default 300000, at least 5000: a topic no record was sent to
    /// for this long is dropped from the topics the producer fetches metadata for (Java's
    /// `ProducerMetadata` topic expiry); the next record sent to it brings it back.
    pub metadata_max_idle: Duration,
    /// `metadata.recovery.strategy`, default `rebootstrap`.
    pub metadata_recovery_strategy: MetadataRecoveryStrategy,
    /// `metadata.recovery.rebootstrap.trigger.ms`, default 300000: with `rebootstrap`, no
    /// metadata answer for this long makes the producer rebootstrap (KIP-1102).
    pub metadata_recovery_rebootstrap_trigger: Duration,
    /// `transactional.id`, non-empty when set; requires idempotence.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`, default 60000. The broker enforces its maximum.
    pub transaction_timeout: Duration,
    /// `partitioner.ignore.keys`, default false.
    pub partitioner_ignore_keys: bool,
    /// `compression.type`, default `none`.
    pub compression_type: Compression,
    /// `compression.gzip.level`, default -1 (zlib's default, 6); otherwise 1 to 9.
    pub compression_gzip_level: i32,
    /// `compression.lz4.level`, default 9, from 1 to 17. kacrab's LZ4 encoder is LZ4's fast
    /// compressor at every level (Java's at the default level; Java uses LZ4HC at the others).
    pub compression_lz4_level: i32,
    /// `compression.zstd.level`, default 3, from -131072 to 22.
    pub compression_zstd_level: i32,
    /// `kacrab.shards`: shard threads, at least 1. `None`: one per CPU the process can spare
    /// (the CPUs of its affinity mask, no more than its cgroup's CPU quota, less one), on the
    /// last CPUs it may use, leaving the first to the threads that call `send`
    /// ([`Producer::shard_cores`](crate::Producer::shard_cores) says which it took). Set to the
    /// length of `kacrab.cores` when only that was given.
    pub shards: Option<usize>,
    /// `kacrab.cores`: the CPU for each shard, e.g. `0,1`.
    pub cores: Option<Vec<usize>>,
    /// `kacrab.io.memory.bytes`, default 65536, at least 4096.
    pub io_memory: usize,
    /// `kacrab.spin.before.park.us`, default none; 0 means none.
    pub spin_before_park: Option<Duration>,
    /// `kacrab.max.response.bytes`, default 104857600: the largest broker frame accepted.
    pub max_response_size: usize,
    /// `kacrab.transaction.version`, default `auto`: the transaction protocol (see
    /// [`TransactionVersion`]); `1` or `2` only with `transactional.id`.
    pub transaction_version: TransactionVersion,
    /// `security.protocol`, default `PLAINTEXT`.
    pub security_protocol: SecurityProtocol,
    /// `sasl.mechanism` and the credentials of `sasl.jaas.config`, under `SASL_PLAINTEXT` and
    /// `SASL_SSL`.
    pub sasl: Option<SaslConfig>,
    /// The `ssl.*` settings, under `SSL` and `SASL_SSL`.
    pub tls: Option<TlsConfig>,
}

/// Java's `ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE`: the broker
/// keeps the last five batches per producer and partition for duplicate detection.
pub const MAX_IN_FLIGHT_FOR_IDEMPOTENCE: usize = 5;

/// Java's `CommonClientConfigs.RETRY_BACKOFF_EXP_BASE`.
const RETRY_BACKOFF_MULTIPLIER: f64 = 2.0;
/// Java's `CommonClientConfigs.RETRY_BACKOFF_JITTER`.
const RETRY_BACKOFF_JITTER: f64 = 0.2;

impl ProducerConfig {
    /// A builder with every key at its default.
    pub fn builder() -> ProducerConfigBuilder {
        ProducerConfigBuilder::new()
    }

    /// `compression.type` with its `compression.*.level`: what each batch's records are
    /// compressed with.
    pub fn compression_codec(&self) -> Codec {
        match self.compression_type {
            Compression::None => Codec::None,
            Compression::Gzip => Codec::Gzip {
                level: self.compression_gzip_level,
            },
            Compression::Snappy => Codec::Snappy,
            Compression::Lz4 => Codec::Lz4 {
                level: self.compression_lz4_level,
            },
            Compression::Zstd => Codec::Zstd {
                level: self.compression_zstd_level,
            },
        }
    }

    /// The batch size the accumulator uses: Java's `KafkaProducer` takes `max(1, batch.size)`,
    /// so `batch.size=0` means one record per batch.
    pub fn effective_batch_size(&self) -> usize {
        self.batch_size.max(1)
    }

    /// How long a batch waits before its next produce attempt, as Java's `ExponentialBackoff`
    /// computes it for `RecordAccumulator.shouldBackoff`.
    ///
    /// `attempts` is the batch's attempt count (`ProducerBatch.attempts()`): 1 after the first
    /// failed send. The wait is `retry.backoff.ms × 2^(attempts − 1)`, capped at
    /// `retry.backoff.max.ms`, times a jitter factor in [0.8, 1.2) taken from `jitter_unit`
    /// (uniform in [0, 1) from the caller's rng), and never above the max. If `retry.backoff.ms`
    /// is not below `retry.backoff.max.ms`, it is a fixed `retry.backoff.max.ms` without jitter.
    /// A batch never sent (`attempts == 0`) does not back off: zero.
    pub fn retry_backoff_for(&self, attempts: u32, jitter_unit: f64) -> Duration {
        if attempts == 0 {
            return Duration::ZERO;
        }
        let initial = duration_ms(self.retry_backoff);
        let max = duration_ms(self.retry_backoff_max);
        Duration::from_millis(exponential_backoff(initial, max, attempts - 1, jitter_unit))
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Java's `ExponentialBackoff.backoff(exponent)`, with the random draw supplied.
fn exponential_backoff(initial: u64, max: u64, exponent: u32, jitter_unit: f64) -> u64 {
    // The constructor clamps the initial interval to the max and computes the exponent at which
    // the max is reached; with no room to grow (`expMax == 0`) the backoff is constant.
    let initial = initial.min(max);
    let exp_max = if max > initial {
        (max as f64 / initial.max(1) as f64).ln() / RETRY_BACKOFF_MULTIPLIER.ln()
    } else {
        0.0
    };
    if exp_max == 0.0 {
        return initial;
    }
    let exp = f64::from(exponent).min(exp_max);
    let term = initial as f64 * RETRY_BACKOFF_MULTIPLIER.powf(exp);
    let unit = if jitter_unit.is_finite() {
        jitter_unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    // `ThreadLocalRandom.nextDouble(1 - jitter, 1 + jitter)`.
    let factor = (1.0 - RETRY_BACKOFF_JITTER) + 2.0 * RETRY_BACKOFF_JITTER * unit;
    // `(long) (randomFactor * term)` truncates; the cast saturates where Java's would too.
    ((factor * term) as u64).min(max)
}

/// Errors from [`ProducerConfigBuilder::build`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key that is neither a Java producer key kacrab knows nor a `kacrab.` key.
    #[error("unknown configuration key `{key}`{}", keys::unknown_key_hint(.key))]
    UnknownKey {
        /// The key as given.
        key: String,
    },
    /// A value that does not parse or is out of range; `rule` says what is allowed.
    #[error("invalid value `{value}` for `{key}`: {rule}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as given (`[hidden]` for a value that holds a secret).
        value: String,
        /// What the key allows.
        rule: String,
    },
    /// Values that are each valid but not together; `rule` names the keys and their values.
    #[error("conflicting configuration: {rule}")]
    Conflict {
        /// The keys that conflict.
        keys: Vec<String>,
        /// The rule they break, with their values.
        rule: String,
    },
}

impl ConfigError {
    /// The keys the error is about.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            ConfigError::UnknownKey { key } | ConfigError::InvalidValue { key, .. } => {
                vec![key.as_str()]
            }
            ConfigError::Conflict { keys, .. } => keys.iter().map(String::as_str).collect(),
        }
    }
}

/// Builds a [`ProducerConfig`] from Java property names and string values.
///
/// Setters never fail: the first error is kept and returned by [`build`](Self::build), so a
/// chain of setters stays a single expression. A key set twice keeps its last value, as in a
/// Java `Properties` map.
#[derive(Debug, Clone, Default)]
pub struct ProducerConfigBuilder {
    explicit: Explicit,
    first_error: Option<ConfigError>,
}

impl ProducerConfigBuilder {
    /// A builder with every key at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a property by its Java name and string value, e.g. `set("linger.ms", "10")`.
    /// Unknown keys and invalid values are reported by [`build`](Self::build).
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        let value = value.into();
        if let Err(error) = self.explicit.apply(key, &value) {
            self.first_error.get_or_insert(error);
        }
        self
    }

    /// Installs the OAUTHBEARER token provider (`sasl.mechanism=OAUTHBEARER`), called on a
    /// shard thread once per authentication; it must not block for long (see
    /// [`oauthbearer`]).
    pub fn oauth_token_provider(
        mut self,
        provider: impl Fn() -> Result<OAuthBearerToken, String> + Send + Sync + 'static,
    ) -> Self {
        self.explicit
            .security
            .set_token_provider(OAuthTokenProvider::new(provider));
        self
    }

    /// Sets every `key=value` line of `.properties` text (`--producer.config` files): `#` and
    /// `!` comments, blank lines, `=`, `:` or whitespace as separator, trimmed keys and values,
    /// `\` line continuations and Java's escapes.
    pub fn set_properties(mut self, text: &str) -> Self {
        for (key, value) in parse::properties(text) {
            self = self.set(&key, value);
        }
        self
    }

    /// `bootstrap.servers`: comma-separated `host:port` entries.
    pub fn bootstrap_servers(self, servers: impl Into<String>) -> Self {
        self.set(keys::BOOTSTRAP_SERVERS, servers)
    }

    /// `client.id`
    pub fn client_id(self, id: impl Into<String>) -> Self {
        self.set(keys::CLIENT_ID, id)
    }

    /// `acks`
    pub fn acks(self, acks: Acks) -> Self {
        self.set(keys::ACKS, acks.as_property())
    }

    /// `enable.idempotence`, counted as set explicitly even when `true`.
    pub fn enable_idempotence(self, enable: bool) -> Self {
        self.set(keys::ENABLE_IDEMPOTENCE, enable.to_string())
    }

    /// `linger.ms`, in whole milliseconds (truncated).
    pub fn linger(self, linger: Duration) -> Self {
        self.set(keys::LINGER_MS, millis(linger))
    }

    /// `batch.size`
    pub fn batch_size(self, bytes: usize) -> Self {
        self.set(keys::BATCH_SIZE, bytes.to_string())
    }

    /// `max.in.flight.requests.per.connection`
    pub fn max_in_flight_requests_per_connection(self, requests: usize) -> Self {
        self.set(
            keys::MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION,
            requests.to_string(),
        )
    }

    /// `delivery.timeout.ms`, in whole milliseconds (truncated).
    pub fn delivery_timeout(self, timeout: Duration) -> Self {
        self.set(keys::DELIVERY_TIMEOUT_MS, millis(timeout))
    }

    /// `request.timeout.ms`, in whole milliseconds (truncated).
    pub fn request_timeout(self, timeout: Duration) -> Self {
        self.set(keys::REQUEST_TIMEOUT_MS, millis(timeout))
    }

    /// `retries`
    pub fn retries(self, retries: i32) -> Self {
        self.set(keys::RETRIES, retries.to_string())
    }

    /// `retry.backoff.ms`, in whole milliseconds (truncated).
    pub fn retry_backoff(self, backoff: Duration) -> Self {
        self.set(keys::RETRY_BACKOFF_MS, millis(backoff))
    }

    /// `retry.backoff.max.ms`, in whole milliseconds (truncated).
    pub fn retry_backoff_max(self, backoff: Duration) -> Self {
        self.set(keys::RETRY_BACKOFF_MAX_MS, millis(backoff))
    }

    /// `buffer.memory`
    pub fn buffer_memory(self, bytes: usize) -> Self {
        self.set(keys::BUFFER_MEMORY, bytes.to_string())
    }

    /// `max.block.ms`, in whole milliseconds (truncated).
    pub fn max_block(self, timeout: Duration) -> Self {
        self.set(keys::MAX_BLOCK_MS, millis(timeout))
    }

    /// `max.request.size`
    pub fn max_request_size(self, bytes: usize) -> Self {
        self.set(keys::MAX_REQUEST_SIZE, bytes.to_string())
    }

    /// `transactional.id`
    pub fn transactional_id(self, id: impl Into<String>) -> Self {
        self.set(keys::TRANSACTIONAL_ID, id)
    }

    /// `transaction.timeout.ms`, in whole milliseconds (truncated).
    pub fn transaction_timeout(self, timeout: Duration) -> Self {
        self.set(keys::TRANSACTION_TIMEOUT_MS, millis(timeout))
    }

    /// `partitioner.ignore.keys`
    pub fn partitioner_ignore_keys(self, ignore: bool) -> Self {
        self.set(keys::PARTITIONER_IGNORE_KEYS, ignore.to_string())
    }

    /// `kacrab.shards`
    pub fn shards(self, shards: usize) -> Self {
        self.set(keys::KACRAB_SHARDS, shards.to_string())
    }

    /// `kacrab.cores`
    pub fn cores(self, cores: &[usize]) -> Self {
        let list: Vec<String> = cores.iter().map(usize::to_string).collect();
        self.set(keys::KACRAB_CORES, list.join(","))
    }

    /// `kacrab.io.memory.bytes`
    pub fn io_memory(self, bytes: usize) -> Self {
        self.set(keys::KACRAB_IO_MEMORY_BYTES, bytes.to_string())
    }

    /// `kacrab.spin.before.park.us`, in whole microseconds (truncated); zero turns spinning off.
    pub fn spin_before_park(self, spin: Duration) -> Self {
        self.set(
            keys::KACRAB_SPIN_BEFORE_PARK_US,
            spin.as_micros().to_string(),
        )
    }

    /// `kacrab.max.response.bytes`
    pub fn max_response_size(self, bytes: usize) -> Self {
        self.set(keys::KACRAB_MAX_RESPONSE_BYTES, bytes.to_string())
    }

    /// Applies defaults and Java's cross-key rules, in Java's order: the idempotence rules of
    /// `ProducerConfig`, then `KafkaProducer.configureDeliveryTimeout`, then the bootstrap list,
    /// then kacrab's own keys. Returns the first error.
    pub fn build(self) -> Result<ProducerConfig, ConfigError> {
        if let Some(error) = self.first_error {
            return Err(error);
        }
        let e = self.explicit;

        let acks = e.acks.unwrap_or_default();
        let retries = e.retries.unwrap_or(i32::MAX);
        let max_in_flight = e.max_in_flight.unwrap_or(5);
        let enable_idempotence = idempotence(&e, acks, retries, max_in_flight)?;
        transaction_version::check(e.transaction_version, e.transactional_id.is_some())?;

        let linger_ms = e.linger_ms.unwrap_or(5).min(I32_MAX);
        let request_timeout_ms = e.request_timeout_ms.unwrap_or(30_000);
        let delivery_timeout_ms = delivery_timeout(&e, linger_ms, request_timeout_ms)?;

        let Some(bootstrap_servers) = e.bootstrap_servers else {
            return Err(parse::invalid(
                keys::BOOTSTRAP_SERVERS,
                "",
                "is required: list at least one broker as host:port, e.g. localhost:9092",
            ));
        };

        let shards = match (e.shards, &e.cores) {
            (Some(shards), Some(cores)) if shards != cores.len() => {
                return Err(ConfigError::Conflict {
                    keys: vec![keys::KACRAB_SHARDS.into(), keys::KACRAB_CORES.into()],
                    rule: format!(
                        "`kacrab.shards` is {shards} but `kacrab.cores` lists {} cores; give one \
                         core per shard, or set only one of the two",
                        cores.len()
                    ),
                });
            }
            (None, Some(cores)) => Some(cores.len()),
            (shards, _) => shards,
        };

        let security = e.security.build()?;

        let reconnect_backoff_ms = e.reconnect_backoff_ms.unwrap_or(50);
        // CommonClientConfigs.postProcessReconnectBackoffConfigs: setting only the initial
        // reconnect backoff turns the exponential growth off.
        let reconnect_backoff_max_ms = e
            .reconnect_backoff_max_ms
            .or(e.reconnect_backoff_ms)
            .unwrap_or(1000);

        Ok(ProducerConfig {
            bootstrap_servers,
            client_id: e.client_id.unwrap_or_else(|| "kacrab".to_string()),
            acks,
            enable_idempotence,
            linger: ms(linger_ms),
            batch_size: e.batch_size.unwrap_or(16_384),
            max_in_flight_requests_per_connection: max_in_flight,
            delivery_timeout: ms(delivery_timeout_ms),
            request_timeout: ms(request_timeout_ms.into()),
            retries,
            retry_backoff: ms(e.retry_backoff_ms.unwrap_or(100)),
            retry_backoff_max: ms(e.retry_backoff_max_ms.unwrap_or(1000)),
            reconnect_backoff: ms(reconnect_backoff_ms),
            reconnect_backoff_max: ms(reconnect_backoff_max_ms),
            socket_connection_setup_timeout: ms(e
                .socket_connection_setup_timeout_ms
                .unwrap_or(10_000)),
            connections_max_idle: match e.connections_max_idle_ms.unwrap_or(540_000) {
                idle if idle < 0 => None,
                idle => Some(ms(idle)),
            },
            buffer_memory: e.buffer_memory.unwrap_or(32 * 1024 * 1024),
            max_block: ms(e.max_block_ms.unwrap_or(60_000)),
            max_request_size: e.max_request_size.unwrap_or(1024 * 1024),
            metadata_max_age: ms(e.metadata_max_age_ms.unwrap_or(300_000)),
            metadata_max_idle: ms(e.metadata_max_idle_ms.unwrap_or(300_000)),
            metadata_recovery_strategy: e.metadata_recovery_strategy.unwrap_or_default(),
            metadata_recovery_rebootstrap_trigger: ms(e
                .metadata_recovery_rebootstrap_trigger_ms
                .unwrap_or(300_000)),
            transactional_id: e.transactional_id,
            transaction_timeout: ms(e.transaction_timeout_ms.unwrap_or(60_000).into()),
            partitioner_ignore_keys: e.partitioner_ignore_keys.unwrap_or(false),
            compression_type: e.compression.unwrap_or_default(),
            compression_gzip_level: e
                .compression_gzip_level
                .unwrap_or(compression::GZIP_DEFAULT_LEVEL),
            compression_lz4_level: e
                .compression_lz4_level
                .unwrap_or(compression::LZ4_DEFAULT_LEVEL),
            compression_zstd_level: e
                .compression_zstd_level
                .unwrap_or(compression::ZSTD_DEFAULT_LEVEL),
            shards,
            cores: e.cores,
            io_memory: e.io_memory.unwrap_or(64 * 1024),
            spin_before_park: e
                .spin_before_park_us
                .filter(|&us| us > 0)
                .map(|us| Duration::from_micros(us.unsigned_abs())),
            max_response_size: e.max_response_size.unwrap_or(100 * 1024 * 1024),
            transaction_version: e.transaction_version.unwrap_or_default(),
            security_protocol: security.protocol,
            sasl: security.sasl,
            tls: security.tls,
        })
    }
}

/// `ProducerConfig.postProcessAndValidateIdempotenceConfigs` (4.x): the effective
/// `enable.idempotence`, or the ConfigException Java would throw.
fn idempotence(
    e: &Explicit,
    acks: Acks,
    retries: i32,
    max_in_flight: usize,
) -> Result<bool, ConfigError> {
    use keys::{
        ACKS, ENABLE_IDEMPOTENCE, MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, RETRIES, TRANSACTIONAL_ID,
    };
    let user_set = e.enable_idempotence.is_some();
    let requested = e.enable_idempotence.unwrap_or(true);
    // Why idempotence was turned off quietly, for the transactional.id message below.
    let mut turned_off_by: Option<(&str, String)> = None;

    if requested {
        if retries == 0 {
            if user_set {
                return Err(ConfigError::Conflict {
                    keys: vec![RETRIES.into(), ENABLE_IDEMPOTENCE.into()],
                    rule: "`enable.idempotence=true` requires `retries` above 0, but it is 0"
                        .to_string(),
                });
            }
            turned_off_by.get_or_insert((RETRIES, "retries=0".to_string()));
        }
        if acks != Acks::All {
            if user_set {
                return Err(ConfigError::Conflict {
                    keys: vec![ACKS.into(), ENABLE_IDEMPOTENCE.into()],
                    rule: format!(
                        "`enable.idempotence=true` requires `acks=all`, but it is {acks}; with \
                         fewer acknowledgements idempotence cannot be guaranteed"
                    ),
                });
            }
            turned_off_by.get_or_insert((ACKS, format!("acks={acks}")));
        }
        // Java 4.x makes this an error whenever idempotence is requested, by default too, and
        // even when acks or retries above have just turned it off; 3.x turned idempotence off
        // with a warning instead. Kept as in Java, so a configuration fails the same way in both.
        if max_in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE {
            let how = if user_set {
                "`enable.idempotence=true` allows at most 5"
            } else {
                "idempotence is on by default and allows at most 5; set `enable.idempotence=false` \
                 to allow more"
            };
            return Err(ConfigError::Conflict {
                keys: vec![
                    MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION.into(),
                    ENABLE_IDEMPOTENCE.into(),
                ],
                rule: format!(
                    "`max.in.flight.requests.per.connection` is {max_in_flight}, but {how}"
                ),
            });
        }
    }

    let enabled = requested && turned_off_by.is_none();
    // Checked after the rules above because they may have turned idempotence off
    // (`KafkaProducer.configureTransactionState` needs it).
    if !enabled && e.transactional_id.is_some() {
        let (mut keys, why) = match turned_off_by {
            Some((key, setting)) => (
                vec![TRANSACTIONAL_ID.to_string(), key.to_string()],
                format!("idempotence is off because {setting}"),
            ),
            None => (
                vec![TRANSACTIONAL_ID.to_string()],
                "`enable.idempotence` is false".to_string(),
            ),
        };
        keys.push(ENABLE_IDEMPOTENCE.to_string());
        return Err(ConfigError::Conflict {
            keys,
            rule: format!("`transactional.id` requires idempotence, but {why}"),
        });
    }
    Ok(enabled)
}

/// `KafkaProducer.configureDeliveryTimeout`: `delivery.timeout.ms` must cover one linger and one
/// request timeout. A lower explicit value is an error; the default is raised to the sum.
fn delivery_timeout(
    e: &Explicit,
    linger_ms: i64,
    request_timeout_ms: i32,
) -> Result<i64, ConfigError> {
    let floor = (linger_ms + i64::from(request_timeout_ms)).min(I32_MAX);
    match e.delivery_timeout_ms.map(i64::from) {
        Some(delivery) if delivery < floor => Err(ConfigError::Conflict {
            keys: vec![
                keys::DELIVERY_TIMEOUT_MS.into(),
                keys::LINGER_MS.into(),
                keys::REQUEST_TIMEOUT_MS.into(),
            ],
            rule: format!(
                "`delivery.timeout.ms` is {delivery} but must be at least `linger.ms` + \
                 `request.timeout.ms` = {linger_ms} + {request_timeout_ms} = {floor}"
            ),
        }),
        Some(delivery) => Ok(delivery),
        None => Ok(floor.max(120_000)),
    }
}

fn ms(millis: i64) -> Duration {
    Duration::from_millis(millis.unsigned_abs())
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}
