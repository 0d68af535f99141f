//! Checkpoints of a training run (owned by the `train-app` branch).
