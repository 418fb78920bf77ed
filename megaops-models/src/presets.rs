//! Presets: the dimensions of released models with seeded random weights.
