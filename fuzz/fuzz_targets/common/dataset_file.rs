//! What the fuzz targets of importers that read a path share: a file of this process's own
//! that each input is written to, in a folder that holds nothing else (so paths an input
//! names find no file there), and what an accepted scene must satisfy.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ramsplat::import::{ImportError, ImportOptions, ImportedScene};

/// Writes `data` to `name` in this process's folder for `target` under the system's temporary
/// directory (made empty on first use; a fuzz process runs one target, so the first call's
/// `target` and `name` name the file for good) and runs `import` on it, metadata only. An
/// accepted scene has at least one view and every camera validates.
pub fn import_written(
    target: &str,
    name: &str,
    data: &[u8],
    import: impl Fn(&Path, &ImportOptions) -> Result<ImportedScene, ImportError>,
) {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("ramsplat-fuzz-{target}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        dir.join(name)
    });
    std::fs::write(file, data).expect("write the input");
    let options = ImportOptions {
        metadata_only: true,
        ..ImportOptions::default()
    };
    if let Ok(scene) = import(file, &options) {
        assert!(!scene.views.is_empty());
        for v in &scene.views {
            v.camera.validate().expect("an accepted camera validates");
            let _ = v.distortion.distort(0.1, -0.2);
        }
    }
}
