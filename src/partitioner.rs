//! The built-in partitioner: murmur2 for keyed records, sticky for the rest.
