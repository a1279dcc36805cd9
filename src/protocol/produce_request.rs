//! kacrab's own Produce request encoder (v3 to v12), for the one request whose size is its
//! payload: the record batches go into the [`Frame`] as their own segments, shared with the
//! engine's batches, and only the length prefix, the header and the fixed fields around them are
//! written (into one small buffer). The bytes on the wire are those of Kafka's schema, the same
//! as `kafka-protocol`'s encoder gives (a test compares the two).
//!
//! Layout, all integers big-endian (Kafka's `ProduceRequest.json`):
//!
//! - request header v1 (Produce v3–v8): api key i16, api version i16, correlation id i32,
//!   client id as a nullable string (i16 length); header v2 (v9+) adds an empty tagged-field
//!   section (one 0 byte). The client id stays a non-compact string in v2.
//! - transactional id: nullable string (v3–v8), compact nullable string (v9+);
//! - acks i16, timeout_ms i32;
//! - topics: array (i32 count) or compact array (unsigned varint count + 1), each a name
//!   (string / compact string) and an array of partitions, each an index i32 and the records as
//!   nullable bytes (i32 length) or compact nullable bytes (unsigned varint length + 1);
//! - in v9+ every structure (partition, topic, request) ends with an empty tagged-field section.

use bytes::{BufMut, Bytes, BytesMut};

use super::api::ApiKey;
use super::varint::write_unsigned_varint;
use super::wire::{Frame, WireError};

/// First Produce version with flexible encoding (compact strings, arrays and bytes; tagged
/// fields; request header v2).
const FIRST_FLEXIBLE_VERSION: i16 = 9;
/// The versions this encoder writes: those the engine negotiates (`ApiKey::Produce`'s range).
/// v12 is v11's layout (KIP-890 part 2: to a broker, v12 from a transactional producer means
/// transactions V2, the partition joins the transaction with its first write).
const VERSIONS: std::ops::RangeInclusive<i16> = 3..=12;

/// The fixed fields of one Produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceRequestHead<'a> {
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: &'a str,
    pub transactional_id: Option<&'a str>,
    pub acks: i16,
    pub timeout_ms: i32,
}

/// One partition's batch in a request.
#[derive(Debug, Clone)]
pub struct ProducePartition<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub records: Bytes,
}

