//! Property names, the Java keys kacrab accepts but ignores, and the suggestion shown for an
//! unknown key.

/// `bootstrap.servers`
pub const BOOTSTRAP_SERVERS: &str = "bootstrap.servers";
/// `client.id`
pub const CLIENT_ID: &str = "client.id";
/// `acks`
pub const ACKS: &str = "acks";
/// `enable.idempotence`
pub const ENABLE_IDEMPOTENCE: &str = "enable.idempotence";
/// `linger.ms`
pub const LINGER_MS: &str = "linger.ms";
/// `batch.size`
pub const BATCH_SIZE: &str = "batch.size";
/// `max.in.flight.requests.per.connection`
pub const MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION: &str = "max.in.flight.requests.per.connection";
/// `delivery.timeout.ms`
pub const DELIVERY_TIMEOUT_MS: &str = "delivery.timeout.ms";
/// `request.timeout.ms`
pub const REQUEST_TIMEOUT_MS: &str = "request.timeout.ms";
/// `retries`
pub const RETRIES: &str = "retries";
/// `retry.backoff.ms`
pub const RETRY_BACKOFF_MS: &str = "retry.backoff.ms";
/// `retry.backoff.max.ms`
pub const RETRY_BACKOFF_MAX_MS: &str = "retry.backoff.max.ms";
/// `reconnect.backoff.ms`
pub const RECONNECT_BACKOFF_MS: &str = "reconnect.backoff.ms";
/// `reconnect.backoff.max.ms`
pub const RECONNECT_BACKOFF_MAX_MS: &str = "reconnect.backoff.max.ms";
/// `socket.connection.setup.timeout.ms`
pub const SOCKET_CONNECTION_SETUP_TIMEOUT_MS: &str = "socket.connection.setup.timeout.ms";
/// `connections.max.idle.ms`
pub const CONNECTIONS_MAX_IDLE_MS: &str = "connections.max.idle.ms";
/// `buffer.memory`
pub const BUFFER_MEMORY: &str = "buffer.memory";
/// `max.block.ms`
pub const MAX_BLOCK_MS: &str = "max.block.ms";
/// `max.request.size`
pub const MAX_REQUEST_SIZE: &str = "max.request.size";
/// `metadata.max.age.ms`
pub const METADATA_MAX_AGE_MS: &str = "metadata.max.age.ms";
/// `metadata.max.idle.ms`: a topic not sent to for this long is no longer fetched.
pub const METADATA_MAX_IDLE_MS: &str = "metadata.max.idle.ms";
/// `metadata.recovery.strategy`: `rebootstrap` (default) or `none`, case-insensitive.
pub const METADATA_RECOVERY_STRATEGY: &str = "metadata.recovery.strategy";
/// `metadata.recovery.rebootstrap.trigger.ms`: how long without any metadata answer before the
/// producer rebootstraps.
pub const METADATA_RECOVERY_REBOOTSTRAP_TRIGGER_MS: &str =
    "metadata.recovery.rebootstrap.trigger.ms";
