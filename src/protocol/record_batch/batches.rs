//! Walking a records area that holds several batches back to back: [`split_batches`] yields
//! each validated batch and tells a batch cut short at the end (as a Fetch answer may end) from
//! corruption.

use super::{
    get_i32, RecordBatchError, RecordBatchHeader, LENGTH_OFFSET, LOG_OVERHEAD, MIN_BATCH_LENGTH,
};

/// Iterates the batches of a `records` byte area (a Produce partition's records or a Fetch
/// partition's record set), yielding each validated header with the batch's bytes.
///
/// By default any truncation is an error. Fetch responses may end with a partial batch (the
/// broker cuts at `max_bytes`); [`Batches::allow_partial_trailing`] makes that end the iteration
/// quietly, as Java's `ByteBufferLogInputStream` does. After the first error the iterator is
/// finished.
pub fn split_batches(buf: &[u8]) -> Batches<'_> {
    Batches {
        remaining: buf,
        allow_partial_trailing: false,
        finished: false,
    }
}

/// Iterator returned by [`split_batches`].
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    remaining: &'a [u8],
    allow_partial_trailing: bool,
    finished: bool,
}

impl<'a> Batches<'a> {
    /// Ends the iteration without an error at a trailing batch that is cut short: fewer than 12
    /// bytes left, or a plausible length field promising more bytes than remain.
    pub fn allow_partial_trailing(mut self) -> Self {
        self.allow_partial_trailing = true;
        self
    }

    /// The bytes not yet consumed: after a quiet stop, the partial trailing batch.
    pub fn remaining(&self) -> &'a [u8] {
        self.remaining
    }

    fn is_partial_trailing(&self) -> bool {
        let buf = self.remaining;
        if buf.len() < LOG_OVERHEAD {
            return true;
        }
        // A length below a bare header is corruption, not a cut: let parse report it.
        let batch_length = get_i32(buf, LENGTH_OFFSET);
        batch_length >= MIN_BATCH_LENGTH && buf.len() < batch_length as usize + LOG_OVERHEAD
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<(RecordBatchHeader, &'a [u8]), RecordBatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished || self.remaining.is_empty() {
            return None;
        }
        if self.allow_partial_trailing && self.is_partial_trailing() {
            self.finished = true;
            return None;
        }
        match RecordBatchHeader::parse(self.remaining) {
            Ok(header) => {
                let (batch, rest) = self.remaining.split_at(header.total_size());
                self.remaining = rest;
                Some(Ok((header, batch)))
            }
            Err(error) => {
                self.finished = true;
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for Batches<'_> {}

#[cfg(test)]
mod tests {
    use super::super::test_support::build;
    use super::*;

    #[test]
    fn split_batches_walks_an_area() {
        let first = build(0, &[(0, None, Some(b"a"), &[])]);
        let second = build(0, &[(0, None, Some(b"bb"), &[]), (0, None, None, &[])]);
        let mut area = first.to_vec();
        area.extend_from_slice(&second);

        let batches: Vec<_> = split_batches(&area).collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].1, &first[..]);
        assert_eq!(batches[1].1, &second[..]);
        assert_eq!(batches[1].0.record_count, 2);
        assert_eq!(split_batches(&[]).count(), 0);

        // A cut last batch is an error by default and a quiet stop when allowed.
        for cut in 1..second.len() {
            let partial = &area[..first.len() + cut];
            let results: Vec<_> = split_batches(partial).collect();
            assert_eq!(results.len(), 2);
            assert!(results[0].is_ok());
            assert!(matches!(
                results[1],
                Err(RecordBatchError::Truncated { .. })
            ));

            let mut lenient = split_batches(partial).allow_partial_trailing();
            assert!(lenient.next().unwrap().is_ok());
            assert!(lenient.next().is_none());
            assert_eq!(lenient.remaining().len(), cut);
        }
    }

    #[test]
    fn split_batches_stops_after_an_error() {
        let batch = build(0, &[(0, None, Some(b"a"), &[])]);
        let mut area = batch.to_vec();
        area.extend_from_slice(&batch);
        area[20] ^= 0xff; // first batch's CRC
        let mut batches = split_batches(&area);
        assert!(matches!(
            batches.next(),
            Some(Err(RecordBatchError::CrcMismatch { .. }))
        ));
        assert!(batches.next().is_none());

        // A corrupt length is reported even when partial batches are tolerated.
        let mut area = batch.to_vec();
        area[8..12].copy_from_slice(&3i32.to_be_bytes());
        let mut batches = split_batches(&area).allow_partial_trailing();
        assert_eq!(batches.next(), Some(Err(RecordBatchError::BadLength(3))));
    }
}
