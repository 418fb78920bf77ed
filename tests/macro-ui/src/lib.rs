//! Holds the `#[megaops::kernel]` UI tests in `tests/` (trybuild); the library is empty.
