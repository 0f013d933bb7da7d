//! Owns parsing and printing of sizes and durations with units (`4k`, `1M`, `1G`, `500ms`, `5s`).