/// `transactional.id`
pub const TRANSACTIONAL_ID: &str = "transactional.id";
/// `transaction.timeout.ms`
pub const TRANSACTION_TIMEOUT_MS: &str = "transaction.timeout.ms";
/// `partitioner.ignore.keys`
pub const PARTITIONER_IGNORE_KEYS: &str = "partitioner.ignore.keys";
/// `compression.type`
pub const COMPRESSION_TYPE: &str = "compression.type";
/// `compression.gzip.level`
pub const COMPRESSION_GZIP_LEVEL: &str = "compression.gzip.level";
/// `compression.lz4.level`
pub const COMPRESSION_LZ4_LEVEL: &str = "compression.lz4.level";
/// `compression.zstd.level`
pub const COMPRESSION_ZSTD_LEVEL: &str = "compression.zstd.level";
/// `security.protocol`: `PLAINTEXT`, `SASL_PLAINTEXT`, `SSL` or `SASL_SSL`.
pub const SECURITY_PROTOCOL: &str = "security.protocol";
/// `sasl.mechanism`: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
pub const SASL_MECHANISM: &str = "sasl.mechanism";
/// `sasl.jaas.config`: the login module and its credentials, as Java writes it.
pub const SASL_JAAS_CONFIG: &str = "sasl.jaas.config";
/// `ssl.truststore.type`: `PEM` only.
pub const SSL_TRUSTSTORE_TYPE: &str = "ssl.truststore.type";
/// `ssl.truststore.certificates`: the trusted certificates as PEM text.
pub const SSL_TRUSTSTORE_CERTIFICATES: &str = "ssl.truststore.certificates";
/// `ssl.truststore.location`: a PEM file of trusted certificates.
pub const SSL_TRUSTSTORE_LOCATION: &str = "ssl.truststore.location";
/// `ssl.truststore.password`: accepted only when empty (PEM stores have none).
pub const SSL_TRUSTSTORE_PASSWORD: &str = "ssl.truststore.password";
/// `ssl.keystore.type`: `PEM` only.
pub const SSL_KEYSTORE_TYPE: &str = "ssl.keystore.type";
/// `ssl.keystore.certificate.chain`: the client certificate chain as PEM text.
pub const SSL_KEYSTORE_CERTIFICATE_CHAIN: &str = "ssl.keystore.certificate.chain";
/// `ssl.keystore.key`: the client's private key as PEM text (unencrypted).
pub const SSL_KEYSTORE_KEY: &str = "ssl.keystore.key";
/// `ssl.keystore.location`: one PEM file with the client's key and certificate chain.
pub const SSL_KEYSTORE_LOCATION: &str = "ssl.keystore.location";
/// `ssl.keystore.password`: accepted only when empty (PEM stores have none).
pub const SSL_KEYSTORE_PASSWORD: &str = "ssl.keystore.password";
/// `ssl.key.password`: accepted only when empty (encrypted keys are not read).
pub const SSL_KEY_PASSWORD: &str = "ssl.key.password";
/// `ssl.endpoint.identification.algorithm`: `https` (default) checks the broker's name; empty
/// does not.
pub const SSL_ENDPOINT_IDENTIFICATION_ALGORITHM: &str = "ssl.endpoint.identification.algorithm";
/// `ssl.protocol`: `TLSv1.3`, `TLSv1.2` or `TLS`; rustls negotiates the version.
pub const SSL_PROTOCOL: &str = "ssl.protocol";
/// `ssl.enabled.protocols`: the TLS versions offered, of `TLSv1.2` and `TLSv1.3`.
pub const SSL_ENABLED_PROTOCOLS: &str = "ssl.enabled.protocols";
/// `ssl.cipher.suites`: accepted only when empty (rustls's default suites).
pub const SSL_CIPHER_SUITES: &str = "ssl.cipher.suites";
/// `partitioner.class`: accepted only when empty (the built-in partitioner).
pub const PARTITIONER_CLASS: &str = "partitioner.class";
/// `interceptor.classes`: accepted only when empty.
pub const INTERCEPTOR_CLASSES: &str = "interceptor.classes";
/// `transaction.two.phase.commit.enable`: accepted only as `false`.
pub const TRANSACTION_TWO_PHASE_COMMIT_ENABLE: &str = "transaction.two.phase.commit.enable";

