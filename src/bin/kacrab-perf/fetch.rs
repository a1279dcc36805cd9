//! A small blocking reader for `--verify` against an external cluster: Metadata v1 for the
//! partition leaders, ListOffsets v1 for each partition's end before the run, then Fetch v4
//! from there to the high watermark, decoding every record batch with the crate's own decoder
//! (feature `testkit`).
//! Only this run's records are checked, so a topic that already holds records can be reused.
//!
//! These versions predate flexible encodings and are served by every broker since Kafka 0.11,
//! by librdkafka's mock cluster and by the reference cluster.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kacrab::testkit::internals::protocol::record_batch::{decode_records, split_batches};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use super::embedded::{verify_ids, Verification};

const METADATA_VERSION: i16 = 1;
const FETCH_VERSION: i16 = 4;
const LIST_OFFSETS_VERSION: i16 = 1;
/// OFFSET_OUT_OF_RANGE
const OFFSET_OUT_OF_RANGE: i16 = 1;

struct Connection {
    stream: TcpStream,
    correlation_id: i32,
}

impl Connection {
    fn open(address: &str) -> Result<Connection> {
        let stream =
            TcpStream::connect(address).with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Connection {
            stream,
            correlation_id: 0,
        })
    }

    fn call<Req, Resp>(&mut self, api: ApiKey, version: i16, request: &Req) -> Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("kacrab-perf-verify")));
        let mut body = BytesMut::new();
        header.encode(&mut body, Req::header_version(version))?;
        request.encode(&mut body, version)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame)?;
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix)?;
        let size = i32::from_be_bytes(prefix);
        if !(0..=256 << 20).contains(&size) {
            bail!("{api:?} response of {size} bytes");
        }
        let mut buf = vec![0u8; size as usize];
        self.stream.read_exact(&mut buf)?;
        let mut buf = Bytes::from(buf);
        let response_header = ResponseHeader::decode(&mut buf, Resp::header_version(version))?;
        if response_header.correlation_id != self.correlation_id {
            bail!("{api:?} answer out of order");
        }
        Resp::decode(&mut buf, version)
    }
}

/// A topic's partitions, their leaders and a connection to each leader.
pub struct TopicReader {
    topic: String,
    /// Leader of each partition, by partition index.
    leaders: Vec<BrokerId>,
    connections: HashMap<BrokerId, Connection>,
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

impl TopicReader {
    pub fn connect(bootstrap: &str, topic: &str) -> Result<TopicReader> {
        let first = bootstrap
            .split(',')
            .map(str::trim)
            .find(|s| !s.is_empty())
            .ok_or_else(|| anyhow!("no bootstrap server"))?;
        let mut bootstrap_conn = Connection::open(first)?;
        let metadata: MetadataResponse = bootstrap_conn.call(
            ApiKey::Metadata,
            METADATA_VERSION,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
            ])),
        )?;
        let brokers: HashMap<BrokerId, String> = metadata
            .brokers
            .iter()
            .map(|b| (b.node_id, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        let topic_metadata = metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| anyhow!("topic {topic} not in metadata"))?;
        if topic_metadata.error_code != 0 {
            bail!("metadata for {topic}: error {}", topic_metadata.error_code);
        }
        let count = topic_metadata.partitions.len() as i32;
        let mut leaders = Vec::with_capacity(count as usize);
        let mut connections = HashMap::new();
        for p in 0..count {
            let leader = topic_metadata
                .partitions
                .iter()
                .find(|m| m.partition_index == p)
                .ok_or_else(|| anyhow!("partition {p} not in metadata"))?
                .leader_id;
            if let std::collections::hash_map::Entry::Vacant(slot) = connections.entry(leader) {
                let address = brokers
                    .get(&leader)
                    .ok_or_else(|| anyhow!("partition {p}: leader {leader:?} unknown"))?;
                slot.insert(Connection::open(address)?);
            }
            leaders.push(leader);
        }
        Ok(TopicReader {
            topic: topic.to_string(),
            leaders,
            connections,
        })
    }

    fn leader(&mut self, partition: i32) -> &mut Connection {
        let leader = self.leaders[partition as usize];
        self.connections.get_mut(&leader).expect("connected")
    }

    /// Each partition's log end offset now (ListOffsets, latest).
    pub fn end_offsets(&mut self) -> Result<Vec<i64>> {
        let topic = self.topic.clone();
        (0..self.leaders.len() as i32)
            .map(|p| {
                let request = ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_topics(vec![ListOffsetsTopic::default()
                        .with_name(topic_name(&topic))
                        .with_partitions(vec![ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_timestamp(-1)])]);
                let response: ListOffsetsResponse =
                    self.leader(p)
                        .call(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &request)?;
                let answer = response
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .find(|r| r.partition_index == p)
                    .ok_or_else(|| anyhow!("partition {p} missing from the ListOffsets answer"))?;
                if answer.error_code != 0 {
                    bail!("partition {p}: ListOffsets error {}", answer.error_code);
                }
                Ok(answer.offset)
            })
            .collect()
    }

    /// Reads each partition from `start[p]` (0 where not given) to its high watermark and
    /// checks the ids as the embedded reader does.
    pub fn verify(&mut self, start: &[i64], expected: u64) -> Result<Verification> {
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut all = Vec::with_capacity(self.leaders.len());
        for p in 0..self.leaders.len() as i32 {
            let from = start.get(p as usize).copied().unwrap_or(0);
            all.push(self.read_partition(p, from, deadline)?);
        }
        Ok(verify_ids(
            all.iter()
                .map(|values| values.iter().map(|v| v.as_deref()).collect()),
            expected,
        ))
    }

    fn read_partition(
        &mut self,
        p: i32,
        from: i64,
        deadline: Instant,
    ) -> Result<Vec<Option<Bytes>>> {
        let topic = self.topic.clone();
        let conn = self.leader(p);
        let mut values: Vec<Option<Bytes>> = Vec::new();
        let mut offset = from;
        loop {
            if Instant::now() > deadline {
                bail!("verification read timed out");
            }
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(32 << 20)
                .with_isolation_level(0)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(&topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(16 << 20)])]);
            let response: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request)?;
            let data = response
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|d| d.partition_index == p)
                .ok_or_else(|| anyhow!("partition {p} missing from the fetch answer"))?;
            match data.error_code {
                0 => {}
                OFFSET_OUT_OF_RANGE => bail!(
                    "partition {p}: offset {offset} is no longer in the log (retention removed \
                     records), so the run cannot be verified in full"
                ),
                code => bail!("partition {p}: fetch error {code}"),
            }
            let records = data.records.clone().unwrap_or_default();
            let before = offset;
            for batch in split_batches(&records).allow_partial_trailing() {
                let (header, bytes) = batch.map_err(|e| anyhow!("partition {p}: {e}"))?;
                let next = header.base_offset + header.last_offset_delta as i64 + 1;
                if next <= offset {
                    continue; // a batch before the fetch offset
                }
                if !header.is_control() {
                    for record in
                        decode_records(bytes).map_err(|e| anyhow!("partition {p}: {e}"))?
                    {
                        if header.base_offset + record.offset_delta as i64 >= offset {
                            values.push(record.value);
                        }
                    }
                }
                offset = next;
            }
            if offset >= data.high_watermark {
                return Ok(values);
            }
            if offset == before {
                // Nothing new although the high watermark is ahead: wait briefly.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
