//! What the fuzz targets of importers that read a path share: a folder of this process's own
//! that each input is written to, holding nothing else (so paths an input names find no file
//! there), and what an accepted scene must satisfy.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ramsplat::import::{ImportError, ImportOptions, ImportedScene};

/// This process's folder for `target` under the system's temporary directory, made empty on
/// first use (a fuzz process runs one target, so the first call's `target` names it for good).
pub fn folder(target: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("ramsplat-fuzz-{target}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        dir
    })
}

/// The options of a metadata-only import: no image needs to exist.
pub fn metadata_only() -> ImportOptions {
    ImportOptions {
        metadata_only: true,
        ..ImportOptions::default()
    }
}

/// What every accepted scene satisfies: at least one view, and every camera validates.
pub fn check_accepted(scene: &ImportedScene) {
    assert!(!scene.views.is_empty());
    for v in &scene.views {
        v.camera.validate().expect("an accepted camera validates");
        let _ = v.distortion.distort(0.1, -0.2);
    }
}

/// Writes `data` to `name` in this process's [`folder`] for `target` (a fuzz process runs one
/// target, so the first call's `name` is the file for good) and runs `import` on it, metadata
/// only; an accepted scene passes [`check_accepted`].
pub fn import_written(
    target: &str,
    name: &str,
    data: &[u8],
    import: impl Fn(&Path, &ImportOptions) -> Result<ImportedScene, ImportError>,
) {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    let file = FILE.get_or_init(|| folder(target).join(name));
    std::fs::write(file, data).expect("write the input");
    if let Ok(scene) = import(file, &metadata_only()) {
        check_accepted(&scene);
    }
}