/// Encodes a Produce request as a complete frame (length prefix included).
///
/// Partitions are grouped under their topic in the order the topics first appear, each topic's
/// partitions in the order given, as Kafka's and the previous encoder's grouping do.
pub fn encode_produce_request(
    head: &ProduceRequestHead<'_>,
    partitions: &[ProducePartition<'_>],
) -> Result<Frame, WireError> {
    let version = head.version;
    let fail = |reason: String| WireError::Encode {
        api: ApiKey::Produce,
        version,
        reason,
    };
    if !VERSIONS.contains(&version) {
        return Err(fail(format!(
            "Produce v{version} is outside the encoder's v3..=v12"
        )));
    }
    let flexible = version >= FIRST_FLEXIBLE_VERSION;

    // Topics in first-appearance order, each with the indexes of its partitions. A request
    // holds at most one batch per partition of one broker, so the linear search stays short.
    let mut topics: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, p) in partitions.iter().enumerate() {
        match topics.iter_mut().find(|(name, _)| *name == p.topic) {
            Some((_, members)) => members.push(i),
            None => topics.push((p.topic, vec![i])),
        }
    }

    let mut glue = BytesMut::with_capacity(
        32 + head.client_id.len()
            + head.transactional_id.map_or(0, str::len)
            + topics
                .iter()
                .map(|(name, _)| name.len() + 10)
                .sum::<usize>()
            + partitions.len() * 10,
    );
    // Where each batch goes between the glue's pieces.
    let mut cuts: Vec<usize> = Vec::with_capacity(partitions.len());
    let mut records_len = 0usize;

    glue.put_i32(0); // frame length, set below
    glue.put_i16(ApiKey::Produce.code());
    glue.put_i16(version);
    glue.put_i32(head.correlation_id);
    put_nullable_string(&mut glue, Some(head.client_id)).map_err(fail)?;
    if flexible {
        write_unsigned_varint(&mut glue, 0); // header tagged fields
    }
    if flexible {
        put_compact_nullable_string(&mut glue, head.transactional_id).map_err(fail)?;
    } else {
        put_nullable_string(&mut glue, head.transactional_id).map_err(fail)?;
    }
    glue.put_i16(head.acks);
    glue.put_i32(head.timeout_ms);
    put_array_len(&mut glue, topics.len(), flexible).map_err(fail)?;
    for (name, members) in &topics {
        if flexible {
            put_compact_nullable_string(&mut glue, Some(name)).map_err(fail)?;
        } else {
            put_nullable_string(&mut glue, Some(name)).map_err(fail)?;
        }
        put_array_len(&mut glue, members.len(), flexible).map_err(fail)?;
        for &i in members {
            let p = &partitions[i];
            glue.put_i32(p.partition);
            let len = p.records.len();
            if flexible {
                let encoded = u32::try_from(len)
                    .ok()
                    .and_then(|l| l.checked_add(1))
                    .ok_or_else(|| fail(format!("records of {len} bytes")))?;
                write_unsigned_varint(&mut glue, encoded);
            } else {
                let len =
                    i32::try_from(len).map_err(|_| fail(format!("records of {len} bytes")))?;
                glue.put_i32(len);
            }
            cuts.push(glue.len());
            records_len += p.records.len();
            if flexible {
                write_unsigned_varint(&mut glue, 0); // partition tagged fields
            }
        }
        if flexible {
            write_unsigned_varint(&mut glue, 0); // topic tagged fields
        }
    }
    if flexible {
        write_unsigned_varint(&mut glue, 0); // request tagged fields
    }

    let size = glue.len() - 4 + records_len;
    let size = i32::try_from(size).map_err(|_| fail(format!("request of {size} bytes")))?;
    glue[..4].copy_from_slice(&size.to_be_bytes());
    let glue = glue.freeze();

    let mut segments = Vec::with_capacity(2 * partitions.len() + 1);
    let mut start = 0;
    for (&cut, p) in cuts.iter().zip(topics.iter().flat_map(|(_, m)| m.iter())) {
        segments.push(glue.slice(start..cut));
        let records = &partitions[*p].records;
        if !records.is_empty() {
            segments.push(records.clone());
        }
        start = cut;
    }
    if start < glue.len() {
        segments.push(glue.slice(start..));
    }
    Ok(Frame::from_segments(segments))
}

/// A string with an i16 length, -1 for null (Kafka's `STRING` / `NULLABLE_STRING`).
fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) -> Result<(), String> {
    match s {
        None => buf.put_i16(-1),
        Some(s) => {
            let len = i16::try_from(s.len()).map_err(|_| format!("string of {} bytes", s.len()))?;
            buf.put_i16(len);
            buf.put_slice(s.as_bytes());
        }
    }
    Ok(())
}

/// A string with an unsigned varint of its length + 1, 0 for null (`COMPACT_NULLABLE_STRING`).
/// Kafka caps strings at i16::MAX bytes in both forms.
fn put_compact_nullable_string(buf: &mut BytesMut, s: Option<&str>) -> Result<(), String> {
    match s {
        None => write_unsigned_varint(buf, 0),
        Some(s) => {
            if s.len() > i16::MAX as usize {
                return Err(format!("string of {} bytes", s.len()));
            }
            write_unsigned_varint(buf, s.len() as u32 + 1);
            buf.put_slice(s.as_bytes());
        }
    }
    Ok(())
}

