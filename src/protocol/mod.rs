//! The synchronous wire codec: record batch v2 (the hot path, our own encoder), request framing
//! and API-version negotiation. The Produce request has our own encoder too
//! (`produce_request`), which puts the batches into the frame without copying them; the other
//! requests are encoded with the `kafka-protocol` crate. Every response the producer reads is
//! decoded by our own bounded decoders (`response` and the `*_response` files), into
//! `kafka-protocol`'s message types.

mod add_partitions_to_txn_response;
pub mod api;
mod api_versions_response;
pub mod compression;
mod end_txn_responses;
pub mod error_code;
mod find_coordinator_response;
mod init_producer_id_response;
mod metadata_response;
pub mod produce_request;
mod produce_response;
pub mod record_batch;
pub mod response;
pub mod sasl;
pub mod sasl_oauthbearer;
mod sasl_responses;
mod txn_offset_commit_response;
pub mod varint;
pub mod wire;
