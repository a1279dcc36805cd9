//! Producer state rebuilt from a snapshot: what a partition leader remembers after a broker
//! restart, or after leadership moves to a replica that restarted.
//!
//! Kafka writes a producer snapshot at the log end on clean shutdown (and at every segment
//! roll); a restarted broker loads the newest one (`UnifiedLog.loadProducerState`,
//! `ProducerStateManager.loadFromSnapshot`) and replays only the log after it. The model's
//! snapshot is always at the log end, so nothing is replayed: every producer keeps just the
//! last batch the snapshot stored, and a retry of an older batch that is in the log (one of the
//! five a running leader would have recognised) is answered OUT_OF_ORDER_SEQUENCE_NUMBER. A
//! replica that built its state by replication keeps all five; [`Cluster::set_leader`] models
//! that case.

use super::Cluster;

impl Cluster {
    /// Reloads one partition's producer state from a snapshot taken at its log end (see the
    /// module docs). `now_ms` is the broker clock: entries expired by
    /// `producer_id_expiration_ms` are not loaded. Returns how many entries changed.
    pub fn reload_producer_state_from_snapshot(
        &mut self,
        topic: &str,
        partition: i32,
        now_ms: i64,
    ) -> usize {
        let expiration_ms = self.rules.producer_id_expiration_ms;
        self.partition_mut(topic, partition).map_or(0, |p| {
            p.producers.reload_from_snapshot(now_ms, expiration_ms)
        })
    }

    /// A restart of `broker`: every partition it leads reloads its producer state from the
    /// snapshot. Returns the partitions reloaded.
    pub fn reload_broker_producer_state(&mut self, broker: i32, now_ms: i64) -> usize {
        let expiration_ms = self.rules.producer_id_expiration_ms;
        let mut reloaded = 0;
        for p in self
            .topics
            .values_mut()
            .flat_map(|t| t.partitions.iter_mut())
            .filter(|p| p.leader == broker)
        {
            p.producers.reload_from_snapshot(now_ms, expiration_ms);
            reloaded += 1;
        }
        reloaded
    }
}
