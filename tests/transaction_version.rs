//! `kacrab.transaction.version` through the whole producer (configuration, shards, transaction
//! manager) against today's reference cluster, which finalizes no `transaction.version` and
//! speaks Produce up to v11: `auto` and `1` run Transactions V1, and `2` fails
//! `init_transactions` with a fatal error that names the key. The Transactions V2 wire rules
//! themselves are tested against the scripted broker (`tests/engine_transactions/tv2.rs`).
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Error, Producer, ProducerRecord, TransactionError};
use kafka_protocol::messages::ApiKey;

use common::{payload_ids, read_back, Isolation};

const CALL: Duration = Duration::from_secs(30);
const READ: Duration = Duration::from_secs(30);

/// A cluster as the module doc describes it: no finalized `transaction.version` and the TV1
/// versions only (Produce v11, EndTxn v4, TxnOffsetCommit v4), as a Kafka 3.x broker.
fn cluster() -> ReferenceCluster {
    let rules = BrokerRules {
        transaction_version: 0,
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(1, rules);
    cluster.set_api_versions(None, ApiKey::Produce, Some((3, 11)));
    cluster.set_api_versions(None, ApiKey::EndTxn, Some((0, 4)));
    cluster.set_api_versions(None, ApiKey::TxnOffsetCommit, Some((0, 4)));
    cluster.create_topic("t", &[1, 1]);
    cluster
}

/// Commits one transaction of two records and reads them back under read_committed.
fn commit_two(cluster: &ReferenceCluster, version: &str) {
    let id = format!("tx-{version}");
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("transactional.id", id.as_str()),
            ("kacrab.transaction.version", version),
        ],
    );
    producer.init_transactions(CALL).expect("init");
    producer.begin_transaction().expect("begin");
    let sent: Vec<_> = (0..2u64)
        .map(|i| {
            producer.send(
                ProducerRecord::new("t", Bytes::from(i.to_be_bytes().to_vec()))
                    .with_partition(i as i32),
            )
        })
        .collect();
    producer.commit_transaction(CALL).expect("commit");
    for future in sent {
        future.wait().expect("delivered");
    }
    producer.close(CALL);
    let records = read_back(
        &cluster.bootstrap_servers(),
        "t",
        2,
        Isolation::ReadCommitted,
        READ,
    );
    assert_eq!(payload_ids(&records), vec![vec![0], vec![1]], "{version}");
}

#[test]
fn transaction_version_auto_commits_against_a_cluster_without_tv2() {
    let cluster = cluster();
    commit_two(&cluster, "auto");
}

#[test]
fn transaction_version_1_commits_against_a_cluster_without_tv2() {
    let cluster = cluster();
    commit_two(&cluster, "1");
}

#[test]
fn transaction_version_2_against_a_cluster_without_tv2_fails_init_naming_the_key() {
    let cluster = cluster();
    let producer = common::kacrab_producer(
        &cluster.bootstrap_servers(),
        &[
            ("transactional.id", "tx-forced"),
            ("kacrab.transaction.version", "2"),
        ],
    );
    let err = producer.init_transactions(CALL).unwrap_err();
    assert!(matches!(err, TransactionError::Fatal(_)), "{err:?}");
    assert!(
        err.to_string().contains("kacrab.transaction.version"),
        "{err}"
    );
    assert!(producer.begin_transaction().is_err());
    producer.close(CALL);
}

#[test]
fn a_forced_transaction_version_without_a_transactional_id_is_a_config_error() {
    let built = Producer::builder()
        .set("bootstrap.servers", "127.0.0.1:9092")
        .set("kacrab.transaction.version", "2")
        .build();
    match built {
        Err(Error::Config(err)) => {
            assert_eq!(
                err.keys(),
                vec!["kacrab.transaction.version", "transactional.id"]
            );
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("built"),
    }
    let bad = Producer::builder()
        .set("bootstrap.servers", "127.0.0.1:9092")
        .set("transactional.id", "t")
        .set("kacrab.transaction.version", "3")
        .build();
    assert!(
        matches!(&bad, Err(Error::Config(e)) if e.keys() == vec!["kacrab.transaction.version"]),
        "{:?}",
        bad.err()
    );
}
