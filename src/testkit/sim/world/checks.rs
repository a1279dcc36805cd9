//! What the world checks as it runs: the log as the checker reads it, each engine's
//! completions, invariants and bounds after it ran, and the state at the end.

use super::*;

impl Sim {
    pub(super) fn observe_logs(&mut self) {
        let cluster = self.shared.cluster();
        // Every append adds bytes and nothing else removes any (retention is only applied by
        // `truncate_partition`, which reads the log first), so an unchanged total means no
        // new batch.
        let total = cluster.log_bytes();
        if total == self.log_bytes_seen {
            return;
        }
        self.log_bytes_seen = total;
        for (i, tp) in self.partitions.iter().enumerate() {
            let end = cluster
                .high_watermark(&tp.topic, tp.partition)
                .expect("known partition");
            self.checker
                .observe_log(i, cluster.partition_log(&tp.topic, tp.partition), end);
        }
    }

    /// Completions, invariants and bounds after the shard's engine ran.
    pub(super) fn after_engine_event(&mut self, shard: usize) {
        let completions: Vec<Completion> = std::mem::take(&mut *self.completions.borrow_mut());
        for (id, result) in completions {
            self.checker.on_result(id, &result, self.now);
            let (payload, upper) = self.record_sizes[id as usize];
            self.memory
                .records
                .fetch_sub(payload as usize, std::sync::atomic::Ordering::Relaxed);
            let partition = self.checker.partition_of(id);
            let owner = self.shard_of[partition];
            let s = &mut self.shards[owner];
            s.outstanding_upper -= upper as usize;
            s.outstanding_records -= 1;
            self.results[id as usize] = Some(result);
        }
        self.checker.check_deadlines(self.now);
        let s = &self.shards[shard];
        s.engine.assert_invariants();
        // Memory: queued batches hold only unresolved records, so their bytes are bounded by
        // those records' encoded size plus one batch header each.
        let mut queued_bytes = 0usize;
        let mut queued_batches = 0usize;
        for (i, tp) in self.partitions.iter().enumerate() {
            if self.shard_of[i] != shard {
                continue;
            }
            if let Some(slot) = s.engine.partition(tp) {
                for batch in &slot.deque {
                    queued_bytes += batch.size_in_bytes();
                    queued_batches += 1;
                    assert!(
                        batch.record_count > 0 && !batch.records.is_empty(),
                        "{tp}: an empty batch is queued"
                    );
                }
            }
        }
        assert!(
            queued_batches <= s.outstanding_records,
            "shard {shard}: {queued_batches} batches queued for {} unresolved records",
            s.outstanding_records
        );
        assert!(
            queued_bytes <= s.outstanding_upper + RECORD_BATCH_OVERHEAD * queued_batches,
            "shard {shard}: {queued_bytes} bytes queued for {} bytes of unresolved records",
            s.outstanding_upper
        );
        for conn in self.conns.values() {
            if conn.engine == shard && conn.state == ConnState::Open {
                assert!(
                    conn.in_transit + conn.answers.len() <= s.engine.config().max_in_flight + 3,
                    "shard {shard}: {} requests outstanding on one connection",
                    conn.in_transit + conn.answers.len()
                );
            }
        }
    }

    /// A readable picture of the engines' partition state and the last traced requests, for
    /// failure reports.
    pub fn debug_dump(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "at {} us, identity {:?}",
            self.now,
            self.coordinator.current()
        );
        for (i, shard) in self.shards.iter().enumerate() {
            let e = &shard.engine;
            let _ = writeln!(
                out,
                "shard {i}: identity {:?} fatal {:?} {:?} nodes {:?} topics {:?}",
                e.identity(),
                e.fatal_error(),
                e.stats(),
                e.metadata().nodes.keys().collect::<Vec<_>>(),
                e.metadata().topics
            );
        }
        for (id, c) in &self.conns {
            let _ = writeln!(
                out,
                "conn {id}: shard {} node {} gen {} broker {} {:?} in_transit {} answers {}",
                c.engine,
                c.node,
                c.generation,
                c.broker,
                c.state,
                c.in_transit,
                c.answers.len()
            );
        }
        for (i, tp) in self.partitions.iter().enumerate() {
            let shard = self.shard_of[i];
            let engine = &self.shards[shard].engine;
            let _ = writeln!(out, "{tp} (shard {shard}, leader {})", self.leader(tp));
            if let Some(slot) = engine.partition(tp) {
                let _ = writeln!(
                    out,
                    "  entry {:?}\n  leader {:?} unresolved {:?} rewrite {} on_wire {}",
                    slot.entry,
                    slot.leader,
                    slot.unresolved_sequence,
                    slot.rewrite_pending,
                    slot.on_wire
                );
                for b in &slot.deque {
                    let _ = writeln!(
                        out,
                        "  queued {:?} n={} attempts={} unknown={} expired={} created={}",
                        b.stamp,
                        b.record_count,
                        b.attempts,
                        b.outcome_unknown,
                        b.expired,
                        b.created
                    );
                }
            }
        }
        if let Some(trace) = &self.trace {
            let keep = std::env::var("KACRAB_SIM_DEBUG_TRACE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(60);
            for t in trace.iter().rev().take(keep).rev() {
                let _ = writeln!(
                    out,
                    "req shard {} conn {} -> b{} w{} s{:?} a{:?} {:?} {:?} -> {:?}",
                    t.engine,
                    t.connection,
                    t.broker,
                    t.written_at,
                    t.served_at,
                    t.answered_at,
                    t.fault,
                    t.batches
                        .iter()
                        .map(|b| format!(
                            "{}:{}/{}@{}+{}",
                            b.tp,
                            b.producer.producer_id,
                            b.producer.epoch,
                            b.base_sequence,
                            b.record_count
                        ))
                        .collect::<Vec<_>>(),
                    t.answers
                );
            }
        }
        out
    }

    /// Final checks of a run: nothing pending anywhere.
    pub fn check_end(&mut self) {
        self.observe_logs();
        self.checker.check_all_resolved();
        for (i, s) in self.shards.iter().enumerate() {
            assert!(
                s.engine.is_idle(),
                "shard {i}: batches left after every send resolved"
            );
            s.engine.assert_invariants();
        }
        // Every batch is gone, so is every charge it held (`engine::batch_memory`).
        assert_eq!(
            self.batch_charged_bytes(),
            0,
            "batch charges left on buffer.memory after every batch completed"
        );
    }
}
