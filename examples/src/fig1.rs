//! (fig1 below)