/// `kacrab.shards`: number of shard threads.
pub const KACRAB_SHARDS: &str = "kacrab.shards";
/// `kacrab.cores`: the CPU each shard is pinned to.
pub const KACRAB_CORES: &str = "kacrab.cores";
/// `kacrab.io.memory.bytes`: io_uring buffer memory per shard.
pub const KACRAB_IO_MEMORY_BYTES: &str = "kacrab.io.memory.bytes";
/// `kacrab.spin.before.park.us`: how long an idle shard spins before it parks.
pub const KACRAB_SPIN_BEFORE_PARK_US: &str = "kacrab.spin.before.park.us";
/// `kacrab.max.response.bytes`: the largest broker response frame accepted.
pub const KACRAB_MAX_RESPONSE_BYTES: &str = "kacrab.max.response.bytes";
/// `kacrab.transaction.version`: the transaction protocol, `auto`, `1` or `2`.
pub const KACRAB_TRANSACTION_VERSION: &str = "kacrab.transaction.version";

/// Every key that sets a field of `ProducerConfig`, plus the restricted Java keys above.
pub(super) const RECOGNIZED: &[&str] = &[
    BOOTSTRAP_SERVERS,
    CLIENT_ID,
    ACKS,
    ENABLE_IDEMPOTENCE,
    LINGER_MS,
    BATCH_SIZE,
    MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION,
    DELIVERY_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    RETRIES,
    RETRY_BACKOFF_MS,
    RETRY_BACKOFF_MAX_MS,
    RECONNECT_BACKOFF_MS,
    RECONNECT_BACKOFF_MAX_MS,
    SOCKET_CONNECTION_SETUP_TIMEOUT_MS,
    CONNECTIONS_MAX_IDLE_MS,
    BUFFER_MEMORY,
    MAX_BLOCK_MS,
    MAX_REQUEST_SIZE,
    METADATA_MAX_AGE_MS,
    METADATA_MAX_IDLE_MS,
    METADATA_RECOVERY_STRATEGY,
    METADATA_RECOVERY_REBOOTSTRAP_TRIGGER_MS,
    TRANSACTIONAL_ID,
    TRANSACTION_TIMEOUT_MS,
    PARTITIONER_IGNORE_KEYS,
    COMPRESSION_TYPE,
    COMPRESSION_GZIP_LEVEL,
    COMPRESSION_LZ4_LEVEL,
    COMPRESSION_ZSTD_LEVEL,
    SECURITY_PROTOCOL,
    SASL_MECHANISM,
    SASL_JAAS_CONFIG,
    SSL_TRUSTSTORE_TYPE,
    SSL_TRUSTSTORE_CERTIFICATES,
    SSL_TRUSTSTORE_LOCATION,
    SSL_TRUSTSTORE_PASSWORD,
    SSL_KEYSTORE_TYPE,
    SSL_KEYSTORE_CERTIFICATE_CHAIN,
    SSL_KEYSTORE_KEY,
    SSL_KEYSTORE_LOCATION,
    SSL_KEYSTORE_PASSWORD,
    SSL_KEY_PASSWORD,
    SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
    SSL_PROTOCOL,
    SSL_ENABLED_PROTOCOLS,
    SSL_CIPHER_SUITES,
    PARTITIONER_CLASS,
    INTERCEPTOR_CLASSES,
    TRANSACTION_TWO_PHASE_COMMIT_ENABLE,
    KACRAB_SHARDS,
    KACRAB_CORES,
    KACRAB_IO_MEMORY_BYTES,
    KACRAB_SPIN_BEFORE_PARK_US,
    KACRAB_MAX_RESPONSE_BYTES,
    KACRAB_TRANSACTION_VERSION,
];

/// How an ignored key's value is still checked: with the validator Java's `ProducerConfig`
/// defines for it, so a properties file that the Java client would reject is rejected here too.
#[derive(Debug, Clone, Copy)]
pub(super) enum Check {
    /// Any string (Java `Type.CLASS` and `Type.LIST` values, which cannot be checked here).
    Any,
    /// `true` or `false`, case-insensitive.
    Bool,
    /// A Java `int` in the inclusive range.
    Int(i32, i32),
    /// A Java `long` in the inclusive range.
    Long(i64, i64),
    /// One of these strings, case-sensitive like Java's `ConfigDef.ValidString`.
    OneOf(&'static [&'static str]),
    /// One of these strings, case-insensitive like Java's `ConfigDef.CaseInsensitiveValidString`.
    OneOfIgnoreCase(&'static [&'static str]),
    /// A Java `double` in the inclusive range.
    Double(f64, f64),
    /// Empty only (Java's default, null or an empty list): a value would ask for something
    /// kacrab does not do, and the text says what.
    Empty(&'static str),
}

