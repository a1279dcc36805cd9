//! The Java client (kafka-clients 3.9.1, JDK 17) as an independent judge of the reference
//! cluster's TLS and SASL listeners: it produces over `SASL_SSL` with SCRAM-SHA-512 and over
//! `SSL` with a client certificate from a PEM keystore and reads every record back over the
//! same listener, and librdkafka's consumer reads them back too, on the brokers' plaintext
//! listeners: once each and in order. Two clients we did not write agree with the listeners
//! kacrab's TLS and SASL tests run against. The Java consumer also reads back kacrab's own
//! batches in each of the four codecs.
//!
//! Needs `javac` and `java` on the PATH (`.ci/run` installs a JDK where it is missing) and the
//! jars in [`JARS`]: from `KACRAB_JAVA_LIB` (a folder holding them), else fetched once from
//! PyPI by `benches/peers/java/fetch-jars.sh` into the target folder.
#![cfg(feature = "testkit")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, SaslListener, TestCa, TlsListener, Validity};
use kacrab::ProducerRecord;

use common::temp_file::TempFile;
use common::{assert_read_back_exactly_once, check_exactly_once};

const PARTITIONS: i32 = 3;
const COUNT: u64 = 3_000;
const USER: &str = "judge";
const PASSWORD: &str = "judge-pa55";
/// kafka-clients, its logging API, and the codec libraries it loads for snappy, lz4 and zstd.
const JARS: [&str; 5] = [
    "kafka-clients.jar",
    "slf4j-api.jar",
    "snappy-java.jar",
    "lz4-java.jar",
    "zstd-jni.jar",
];

/// The classpath of the compiled judge, built once per test binary.
fn java_classpath() -> &'static str {
    static CLASSPATH: OnceLock<String> = OnceLock::new();
    CLASSPATH.get_or_init(|| {
        let javac = Command::new("javac").arg("-version").output();
        assert!(
            javac.map(|o| o.status.success()).unwrap_or(false),
            "javac is not on the PATH: install a JDK (Debian: openjdk-17-jdk-headless)"
        );
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("java-judge");
        let lib = match std::env::var_os("KACRAB_JAVA_LIB") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let lib = work.join("lib");
                if !JARS.iter().all(|jar| lib.join(jar).exists()) {
                    let status = Command::new("bash")
                        .arg(manifest.join("benches/peers/java/fetch-jars.sh"))
                        .arg(&lib)
                        .status()
                        .expect("run fetch-jars.sh");
                    assert!(status.success(), "fetch-jars.sh failed");
                }
                lib
            }
        };
        let jars: Vec<String> = JARS
            .iter()
            .map(|j| lib.join(j).to_string_lossy().into_owned())
            .collect();
        let classes = work.join("classes");
        std::fs::create_dir_all(&classes).expect("a folder for the classes");
        let status = Command::new("javac")
            .args(["-d", &classes.to_string_lossy(), "-cp", &jars.join(":")])
            .arg(manifest.join("tests/java/JudgeProducer.java"))
            .arg(manifest.join("tests/java/JudgeConsumer.java"))
            .status()
            .expect("run javac");
        assert!(status.success(), "javac failed");
        format!("{}:{}", classes.to_string_lossy(), jars.join(":"))
    })
}

