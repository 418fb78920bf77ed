//! Text in and out.
