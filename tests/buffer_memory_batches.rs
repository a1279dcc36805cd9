//! `buffer.memory` counts the batch buffers' unused capacity too (Java's `BufferPool` charges
//! whole buffers): records of 10 KiB in 16 KiB batches leave a third of every buffer unused,
//! and the resident memory a full buffer of them costs stays within `buffer.memory`, its
//! eighth of slack for batches, and a constant. One test in its own binary, so that no other
//! test's allocations move the process's resident size while it measures.
#![cfg(feature = "testkit")]

mod common;

#[test]
fn stuck_records_that_leave_their_batch_buffers_a_third_empty_cost_no_more_resident_memory_than_buffer_memory_and_its_slack(
) {
    const BUFFER: usize = 64 << 20;
    const SLACK: usize = BUFFER / 8;
    const CONSTANT: usize = 8 << 20;
    // One 10 KiB record per 16 KiB batch: counting records alone, a full buffer grew the
    // resident set by 1.4 times `buffer.memory` (91 MiB for 64 MiB).
    let stuck = common::stuck_buffer::fill(BUFFER, 16_384, 10_240);
    assert!(
        stuck.buffered <= BUFFER + SLACK,
        "buffered {} > buffer.memory {BUFFER} plus its slack {SLACK}",
        stuck.buffered
    );
    assert!(
        stuck.grown <= BUFFER + SLACK + CONSTANT,
        "{} records of 10 KiB grew the resident set by {} bytes, more than buffer.memory \
         ({BUFFER}), its slack ({SLACK}) and {CONSTANT}",
        stuck.futures.len(),
        stuck.grown
    );
    stuck.all_land();
}
