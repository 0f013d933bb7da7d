//! Owns the factory report: its versioned schema types, the unit's identity, durable
//! (atomic) writing after every finished cell, and reading a report back as a table.

pub mod decode;
pub mod matrix;
pub mod schema;
pub mod unit;
pub mod view;
pub mod write;
