//! Zigzag varints as used by record batch v2.
