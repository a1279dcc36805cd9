//! Testing your own service against kacrab's reference cluster: three brokers in this process
//! that follow Kafka's producer rules, a fault injected while the service sends, the log read
//! back, and the transaction coordinator's view.
//!
//! `cargo run --features testkit --example reference_cluster`

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::batch::decode_records;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord};
use kafka_protocol::messages::ApiKey;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Brokers 1, 2 and 3 on ephemeral ports; `orders` has 3 partitions led by 1, 2 and 3.
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic("orders", &[1, 2, 3]);

    // The service under test: here, a transactional producer.
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("transactional.id", "order-service")
        .build()?;
    producer.init_transactions(Duration::from_secs(10))?;

    // A fault while it runs: broker 1 appends the next Produce request and loses its answer,
    // so the producer must retry without writing the records twice.
    cluster
        .faults()
        .drop_response_after_append(1, ApiKey::Produce, 1);
    producer.begin_transaction()?;
    let futures: Vec<_> = (0..10)
        .map(|i| {
            producer.send(
                ProducerRecord::new("orders", Bytes::from(format!("order-{i}"))).with_partition(0),
            )
        })
        .collect();
    producer.commit_transaction(Duration::from_secs(10))?;
    for future in futures {
        future.wait()?;
    }

    // The log as the broker holds it: each record once, then the commit marker.
    cluster.with_cluster(|c| -> Result<(), Box<dyn std::error::Error>> {
        for batch in c.partition_log("orders", 0) {
            if batch.control {
                println!("offset {}: transaction marker", batch.base_offset);
                continue;
            }
            for record in decode_records(&batch.bytes)? {
                let value = record.value.unwrap_or_default();
                println!(
                    "offset {}: {} (producer {} epoch {} sequence {})",
                    batch.base_offset + record.offset_delta as i64,
                    String::from_utf8_lossy(&value),
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence + record.offset_delta,
                );
            }
        }
        // The coordinator's view of the transactional id.
        if let Some(txn) = c.transaction_metadata("order-service") {
            println!(
                "coordinator: producer {} epoch {}, {:?}",
                txn.producer_id, txn.producer_epoch, txn.state
            );
        }
        Ok(())
    })?;
    producer.close(Duration::from_secs(10));
    Ok(())
}
