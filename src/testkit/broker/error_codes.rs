//! Kafka error codes the reference broker answers with (Kafka `Errors`), named as in Java so
//! tests and rulebook read alike: the same table the producer uses.

pub use crate::protocol::error_code::code::*;