/// Runs the judge's `class` with `args` and the security `properties` (a properties file);
/// returns its output. Panics with its output unless it exits with status 0.
fn run_java(class: &str, args: &[&str], properties: &str) -> String {
    let file = TempFile::new(&format!("{class}-{}.properties", args[1]), properties);
    let output = Command::new("java")
        .args(["-Xmx256m", "-cp", java_classpath(), class])
        .args(args)
        .arg(file.path())
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{class} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The Java producer sends `COUNT` records to `topic` through `bootstrap`; panics unless
/// every one was acknowledged.
fn java_produce(bootstrap: &str, topic: &str, properties: &str) {
    let partitions = PARTITIONS.to_string();
    let count = COUNT.to_string();
    let report = run_java(
        "JudgeProducer",
        &[bootstrap, topic, &partitions, &count],
        properties,
    );
    assert_eq!(report.trim(), format!("acked {COUNT} of {COUNT}"));
}

/// The Java consumer reads `topic` back through `bootstrap` (the same secured listener the
/// producer used) and every id is checked as librdkafka's read is.
fn assert_java_reads_back_once(bootstrap: &str, topic: &str, properties: &str) {
    let lines = run_java("JudgeConsumer", &[bootstrap, topic], properties);
    let mut ids: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS as usize];
    let mut last_offset: Vec<Option<i64>> = vec![None; PARTITIONS as usize];
    for line in lines.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [partition, offset, id] = fields[..] else {
            panic!("an unexpected line from the Java consumer: {line}");
        };
        let partition: usize = partition.parse().expect("partition");
        let offset: i64 = offset.parse().expect("offset");
        assert!(
            last_offset[partition].is_none_or(|last| offset > last),
            "partition {partition}: offset {offset} not after the one before"
        );
        last_offset[partition] = Some(offset);
        ids[partition].push(id.parse().expect("id"));
    }
    let sent: Vec<u64> = (0..COUNT).collect();
    let verdict = check_exactly_once(&ids, &sent, &sent);
    assert!(
        verdict.starts_with(&format!("{COUNT} records read")),
        "the Java consumer: {verdict}"
    );
}

/// Reads `topic` back with librdkafka on the plaintext listeners and checks that every id
/// the Java producer sent is there once, in order.
fn assert_read_back_once(cluster: &ReferenceCluster, topic: &str, extra: &[(&str, &str)]) {
    let bootstrap = cluster.plaintext_bootstrap_servers();
    assert_read_back_exactly_once(&bootstrap, topic, PARTITIONS, COUNT, extra);
}

fn tls_cluster(listener: TlsListener, sasl: Option<SaslListener>, topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start_with_tls(3, BrokerRules::default(), listener, sasl);
    cluster.create_topic(topic, &[1, 2, 3]);
    cluster
}

#[test]
fn the_java_client_produces_over_sasl_ssl_with_scram_sha_512_and_every_record_reads_back_once() {
    let topic = "judge-sasl-ssl";
    let ca = TestCa::new("judge CA");
    let server = ca.issue_server(&["localhost", "127.0.0.1"], Validity::Current);
    let sasl = SaslListener::new(&["PLAIN", "SCRAM-SHA-512"]).user(USER, PASSWORD);
    let cluster = tls_cluster(TlsListener::new(&server), Some(sasl), topic);
    let truststore = TempFile::new("judge-ca.pem", &ca.certificate_pem());
    let properties = format!(
        "security.protocol=SASL_SSL\n\
         ssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n\
         sasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{USER}\" password=\"{PASSWORD}\";\n",
        truststore.path()
    );
    java_produce(&cluster.bootstrap_servers(), topic, &properties);
    assert_java_reads_back_once(&cluster.bootstrap_servers(), topic, &properties);
    let stats = cluster.stats();
    assert!(stats.authentications_succeeded("SCRAM-SHA-512") >= 1);
    assert_eq!(stats.authentications_failed("SCRAM-SHA-512"), 0);
    let handshakes: u64 = (1..=3).map(|b| stats.tls_handshakes_succeeded(b)).sum();
    assert!(handshakes >= 1, "the Java client authenticated without TLS");
    assert_read_back_once(
        &cluster,
        topic,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", USER),
            ("sasl.password", PASSWORD),
        ],
    );
}

/// A cluster whose TLS listeners require a client certificate from the returned authority.
fn client_certificate_cluster(topic: &str) -> (ReferenceCluster, TestCa) {
    let ca = TestCa::new("judge CA");
    let server = ca.issue_server(&["localhost", "127.0.0.1"], Validity::Current);
    let listener = TlsListener::requiring_client_certificates(&server, &ca);
    (tls_cluster(listener, None, topic), ca)
}

