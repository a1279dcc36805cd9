//! The keys a user set, each parsed by Java's `ConfigDef` rules for it as it is set: the raw
//! material `ProducerConfigBuilder::build` applies defaults and cross-key rules to.

use super::parse::{self, Unit};
use super::{
    keys, security, Acks, Compression, ConfigError, MetadataRecoveryStrategy, TransactionVersion,
};
use crate::protocol::compression;

/// Values set explicitly, parsed; `None` means the key was not set. Java's cross-key rules
/// depend on whether a key was set (`AbstractConfig.originals().containsKey`), not only on its
/// value, so defaults are applied in `build`.
#[derive(Debug, Clone, Default)]
pub(super) struct Explicit {
    pub(super) bootstrap_servers: Option<Vec<String>>,
    pub(super) client_id: Option<String>,
    pub(super) acks: Option<Acks>,
    pub(super) enable_idempotence: Option<bool>,
    pub(super) linger_ms: Option<i64>,
    pub(super) batch_size: Option<usize>,
    pub(super) max_in_flight: Option<usize>,
    pub(super) delivery_timeout_ms: Option<i32>,
    pub(super) request_timeout_ms: Option<i32>,
    pub(super) retries: Option<i32>,
    pub(super) retry_backoff_ms: Option<i64>,
    pub(super) retry_backoff_max_ms: Option<i64>,
    pub(super) reconnect_backoff_ms: Option<i64>,
    pub(super) reconnect_backoff_max_ms: Option<i64>,
    pub(super) socket_connection_setup_timeout_ms: Option<i64>,
    pub(super) connections_max_idle_ms: Option<i64>,
    pub(super) buffer_memory: Option<usize>,
    pub(super) max_block_ms: Option<i64>,
    pub(super) max_request_size: Option<usize>,
    pub(super) metadata_max_age_ms: Option<i64>,
    pub(super) metadata_max_idle_ms: Option<i64>,
    pub(super) metadata_recovery_strategy: Option<MetadataRecoveryStrategy>,
    pub(super) metadata_recovery_rebootstrap_trigger_ms: Option<i64>,
    pub(super) transactional_id: Option<String>,
    pub(super) transaction_timeout_ms: Option<i32>,
    pub(super) partitioner_ignore_keys: Option<bool>,
    pub(super) compression: Option<Compression>,
    pub(super) compression_gzip_level: Option<i32>,
    pub(super) compression_lz4_level: Option<i32>,
    pub(super) compression_zstd_level: Option<i32>,
    pub(super) shards: Option<usize>,
    pub(super) cores: Option<Vec<usize>>,
    pub(super) io_memory: Option<usize>,
    pub(super) spin_before_park_us: Option<i64>,
    pub(super) max_response_size: Option<usize>,
    pub(super) transaction_version: Option<TransactionVersion>,
    pub(super) security: security::ExplicitSecurity,
}

pub(super) const I32_MAX: i64 = i32::MAX as i64;

