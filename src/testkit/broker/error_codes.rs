//! Kafka error codes the reference broker answers with (Kafka `Errors`), named as in Java so
//! tests and Kafka's sources read alike: the same table the producer uses.

pub use crate::protocol::error_code::code::*;

/// Group coordinator codes the producer's table does not carry (Kafka `Errors`).
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
/// ILLEGAL_GENERATION: the group's generation is not the one named.
pub const ILLEGAL_GENERATION: i16 = 22;
/// INVALID_GROUP_ID: an empty group id.
pub const INVALID_GROUP_ID: i16 = 24;
