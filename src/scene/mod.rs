//! Scene types shared by importers, renderers and the trainer.

pub mod camera;
pub mod filter3d;
pub mod gaussians;
pub mod lanes;
pub mod maths;
pub mod real;
pub mod sh;
pub mod trajectory;
