//! Record batch v2 (magic 2).
