//! The virtual GPU (to be implemented: see the module docs of `cpu`).
