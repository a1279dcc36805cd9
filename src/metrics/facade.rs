//! Publication through the `metrics` crate facade, for whatever exporter the application
//! installed. Called with whole snapshots (never per record): counters are set to their
//! totals with `absolute`, gauges to their values; an average or maximum with no sample yet
//! (NaN) is left unset.

use ::metrics::{counter, gauge, Label};

use super::ProducerMetrics;

pub(super) fn publish(snapshot: &ProducerMetrics) {
    for entry in snapshot.entries() {
        let mut labels: Vec<Label> = Vec::with_capacity(entry.tags.len() + 1);
        labels.push(Label::new("group", entry.group));
        let counter = entry.is_counter();
        for (key, value) in entry.tags {
            labels.push(Label::new(key, value));
        }
        if counter {
            counter!(entry.name, labels).absolute(entry.value as u64);
        } else if !entry.value.is_nan() {
            gauge!(entry.name, labels).set(entry.value);
        }
    }
}
