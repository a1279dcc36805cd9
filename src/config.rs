//! Producer configuration under Java property names.
