//! Owns the factory report: its versioned schema types, the unit's identity, and durable
//! (atomic) writing after every finished cell.

pub mod schema;
pub mod unit;
pub mod write;
