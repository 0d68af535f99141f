//! (in progress)
use super::{ImportError, ImportOptions, ImportedScene};
use std::path::Path;

pub fn import(path: &Path, _options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    Err(ImportError::invalid(path, "nerf importer not built yet"))
}
