//! An async service on tokio that produces what it is asked to: each request is sent with
//! `send_async` (which waits for room or metadata without blocking a tokio worker) and its
//! delivery is awaited in the request's own task; the service shuts down by closing the
//! producer, which wakes every send still waiting and completes every record.
//!
//! `cargo run --features testkit --example tokio_service` runs it against a reference cluster
//! in this process; set `KAFKA_BOOTSTRAP` to run it against a real one (topic `events`).

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer, ProducerRecord};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A cluster of our own unless one is named.
    let (_cluster, bootstrap) = match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(bootstrap) => (None, bootstrap),
        Err(_) => {
            let cluster = ReferenceCluster::start(3, BrokerRules::default());
            cluster.create_topic("events", &[1, 2, 3]);
            let bootstrap = cluster.bootstrap_servers();
            (Some(cluster), bootstrap)
        }
    };
    let producer = Producer::builder()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "2")
        .set("max.block.ms", "5000")
        .build()?;

    // The service's requests: here, 1,000 of them from 10 concurrent tasks.
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..10u32 {
        let producer = producer.clone();
        tasks.spawn(async move {
            let mut written = 0u32;
            for request in 0..100u32 {
                let record =
                    ProducerRecord::new("events", Bytes::from(format!("{client}:{request}")))
                        .with_key(format!("client-{client}"));
                // Waits (without blocking the worker) for room or metadata, then queues it.
                let delivery = producer.send_async(record).await;
                match delivery.await {
                    Ok(_) => written += 1,
                    // Its promise: not in the log; a real service would answer its caller.
                    Err(e) if !e.is_outcome_unknown() => eprintln!("not written: {e}"),
                    // May be in the log (at most once): a real service would reconcile it.
                    Err(e) => eprintln!("outcome unknown: {e}"),
                }
            }
            written
        });
    }
    let mut written = 0;
    while let Some(done) = tasks.join_next().await {
        written += done?;
    }
    println!("{written} records written, each once");

    // Shutdown: `close` blocks, so it runs off the tokio workers. A send still waiting would
    // fail with `Closed` at once.
    let closing = producer.clone();
    tokio::task::spawn_blocking(move || closing.close(Duration::from_secs(10))).await?;
    let late = producer
        .send_async(ProducerRecord::new("events", "late"))
        .await;
    assert!(matches!(late.await, Err(ProduceError::Closed)));
    Ok(())
}
