//! Initial Gaussians (placeholder, filled below).
