//! The synchronous wire codec: record batch v2 (the hot path, our own encoder), request framing
//! and API-version negotiation. Every message other than the record batch goes through the
//! `kafka-protocol` crate.

pub mod api;
pub mod error_code;
pub mod record_batch;
pub mod varint;
pub mod wire;