/// Why the Java-class and plug-in keys must stay empty.
const NO_SASL_PLUGINS: &str = "custom SASL login and callback classes are not supported; the \
                               credentials come from `sasl.jaas.config`";

/// The ignored Java keys and Java's check for each; the reasons are on [`ignored_keys`].
pub(super) const IGNORED: &[(&str, Check)] = &[
    ("key.serializer", Check::Any),
    ("value.serializer", Check::Any),
    // CommonClientConfigs.SEND_BUFFER_LOWER_BOUND / RECEIVE_BUFFER_LOWER_BOUND are -1 (OS default).
    ("send.buffer.bytes", Check::Int(-1, i32::MAX)),
    ("receive.buffer.bytes", Check::Int(-1, i32::MAX)),
    ("partitioner.adaptive.partitioning.enable", Check::Bool),
    (
        "partitioner.availability.timeout.ms",
        Check::Long(0, i64::MAX),
    ),
    (
        "socket.connection.setup.timeout.max.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    (
        "client.dns.lookup",
        Check::OneOf(&[
            "use_all_dns_ips",
            "resolve_canonical_bootstrap_servers_only",
        ]),
    ),
    ("enable.metrics.push", Check::Bool),
    ("metrics.sample.window.ms", Check::Long(0, i64::MAX)),
    ("metrics.num.samples", Check::Int(1, i32::MAX)),
    (
        "metrics.recording.level",
        Check::OneOf(&["INFO", "DEBUG", "TRACE"]),
    ),
    ("metric.reporters", Check::Any),
    ("ssl.provider", Check::Any),
    ("ssl.keymanager.algorithm", Check::Any),
    ("ssl.trustmanager.algorithm", Check::Any),
    ("ssl.secure.random.implementation", Check::Any),
    (
        "ssl.engine.factory.class",
        Check::Empty("a custom SSL engine factory is not supported; TLS runs on rustls"),
    ),
    (
        "security.providers",
        Check::Empty("Java security providers are not supported; TLS runs on rustls"),
    ),
    (
        "config.providers",
        Check::Empty("config providers are not supported; every value is taken as written"),
    ),
    (
        "sasl.client.callback.handler.class",
        Check::Empty(NO_SASL_PLUGINS),
    ),
    (
        "sasl.login.callback.handler.class",
        Check::Empty(NO_SASL_PLUGINS),
    ),
    ("sasl.login.class", Check::Empty(NO_SASL_PLUGINS)),
    // GSSAPI (Kerberos) only; Java defines them without validators.
    ("sasl.kerberos.service.name", Check::Any),
    ("sasl.kerberos.kinit.cmd", Check::Any),
    (
        "sasl.kerberos.ticket.renew.window.factor",
        Check::Double(f64::MIN, f64::MAX),
    ),
    (
        "sasl.kerberos.ticket.renew.jitter",
        Check::Double(f64::MIN, f64::MAX),
    ),
    (
        "sasl.kerberos.min.time.before.relogin",
        Check::Long(i64::MIN, i64::MAX),
    ),
    // Java's built-in OAUTHBEARER login only (the login refresh, the token and JWKS endpoints,
    // KIP-768 and KIP-1139's JWT retrieval and assertions); kacrab's tokens come from the
    // application's provider.
    ("sasl.login.refresh.window.factor", Check::Double(0.5, 1.0)),
    ("sasl.login.refresh.window.jitter", Check::Double(0.0, 0.25)),
    ("sasl.login.refresh.min.period.seconds", Check::Int(0, 900)),
    ("sasl.login.refresh.buffer.seconds", Check::Int(0, 3600)),
    (
        "sasl.login.connect.timeout.ms",
        Check::Int(i32::MIN, i32::MAX),
    ),
    ("sasl.login.read.timeout.ms", Check::Int(i32::MIN, i32::MAX)),
    (
        "sasl.login.retry.backoff.max.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    (
        "sasl.login.retry.backoff.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    ("sasl.oauthbearer.jwt.retriever.class", Check::Any),
    ("sasl.oauthbearer.jwt.validator.class", Check::Any),
    ("sasl.oauthbearer.scope", Check::Any),
    ("sasl.oauthbearer.client.credentials.client.id", Check::Any),
    (
        "sasl.oauthbearer.client.credentials.client.secret",
        Check::Any,
    ),
    (
        "sasl.oauthbearer.assertion.algorithm",
        Check::OneOfIgnoreCase(&["ES256", "RS256"]),
    ),
    ("sasl.oauthbearer.assertion.claim.aud", Check::Any),
    (
        "sasl.oauthbearer.assertion.claim.exp.seconds",
        Check::Int(0, 86400),
    ),
    ("sasl.oauthbearer.assertion.claim.iss", Check::Any),
    ("sasl.oauthbearer.assertion.claim.jti.include", Check::Bool),
    (
        "sasl.oauthbearer.assertion.claim.nbf.seconds",
        Check::Int(0, 3600),
    ),
    ("sasl.oauthbearer.assertion.claim.sub", Check::Any),
    ("sasl.oauthbearer.assertion.file", Check::Any),
    ("sasl.oauthbearer.assertion.private.key.file", Check::Any),
    (
        "sasl.oauthbearer.assertion.private.key.passphrase",
        Check::Any,
    ),
    ("sasl.oauthbearer.assertion.template.file", Check::Any),
    ("sasl.oauthbearer.scope.claim.name", Check::Any),
    ("sasl.oauthbearer.sub.claim.name", Check::Any),
    ("sasl.oauthbearer.token.endpoint.url", Check::Any),
    ("sasl.oauthbearer.jwks.endpoint.url", Check::Any),
    (
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    (
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    (
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        Check::Long(i64::MIN, i64::MAX),
    ),
    (
        "sasl.oauthbearer.clock.skew.seconds",
        Check::Int(i32::MIN, i32::MAX),
    ),
    ("sasl.oauthbearer.expected.audience", Check::Any),
    ("sasl.oauthbearer.expected.issuer", Check::Any),
    ("sasl.oauthbearer.header.urlencode", Check::Bool),
];

/// Java producer keys that have no effect in kacrab. They are accepted, so a properties file
/// written for the Java client loads unchanged, and their values are checked as Java checks them.
///
/// - `key.serializer`, `value.serializer`: kacrab takes bytes; serialization is the caller's.
/// - `send.buffer.bytes`, `receive.buffer.bytes`: socket buffers are left to the kernel.
/// - `partitioner.adaptive.partitioning.enable`, `partitioner.availability.timeout.ms`: the
///   built-in partitioner does not weigh partitions by queue length.
/// - `socket.connection.setup.timeout.max.ms`: the setup timeout does not grow per attempt.
/// - `client.dns.lookup`: every resolved address is tried (Java's default, `use_all_dns_ips`).
/// - `enable.metrics.push`, `metrics.sample.window.ms`, `metrics.num.samples`,
///   `metrics.recording.level`, `metric.reporters`: no Java metrics subsystem.
/// - `ssl.provider`, `ssl.keymanager.algorithm`, `ssl.trustmanager.algorithm`,
///   `ssl.secure.random.implementation`: names of Java security providers and algorithms; TLS
///   runs on rustls with the `ring` provider and the operating system's random source.
/// - `ssl.engine.factory.class`, `security.providers`, `config.providers`,
///   `sasl.client.callback.handler.class`, `sasl.login.callback.handler.class`,
///   `sasl.login.class`: accepted only empty (Java's default). They name Java classes that
///   would replace the TLS engine, the security providers, the source of configuration values
///   or the SASL login; kacrab has none of these hooks, so a value is refused rather than
///   silently not run.
/// - `sasl.kerberos.*`: settings of the GSSAPI mechanism, which `sasl.mechanism` refuses, so
///   they can have no effect.
/// - `sasl.login.refresh.*`, `sasl.login.connect.timeout.ms`, `sasl.login.read.timeout.ms`,
///   `sasl.login.retry.backoff.ms`, `sasl.login.retry.backoff.max.ms`, `sasl.oauthbearer.*`
///   (including the `jwt.retriever.class` and `jwt.validator.class` class names): settings of
///   Java's built-in OAUTHBEARER login (Java applies the login refresh to OAUTHBEARER only:
///   fetching tokens from a token endpoint, refreshing them, validating them against a JWKS).
///   kacrab's OAUTHBEARER takes its tokens from the application's token provider
///   (`ProducerBuilder::oauth_token_provider`), which does that work, so these have no effect.
pub fn ignored_keys() -> impl Iterator<Item = &'static str> {
    IGNORED.iter().map(|(key, _)| *key)
}

pub(super) fn ignored_check(key: &str) -> Option<Check> {
    IGNORED
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, check)| *check)
}