impl Explicit {
    /// Parses one property. Integer types and ranges are Java's `ConfigDef` definitions in
    /// `ProducerConfig`: `Type.INT` keys are limited to `i32`, `Type.LONG` keys to `i64`.
    pub(super) fn apply(&mut self, key: &str, raw: &str) -> Result<(), ConfigError> {
        use keys::*;
        if self.security.apply(key, raw)? {
            return Ok(());
        }
        match key {
            BOOTSTRAP_SERVERS => self.bootstrap_servers = Some(parse::bootstrap_servers(key, raw)?),
            CLIENT_ID => self.client_id = Some(raw.trim().to_string()),
            ACKS => self.acks = Some(parse::acks(key, raw)?),
            ENABLE_IDEMPOTENCE => self.enable_idempotence = Some(parse::boolean(key, raw)?),
            LINGER_MS => self.linger_ms = Some(parse::millis_long(key, raw)?),
            BATCH_SIZE => self.batch_size = Some(parse::size(key, raw, 0, I32_MAX, Unit::Bytes)?),
            MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION => {
                self.max_in_flight = Some(parse::size(key, raw, 1, I32_MAX, Unit::Plain)?)
            }
            DELIVERY_TIMEOUT_MS => self.delivery_timeout_ms = Some(parse::millis_int(key, raw)?),
            REQUEST_TIMEOUT_MS => self.request_timeout_ms = Some(parse::millis_int(key, raw)?),
            RETRIES => self.retries = Some(parse::int(key, raw, 0, i32::MAX, Unit::Plain)?),
            RETRY_BACKOFF_MS => self.retry_backoff_ms = Some(parse::millis_long(key, raw)?),
            RETRY_BACKOFF_MAX_MS => self.retry_backoff_max_ms = Some(parse::millis_long(key, raw)?),
            RECONNECT_BACKOFF_MS => self.reconnect_backoff_ms = Some(parse::millis_long(key, raw)?),
            RECONNECT_BACKOFF_MAX_MS => {
                self.reconnect_backoff_max_ms = Some(parse::millis_long(key, raw)?)
            }
            SOCKET_CONNECTION_SETUP_TIMEOUT_MS => {
                self.socket_connection_setup_timeout_ms = Some(parse::millis_long(key, raw)?)
            }
            // Java defines it without a validator; a negative value disables idle expiry.
            CONNECTIONS_MAX_IDLE_MS => {
                self.connections_max_idle_ms =
                    Some(parse::long(key, raw, i64::MIN, i64::MAX, Unit::Millis)?)
            }
            BUFFER_MEMORY => {
                self.buffer_memory = Some(parse::size(key, raw, 0, i64::MAX, Unit::Bytes)?)
            }
            MAX_BLOCK_MS => self.max_block_ms = Some(parse::millis_long(key, raw)?),
            MAX_REQUEST_SIZE => {
                self.max_request_size = Some(parse::size(key, raw, 0, I32_MAX, Unit::Bytes)?)
            }
            METADATA_MAX_AGE_MS => self.metadata_max_age_ms = Some(parse::millis_long(key, raw)?),
            METADATA_MAX_IDLE_MS => {
                self.metadata_max_idle_ms =
                    Some(parse::long(key, raw, 5000, i64::MAX, Unit::Millis)?)
            }
            METADATA_RECOVERY_STRATEGY => {
                self.metadata_recovery_strategy = Some(MetadataRecoveryStrategy::parse(key, raw)?)
            }
            METADATA_RECOVERY_REBOOTSTRAP_TRIGGER_MS => {
                self.metadata_recovery_rebootstrap_trigger_ms = Some(parse::millis_long(key, raw)?)
            }
            TRANSACTIONAL_ID => {
                // Java's `ConfigDef.NonEmptyString`, applied after trimming.
                let id = raw.trim();
                if id.is_empty() {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must not be empty; leave it unset for a producer without transactions",
                    ));
                }
                self.transactional_id = Some(id.to_string());
            }
            TRANSACTION_TIMEOUT_MS => {
                self.transaction_timeout_ms = Some(parse::millis_int(key, raw)?)
            }
            PARTITIONER_IGNORE_KEYS => {
                self.partitioner_ignore_keys = Some(parse::boolean(key, raw)?)
            }
            COMPRESSION_TYPE => match Compression::from_property(raw.trim()) {
                Some(compression) => self.compression = Some(compression),
                None => {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "must be one of none, gzip, snappy, lz4, zstd",
                    ))
                }
            },
            COMPRESSION_GZIP_LEVEL => {
                // Java's `GzipCompression.LevelValidator`: 1 to 9, or -1 for the default.
                let level = raw.trim().parse::<i32>().ok().filter(|&l| {
                    l == compression::GZIP_DEFAULT_LEVEL
                        || (compression::GZIP_MIN_LEVEL..=compression::GZIP_MAX_LEVEL).contains(&l)
                });
                match level {
                    Some(level) => self.compression_gzip_level = Some(level),
                    None => {
                        return Err(parse::invalid(
                            key,
                            raw,
                            "must be a number from 1 to 9, or -1 for the default level",
                        ))
                    }
                }
            }
            COMPRESSION_LZ4_LEVEL => {
                self.compression_lz4_level = Some(parse::int(
                    key,
                    raw,
                    compression::LZ4_MIN_LEVEL,
                    compression::LZ4_MAX_LEVEL,
                    Unit::Plain,
                )?)
            }
            COMPRESSION_ZSTD_LEVEL => {
                self.compression_zstd_level = Some(parse::int(
                    key,
                    raw,
                    compression::ZSTD_MIN_LEVEL,
                    compression::ZSTD_MAX_LEVEL,
                    Unit::Plain,
                )?)
            }
            PARTITIONER_CLASS => {
                if !raw.trim().is_empty() {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "custom partitioners are not supported; leave it unset for the built-in \
                         partitioner",
                    ));
                }
            }
            INTERCEPTOR_CLASSES => {
                if !raw.trim().is_empty() {
                    return Err(parse::invalid(key, raw, "interceptors are not supported"));
                }
            }
            TRANSACTION_TWO_PHASE_COMMIT_ENABLE => {
                if parse::boolean(key, raw)? {
                    return Err(parse::invalid(
                        key,
                        raw,
                        "two-phase commit (KIP-939) is not supported; only false is allowed",
                    ));
                }
            }
            KACRAB_SHARDS => self.shards = Some(parse::size(key, raw, 1, I32_MAX, Unit::Plain)?),
            KACRAB_CORES => self.cores = Some(parse::cores(key, raw)?),
            KACRAB_IO_MEMORY_BYTES => {
                self.io_memory = Some(parse::size(key, raw, 4096, i64::MAX, Unit::Bytes)?)
            }
            KACRAB_SPIN_BEFORE_PARK_US => {
                self.spin_before_park_us = Some(parse::long(key, raw, 0, i64::MAX, Unit::Micros)?)
            }
            KACRAB_MAX_RESPONSE_BYTES => {
                // A Kafka frame's length is an int32.
                self.max_response_size = Some(parse::size(key, raw, 4096, I32_MAX, Unit::Bytes)?)
            }
            KACRAB_TRANSACTION_VERSION => {
                self.transaction_version = Some(TransactionVersion::parse(raw)?)
            }
            _ => return check_ignored(key, raw),
        }
        Ok(())
    }
}

fn check_ignored(key: &str, raw: &str) -> Result<(), ConfigError> {
    use keys::Check;
    let Some(check) = keys::ignored_check(key) else {
        return Err(ConfigError::UnknownKey {
            key: key.to_string(),
        });
    };
    let unit = Unit::of_key(key);
    match check {
        Check::Any => Ok(()),
        Check::Bool => parse::boolean(key, raw).map(drop),
        Check::Int(min, max) => parse::int(key, raw, min, max, unit).map(drop),
        Check::Long(min, max) => parse::long(key, raw, min, max, unit).map(drop),
        Check::OneOf(allowed) => parse::one_of(key, raw, allowed),
        Check::OneOfIgnoreCase(allowed) => parse::one_of_ignore_case(key, raw, allowed),
        Check::Double(min, max) => parse::double(key, raw, min, max).map(drop),
        Check::Empty(reason) => {
            if raw.trim().is_empty() {
                Ok(())
            } else {
                Err(parse::invalid(key, raw, format!("must be empty: {reason}")))
            }
        }
    }?;
    tracing::warn!(
        target: "kacrab::config",
        key,
        "a Java producer key kacrab accepts and ignores (see keys::ignored_keys for why)"
    );
    Ok(())
}
