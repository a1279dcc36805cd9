//! What a caught panic said, for the error or log line that reports it: the configuration
//! (a token provider that panicked), the runtime (a shard, a callback) and the producer (a
//! task on a shard) all report panics they catch.

/// The message a panic carried (`panic!` with a literal or a formatted string).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&'static str>() {
        (*message).to_string()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_string()
    }
}
