//! Kafka error codes the producer reacts to, by their Kafka names.

/// Kafka's `Errors` enum codes used by the producer paths.
pub mod code {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const REPLICA_NOT_AVAILABLE: i16 = 9;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const NETWORK_EXCEPTION: i16 = 13;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub const INVALID_TIMESTAMP: i16 = 32;
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const INVALID_REQUEST: i16 = 42;
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
    pub const POLICY_VIOLATION: i16 = 44;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    pub const UNKNOWN_PRODUCER_ID: i16 = 59;
    pub const LISTENER_NOT_FOUND: i16 = 72;
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
    pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    pub const FENCED_INSTANCE_ID: i16 = 82;
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
    pub const ELECTION_NOT_NEEDED: i16 = 84;
    pub const INVALID_RECORD: i16 = 87;
    pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
    pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
    pub const PRODUCER_FENCED: i16 = 90;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    pub const INCONSISTENT_TOPIC_ID: i16 = 103;
    pub const TRANSACTION_ABORTABLE: i16 = 120;
    pub const REBOOTSTRAP_REQUIRED: i16 = 129;
}

/// The Kafka name of an error code, for messages ("NOT_LEADER_OR_FOLLOWER").
pub fn name(error_code: i16) -> String {
    match kafka_protocol::error::ResponseError::try_from_code(error_code) {
        None => "NONE".to_string(),
        Some(kafka_protocol::error::ResponseError::Unknown(c)) => format!("UNKNOWN_ERROR_CODE_{c}"),
        Some(e) => {
            // `ResponseError`'s Debug is the CamelCase variant; Kafka spells it in
            // SCREAMING_SNAKE_CASE.
            let camel = format!("{e:?}");
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafka_spelling() {
        assert_eq!(name(code::NOT_LEADER_OR_FOLLOWER), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(
            name(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
            "OUT_OF_ORDER_SEQUENCE_NUMBER"
        );
        assert_eq!(name(code::NONE), "NONE");
        assert_eq!(name(-1), "UNKNOWN_SERVER_ERROR");
    }
}
