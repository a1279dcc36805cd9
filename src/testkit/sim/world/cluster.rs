//! What a test does to the brokers, the network and the partitions: take a broker down, cut
//! the producer off from one, release held answers, move a leader, truncate a partition, or
//! forget a producer's state there.

use super::*;

impl Sim {
    /// Releases every held answer: each is delivered after one latency, in order.
    pub fn release_held(&mut self) {
        let mut wake = Vec::new();
        for (&id, conn) in self.conns.iter_mut() {
            let mut released = false;
            for answer in conn.answers.iter_mut() {
                if answer.ready_at.is_none() {
                    answer.ready_at = Some(self.now + self.setup.latency.1);
                    released = true;
                }
            }
            if released {
                wake.push((id, self.now + self.setup.latency.1));
            }
        }
        wake.sort_unstable();
        for (id, at) in wake {
            self.schedule(at, Event::Deliver(id));
        }
    }

    /// Takes a broker down: its connections are reset, connection attempts fail, until
    /// [`broker_up`](Self::broker_up).
    pub fn broker_down(&mut self, broker: i32) {
        self.shared.cluster().set_broker_up(broker, false);
        self.quiet_on_broker_down(broker);
        let mut ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.broker == broker && !c.is_closed())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.close_by_broker(id);
        }
    }

    /// Takes a broker down as a machine that lost power or network does: its connections are
    /// reset, and its address no longer answers, so a connection attempt hangs (no refusal)
    /// until the client's `socket.connection.setup.timeout.ms` ends it. Until
    /// [`broker_up`](Self::broker_up).
    pub fn broker_unreachable(&mut self, broker: i32) {
        self.broker_down(broker);
        self.cut_off_from(broker, true);
    }

    pub fn broker_up(&mut self, broker: i32) {
        self.cut_off_from(broker, false);
        self.broker_down_until.remove(&broker);
        self.shared.cluster().set_broker_up(broker, true);
        self.quiet_on_broker_up(broker);
    }

    pub fn is_broker_up(&self, broker: i32) -> bool {
        self.shared.cluster().is_broker_up(broker)
    }

    pub(crate) fn set_broker_down_until(&mut self, broker: i32, until: Micros) {
        self.broker_down_until.insert(broker, until);
    }

    pub(crate) fn brokers_down(&self) -> Vec<i32> {
        let mut down: Vec<i32> = self.broker_down_until.keys().copied().collect();
        down.sort_unstable();
        down
    }

    /// Moves a partition's leadership (the engine learns by NOT_LEADER_OR_FOLLOWER).
    pub fn set_leader(&mut self, tp: &TopicPartition, broker: i32) {
        self.shared
            .cluster()
            .set_leader(&tp.topic, tp.partition, broker);
        self.quiet_on_leader_move(tp);
    }

    pub fn leader(&self, tp: &TopicPartition) -> i32 {
        self.shared
            .cluster()
            .leader(&tp.topic, tp.partition)
            .expect("known partition")
            .0
    }

    /// Retention (or DeleteRecords) up to the log end: the log is read first, so the checker
    /// has seen every batch that goes.
    pub fn truncate_partition(&mut self, tp: &TopicPartition) {
        self.observe_logs();
        let mut cluster = self.shared.cluster();
        let end = cluster
            .high_watermark(&tp.topic, tp.partition)
            .expect("known partition");
        cluster.truncate_log_start(&tp.topic, tp.partition, end);
        self.log_bytes_seen = cluster.log_bytes();
    }

    /// Forgets the producer's state on one partition (an unclean broker-side loss).
    pub fn remove_producer_state(&mut self, tp: &TopicPartition) -> bool {
        let producer_id = self.coordinator.current().producer_id;
        self.shared
            .cluster()
            .remove_producer_state(&tp.topic, tp.partition, producer_id)
    }

    /// Whether the partition's owner has nothing stamped and unfinished, nothing on the wire,
    /// and no earlier attempt of its batches is still travelling to a broker: dropping
    /// broker-side producer state then cannot turn an old attempt into a duplicate.
    pub fn partition_quiet(&self, tp: &TopicPartition) -> bool {
        let engine = &self.shards[self.shard_of(tp)].engine;
        if let Some(slot) = engine.partition(tp) {
            if slot.entry.has_inflight_batches() || slot.on_wire > 0 {
                return false;
            }
        }
        if self.quiet_holds_request_for(tp) {
            return false;
        }
        !self.events.iter().any(|e| match &e.event {
            Event::Request { conn, frame, .. } => {
                let live = self.conns.get(conn).is_some_and(|c| {
                    matches!(c.state, ConnState::Open | ConnState::ClosedByClient)
                });
                live && produce_request_carries(frame, tp)
            }
            _ => false,
        })
    }

    /// A network partition between the producer and a broker that stays up (it still serves
    /// other clients and keeps its roles, a coordinator's included): while `cut`, a new
    /// connection attempt to it hangs until the engine's `socket.connection.setup.timeout.ms`
    /// ends it. Open connections are left alone.
    pub fn cut_off_from(&mut self, broker: i32, cut: bool) {
        if cut {
            self.unreachable.insert(broker);
        } else {
            self.unreachable.remove(&broker);
        }
    }
}
