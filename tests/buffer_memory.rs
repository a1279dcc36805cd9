//! `buffer.memory` bounds what queued records really cost: with every record stuck (its
//! broker down), a producer accepts records until the buffer is full and its resident memory
//! grows by no more than the buffer plus a constant. One test in its own binary, so that no
//! other test's allocations move the process's resident size while it measures.
#![cfg(feature = "testkit")]

mod common;

#[test]
fn a_full_buffer_of_stuck_small_records_costs_no_more_resident_memory_than_buffer_memory_plus_a_constant(
) {
    const BUFFER: usize = 16 << 20;
    const CONSTANT: usize = 16 << 20;
    let stuck = common::stuck_buffer::fill(BUFFER, 16_384, 10);
    // Every batch reserves its whole buffer when it opens, so the count never passes the
    // limit.
    assert!(
        stuck.buffered <= BUFFER,
        "buffered {} > buffer.memory {BUFFER}",
        stuck.buffered
    );
    assert!(
        stuck.grown <= BUFFER + CONSTANT,
        "{} records of 10 bytes grew the resident set by {} bytes, more than buffer.memory \
         ({BUFFER}) plus {CONSTANT}",
        stuck.futures.len(),
        stuck.grown
    );
    stuck.all_land();
}
