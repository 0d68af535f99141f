//! `gs-train --demo` (owned by the `train-app` branch).
