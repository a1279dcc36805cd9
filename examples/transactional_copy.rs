//! A consume-transform-produce loop with exactly-once semantics: each batch of input records
//! is transformed and written in a transaction together with the input offsets it consumed,
//! so that the output and the consumer group's position commit or abort together. An
//! abortable error aborts the transaction and the batch is processed again from the last
//! committed position; a fenced or fatal error ends the loop (another instance took over).
//!
//! The input here is an in-memory stand-in for a consumer (kacrab is a producer). `cargo run
//! --features testkit --example transactional_copy` runs it against a reference cluster in
//! this process, with one commit made to fail on the way.

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::{error_codes, BrokerRules};
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{
    GroupMetadata, OffsetAndMetadata, Producer, ProducerRecord, TopicPartition, TransactionError,
};
use kafka_protocol::messages::ApiKey;

const BATCH: usize = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    // The input topic exists too: a group's offsets are committed for partitions the cluster
    // has.
    cluster.create_topic("orders", &[1]);
    cluster.create_topic("orders-enriched", &[1, 2, 3]);
    let input: Vec<String> = (0..500).map(|i| format!("order-{i}")).collect();
    let source = TopicPartition {
        topic: "orders".into(),
        partition: 0,
    };
    let group = GroupMetadata::new("enricher");

    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("transactional.id", "enricher-0")
        .build()?;
    let timeout = Duration::from_secs(30);
    // Fences any earlier instance with the same id and settles what it left open.
    producer.init_transactions(timeout)?;

    // One EndTxn answered with an abortable error, to show the retry path.
    cluster.faults().inject_error(
        kacrab::testkit::server::ANY_BROKER,
        ApiKey::EndTxn,
        error_codes::TRANSACTION_ABORTABLE,
        1,
    );

    // The position committed with the last transaction: where a restart would resume.
    let mut committed = 0usize;
    let mut aborted = 0;
    while committed < input.len() {
        let batch = &input[committed..(committed + BATCH).min(input.len())];
        producer.begin_transaction()?;
        for value in batch {
            let enriched = format!("{value} (enriched)");
            // No need to read each future (dropping it does not withdraw the record): the
            // commit fails if any record of the transaction failed.
            drop(
                producer.send(
                    ProducerRecord::new("orders-enriched", Bytes::from(enriched))
                        .with_key(value.clone()),
                ),
            );
        }
        let next = committed + batch.len();
        producer.send_offsets_to_transaction(
            [(source.clone(), OffsetAndMetadata::new(next as i64))],
            &group,
            timeout,
        )?;
        match producer.commit_transaction(timeout) {
            Ok(()) => committed = next,
            Err(e) if e.is_abortable() => {
                // Nothing of this batch is visible to read_committed readers; do it again.
                producer.abort_transaction(timeout)?;
                aborted += 1;
            }
            Err(e @ (TransactionError::Fenced(_) | TransactionError::Fatal(_))) => {
                producer.close(Duration::ZERO);
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    println!(
        "{} records copied in {} committed transactions ({aborted} aborted and done again)",
        input.len(),
        input.len().div_ceil(BATCH)
    );
    producer.close(timeout);
    Ok(())
}
