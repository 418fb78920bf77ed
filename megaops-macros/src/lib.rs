//! `#[megaops::kernel]` (being written).