/// The text appended to an unknown-key error: a close known key, or why a family of Java keys
/// does not apply.
pub(super) fn unknown_key_hint(key: &str) -> String {
    if key.starts_with("ssl.") {
        return "; of the TLS settings kacrab reads PEM stores (`ssl.truststore.*`, \
                `ssl.keystore.*`), `ssl.endpoint.identification.algorithm`, `ssl.protocol`, \
                `ssl.enabled.protocols` and `ssl.cipher.suites`"
            .to_string();
    }
    if key.starts_with("sasl.") {
        return "; of the SASL settings kacrab reads only `sasl.mechanism` and \
                `sasl.jaas.config` (Java's GSSAPI settings and its built-in OAUTHBEARER login's \
                settings are accepted and have no effect; OAUTHBEARER tokens come from the \
                application's token provider)"
            .to_string();
    }
    match closest_key(key) {
        Some(known) => format!("; did you mean `{known}`?"),
        None => String::new(),
    }
}

fn closest_key(key: &str) -> Option<&'static str> {
    let wanted = key.to_ascii_lowercase();
    // Up to one edit in four characters, at most three: catches typos and `_`/`-` for `.`
    // without pairing unrelated short names.
    let limit = (wanted.len() / 4).clamp(1, 3);
    RECOGNIZED
        .iter()
        .copied()
        .chain(ignored_keys())
        .map(|known| (edit_distance(&wanted, known), known))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, known)| known)
}

/// Levenshtein distance over bytes; keys are ASCII.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("linger.ms", "linger.ms"), 0);
        assert_eq!(edit_distance("lingr.ms", "linger.ms"), 1);
        assert_eq!(edit_distance("linger_ms", "linger.ms"), 1);
        assert_eq!(edit_distance("", "acks"), 4);
    }

    #[test]
    fn suggestions_pick_the_close_key_only() {
        assert_eq!(closest_key("lingr.ms"), Some(LINGER_MS));
        assert_eq!(closest_key("Linger.MS"), Some(LINGER_MS));
        assert_eq!(closest_key("ack"), Some(ACKS));
        assert_eq!(closest_key("batch_size"), Some(BATCH_SIZE));
        assert_eq!(closest_key("fetch.min.bytes"), None);
    }

    #[test]
    fn key_tables_do_not_overlap() {
        for key in ignored_keys() {
            assert!(
                !RECOGNIZED.contains(&key),
                "{key} is both recognized and ignored"
            );
        }
    }
}