/// An array's element count: i32, or an unsigned varint of count + 1 when flexible.
fn put_array_len(buf: &mut BytesMut, len: usize, flexible: bool) -> Result<(), String> {
    let len = i32::try_from(len).map_err(|_| format!("array of {len} elements"))?;
    if flexible {
        write_unsigned_varint(buf, len as u32 + 1);
    } else {
        buf.put_i32(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    /// The request as the engine encoded it before, with kafka-protocol's message types.
    fn reference(head: &ProduceRequestHead<'_>, partitions: &[ProducePartition<'_>]) -> Bytes {
        let mut topic_data: Vec<TopicProduceData> = Vec::new();
        for p in partitions {
            let partition = PartitionProduceData::default()
                .with_index(p.partition)
                .with_records(Some(p.records.clone()));
            match topic_data.iter_mut().find(|t| t.name.0.as_str() == p.topic) {
                Some(t) => t.partition_data.push(partition),
                None => topic_data.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(p.topic.to_string())))
                        .with_partition_data(vec![partition]),
                ),
            }
        }
        let request = ProduceRequest::default()
            .with_transactional_id(
                head.transactional_id
                    .map(|t| TransactionalId(StrBytes::from_string(t.to_string()))),
            )
            .with_acks(head.acks)
            .with_timeout_ms(head.timeout_ms)
            .with_topic_data(topic_data);
        wire::encode_request(
            ApiKey::Produce,
            head.version,
            head.correlation_id,
            &StrBytes::from_string(head.client_id.to_string()),
            &request,
        )
        .unwrap()
        .to_bytes()
    }

    fn batch(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    /// A non-transactional acks=all head with correlation id 1.
    fn plain_head(version: i16, client_id: &str) -> ProduceRequestHead<'_> {
        ProduceRequestHead {
            version,
            correlation_id: 1,
            client_id,
            transactional_id: None,
            acks: -1,
            timeout_ms: 1000,
        }
    }

    fn partitions() -> Vec<ProducePartition<'static>> {
        // Topics interleaved (a, b, a, c, b) to check the grouping order; one batch long enough
        // for a two-byte compact length, one for a three-byte one.
        vec![
            ProducePartition {
                topic: "orders",
                partition: 0,
                records: batch(61, 1),
            },
            ProducePartition {
                topic: "payments",
                partition: 7,
                records: batch(200, 2),
            },
            ProducePartition {
                topic: "orders",
                partition: 3,
                records: batch(20_000, 3),
            },
            ProducePartition {
                topic: "t",
                partition: i32::MAX,
                records: batch(90, 4),
            },
            ProducePartition {
                topic: "payments",
                partition: 1,
                records: batch(127, 5),
            },
        ]
    }

    #[test]
    fn the_frame_is_kafka_protocols_encoding_byte_for_byte() {
        let all = partitions();
        let cases: [&[ProducePartition<'_>]; 3] = [&all[..1], &all[..2], &all];
        for version in VERSIONS {
            for transactional_id in [None, Some("txn-α"), Some("")] {
                for (acks, timeout_ms) in [(-1, 30_000), (1, i32::MAX), (0, 0)] {
                    for parts in cases {
                        let head = ProduceRequestHead {
                            version,
                            correlation_id: 0x0102_0304 + i32::from(version),
                            client_id: "kacrab-client",
                            transactional_id,
                            acks,
                            timeout_ms,
                        };
                        let ours = encode_produce_request(&head, parts).unwrap();
                        let theirs = reference(&head, parts);
                        assert_eq!(
                            ours.to_bytes(),
                            theirs,
                            "v{version} txn {transactional_id:?} acks {acks}, {} partitions",
                            parts.len()
                        );
                        assert_eq!(ours.len(), theirs.len());
                    }
                }
            }
        }
    }

    #[test]
    fn batches_are_their_own_segments_not_copies() {
        let parts = partitions();
        for version in [3, 11] {
            let head = plain_head(version, "c");
            let frame = encode_produce_request(&head, &parts).unwrap();
            for p in &parts {
                assert!(
                    frame
                        .segments()
                        .iter()
                        .any(|s| s.as_ptr() == p.records.as_ptr() && s.len() == p.records.len()),
                    "v{version}: the batch of {}-{} was copied",
                    p.topic,
                    p.partition
                );
            }
            // Header, fixed fields, 3 topic names and 5 partitions' index and length.
            let glue: usize = frame.len() - parts.iter().map(|p| p.records.len()).sum::<usize>();
            assert!(glue < 128, "v{version}: {glue} bytes besides the batches");
        }
    }

    #[test]
    fn versions_outside_the_encoders_range_are_refused() {
        for version in [2, 13, 14] {
            let head = plain_head(version, "c");
            assert!(matches!(
                encode_produce_request(&head, &partitions()),
                Err(WireError::Encode { version: v, .. }) if v == version
            ));
        }
    }

    #[test]
    fn an_overlong_client_id_is_an_encode_error_not_a_panic() {
        let long = "x".repeat(i16::MAX as usize + 1);
        for version in [3, 9] {
            let head = plain_head(version, &long);
            assert!(encode_produce_request(&head, &partitions()).is_err());
        }
    }
}
