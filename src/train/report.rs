//! Training outputs and `report.json` (owned by the `train-app` branch).
