//! A producer over `SASL_SSL`: TLS to the brokers, trusting a CA given as PEM, then SCRAM
//! authentication inside it, configured with the Java property names.
//!
//! `cargo run --features testkit --example tls_sasl` runs it against a reference cluster in
//! this process whose listeners present a certificate from a test CA and accept SCRAM-SHA-512.
//! Against a real cluster, put its CA's certificate in `ssl.truststore.certificates` (or a file
//! in `ssl.truststore.location`), and the user's credentials in `sasl.jaas.config`.

use std::time::Duration;

use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, SaslListener, TestCa, TlsListener, Validity};
use kacrab::{ProduceError, Producer, ProducerRecord};

const USER: &str = "alice";
const PASSWORD: &str = "alice-secret";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ca = TestCa::new("example CA");
    let server = ca.issue_server(&["localhost", "127.0.0.1"], Validity::Current);
    let cluster = ReferenceCluster::start_with_tls(
        3,
        BrokerRules::default(),
        TlsListener::new(&server),
        Some(SaslListener::new(&["SCRAM-SHA-512"]).user(USER, PASSWORD)),
    );
    cluster.create_topic("payments", &[1, 2, 3]);

    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{USER}\" password=\"{PASSWORD}\";"
    );
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("security.protocol", "SASL_SSL")
        .set("ssl.truststore.certificates", ca.certificate_pem())
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.jaas.config", jaas)
        .build()?;

    let deliveries: Vec<_> = (0..100)
        .map(|i| producer.send(ProducerRecord::new("payments", format!("payment-{i}"))))
        .collect();
    for delivery in deliveries {
        match delivery.wait() {
            Ok(_) => {}
            // A refused handshake or authentication stops the producer, and says why.
            Err(e @ (ProduceError::Tls { .. } | ProduceError::Authentication { .. })) => {
                return Err(e.into())
            }
            Err(e) => eprintln!("not written: {e}"),
        }
    }
    println!("100 records written over SASL_SSL");
    producer.close(Duration::from_secs(10));
    Ok(())
}
