//! Answers broken in their frame or body: a 2 GiB length prefix, a truncated frame, garbage,
//! an undecodable body, an answer to a request never made, and hostile SASL answers. Each closes
//! the connection with a typed error, and the retry on a new connection is answered properly.

use std::sync::atomic::Ordering;

use kacrab::stats::{ConnectionError, FramePart, RuntimeStats};
use kafka_protocol::messages::ApiKey;

use super::{send_through, Act, FakeBroker, LARGEST_ALLOCATION};

fn failures(stats: &RuntimeStats) -> Vec<ConnectionError> {
    stats
        .recent_failures
        .iter()
        .map(|f| f.error.clone())
        .collect()
}

// The answer to the first produce request claims 2 GiB - 1 bytes (the largest positive
// length), and another the full 2 GiB (0x8000_0000, negative as an i32): each is refused by
// its length prefix before anything is allocated for it, the connection closes, and the retry
// on a new connection is answered properly.
#[test]
fn a_two_gib_frame_length_is_refused_without_allocating_it() {
    let broker = FakeBroker::start(vec![
        (ApiKey::Produce, Act::Claim(0x7fff_ffff)),
        (ApiKey::Produce, Act::Claim(0x8000_0000)),
    ]);
    let stats = send_through(&broker, &[]);
    let errors = failures(&stats);
    assert!(
        errors.iter().any(|e| matches!(
            e,
            ConnectionError::Frame(kacrab::stats::WireError::FrameTooLarge {
                size: 0x7fff_ffff,
                ..
            })
        )),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| matches!(
            e,
            ConnectionError::Frame(kacrab::stats::WireError::NegativeFrameLength(_))
        )),
        "{errors:?}"
    );
    assert_eq!(stats.refused_frames, 2);
    let largest = LARGEST_ALLOCATION.load(Ordering::Relaxed);
    assert!(
        largest < 1 << 30,
        "largest single allocation {largest} bytes: a claimed length was allocated"
    );
}

// A length within kacrab.max.response.bytes (64 MiB claimed, 100 MiB allowed) followed by a
// few bytes and a closed connection: the frame is reported truncated, and the body was never
// given room for what it claimed, only for what arrived.
#[test]
fn a_truncated_frame_is_reported_and_costs_only_what_arrived() {
    let broker = FakeBroker::start(vec![
        (
            ApiKey::Produce,
            Act::Truncated {
                claim: 64 << 20,
                send: 100,
            },
        ),
        (ApiKey::Metadata, Act::Truncated { claim: 2, send: 0 }),
    ]);
    let stats = send_through(&broker, &[]);
    let errors = failures(&stats);
    assert!(
        errors.contains(&ConnectionError::Truncated {
            part: FramePart::Body,
            expected: 64 << 20,
            received: 100,
        }),
        "{errors:?}"
    );
    assert!(stats.truncated_frames >= 1, "{stats:?}");
    let largest = LARGEST_ALLOCATION.load(Ordering::Relaxed);
    assert!(
        largest < 64 << 20,
        "largest single allocation {largest} bytes: the claimed body was allocated up front"
    );
}

// Garbage instead of an answer: random-looking bytes whose first four read as a negative
// length, and bytes whose first four read as a length above the limit. Both are refused by
// the length prefix.
#[test]
fn garbage_instead_of_an_answer_closes_the_connection_with_a_typed_error() {
    let broker = FakeBroker::start(vec![
        (ApiKey::Produce, Act::Garbage(vec![0xab; 64])),
        (
            ApiKey::ApiVersions,
            Act::Garbage(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
        ),
    ]);
    let stats = send_through(&broker, &[("kacrab.max.response.bytes", "1048576")]);
    let errors = failures(&stats);
    let refused = errors
        .iter()
        .filter(|e| matches!(e, ConnectionError::Frame(_)))
        .count();
    assert_eq!(refused, 2, "{errors:?}");
}

// Well-framed garbage: an answer with the right correlation id whose body does not decode,
// and a well-formed answer to a request that was never made. The engine judges both a broken
// protocol and closes the connection; the retry succeeds.
#[test]
fn an_undecodable_or_unexpected_answer_closes_the_connection() {
    let broker = FakeBroker::start(vec![
        (ApiKey::Produce, Act::Undecodable),
        (ApiKey::Produce, Act::WrongCorrelation),
        (ApiKey::Metadata, Act::Undecodable),
    ]);
    let stats = send_through(&broker, &[]);
    let errors = failures(&stats);
    let abandoned = errors
        .iter()
        .filter(|e| **e == ConnectionError::Abandoned { established: true })
        .count();
    assert!(abandoned >= 3, "{errors:?}");
    let protocol_errors: u64 = stats.shards.iter().map(|s| s.engine.protocol_errors).sum();
    assert!(protocol_errors >= 3, "{stats:?}");
}

// On SASL_PLAINTEXT, the authentication answers are hostile too: a SaslAuthenticate answer
// cut short by a closed connection, an undecodable SaslHandshake answer, and a SaslAuthenticate
// answer claiming billions of tagged fields. Each is a broken peer, not a refusal: the
// connection closes, the producer reconnects and authenticates again, and the record is
// acknowledged.
#[test]
fn a_truncated_or_malformed_sasl_answer_closes_the_connection_and_is_retried() {
    let broker = FakeBroker::start(vec![
        (
            ApiKey::SaslAuthenticate,
            Act::Truncated {
                claim: 64,
                send: 10,
            },
        ),
        (ApiKey::SaslHandshake, Act::Undecodable),
        // Error code, null error message and empty auth bytes (compact: 1 byte each), session
        // lifetime: 12 bytes, then the tagged-field count.
        (ApiKey::SaslAuthenticate, Act::HugeCount { at: 12 }),
    ]);
    let stats = send_through(
        &broker,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required \
                 username=\"u\" password=\"p\";",
            ),
        ],
    );
    let errors = failures(&stats);
    assert!(
        errors.contains(&ConnectionError::Truncated {
            part: FramePart::Body,
            expected: 64,
            received: 10,
        }),
        "{errors:?}"
    );
    let protocol_errors: u64 = stats.shards.iter().map(|s| s.engine.protocol_errors).sum();
    assert!(protocol_errors >= 2, "{stats:?}");
    assert!(broker.connections.load(Ordering::SeqCst) >= 4);
}