#[test]
fn the_java_client_presents_a_pem_client_certificate_over_ssl_and_every_record_reads_back_once() {
    let topic = "judge-ssl-client-cert";
    let (cluster, ca) = client_certificate_cluster(topic);
    let truststore = TempFile::new("judge-client-ca.pem", &ca.certificate_pem());
    let keystore = TempFile::new(
        "judge-keystore.pem",
        &ca.issue_client("judge-producer").combined_pem(),
    );
    let properties = format!(
        "security.protocol=SSL\n\
         ssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n\
         ssl.keystore.type=PEM\n\
         ssl.keystore.location={}\n",
        truststore.path(),
        keystore.path()
    );
    java_produce(&cluster.bootstrap_servers(), topic, &properties);
    assert_java_reads_back_once(&cluster.bootstrap_servers(), topic, &properties);
    let stats = cluster.stats();
    let handshakes: u64 = (1..=3).map(|b| stats.tls_handshakes_succeeded(b)).sum();
    assert!(handshakes >= 1, "no TLS session was made");
    assert_eq!(
        (1..=3).map(|b| stats.tls_handshakes_failed(b)).sum::<u64>(),
        0,
        "a handshake failed"
    );
    assert_read_back_once(&cluster, topic, &[]);
}

// The refusal side of the same listener: the Java client without a certificate is refused
// (its send fails), so the passing test above is the certificate's doing.
#[test]
fn the_java_client_without_a_client_certificate_is_refused_by_a_listener_that_requires_one() {
    let topic = "judge-ssl-no-cert";
    let (cluster, ca) = client_certificate_cluster(topic);
    let truststore = TempFile::new("judge-nocert-ca.pem", &ca.certificate_pem());
    let properties = format!(
        "security.protocol=SSL\n\
         ssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n\
         max.block.ms=5000\n",
        truststore.path()
    );
    let file = TempFile::new("judge-nocert.properties", &properties);
    let output = Command::new("java")
        .args(["-Xmx256m", "-cp", java_classpath(), "JudgeProducer"])
        .args([&cluster.bootstrap_servers(), topic, "3", "10"])
        .arg(file.path())
        .output()
        .expect("run java");
    assert!(
        !output.status.success(),
        "the Java client was accepted without a certificate: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let failed: u64 = (1..=3)
        .map(|b| cluster.stats().tls_handshakes_failed(b))
        .sum();
    assert!(failed >= 1, "no handshake was refused");
}

// kacrab's own batches, judged by the Java consumer: over SASL_SSL with SCRAM-SHA-512, in each
// of the four codecs, every record kacrab had acknowledged reads back once and in order (the
// Java consumer checks every batch's CRC and decompresses it with its own codecs).
#[test]
fn the_java_consumer_reads_back_kacrab_batches_in_every_codec_over_sasl_ssl() {
    let ca = TestCa::new("judge CA");
    let server = ca.issue_server(&["localhost", "127.0.0.1"], Validity::Current);
    let sasl = SaslListener::new(&["PLAIN", "SCRAM-SHA-512"]).user(USER, PASSWORD);
    let cluster = ReferenceCluster::start_with_tls(
        3,
        BrokerRules::default(),
        TlsListener::new(&server),
        Some(sasl),
    );
    let ca_pem = ca.certificate_pem();
    let truststore = TempFile::new("judge-codecs-ca.pem", &ca_pem);
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{USER}\" password=\"{PASSWORD}\";"
    );
    let properties = format!(
        "security.protocol=SASL_SSL\n\
         ssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n\
         sasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config={jaas}\n",
        truststore.path()
    );
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("judge-kacrab-{codec}");
        cluster.create_topic(&topic, &[1, 2, 3]);
        let producer = common::kacrab_producer(
            &cluster.bootstrap_servers(),
            &[
                ("security.protocol", "SASL_SSL"),
                ("ssl.truststore.certificates", &ca_pem),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.jaas.config", &jaas),
                ("compression.type", codec),
            ],
        );
        let deliveries: Vec<_> = (0..COUNT)
            .map(|id| {
                // Redundant values, so that every codec has something to compress.
                let mut value = id.to_be_bytes().to_vec();
                value.extend_from_slice(format!("record {id:08} of the {codec} run").as_bytes());
                producer.send(
                    ProducerRecord::new(topic.as_str(), Bytes::from(value))
                        .with_partition((id % PARTITIONS as u64) as i32),
                )
            })
            .collect();
        for delivery in deliveries {
            delivery
                .wait_timeout(Duration::from_secs(30))
                .expect("the record resolves")
                .expect("acknowledged");
        }
        producer.close(Duration::from_secs(5));
        assert_java_reads_back_once(&cluster.bootstrap_servers(), &topic, &properties);
    }
}
