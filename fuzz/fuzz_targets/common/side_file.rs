//! What the fuzz targets of a view's side files (loss masks, depth maps) share: the input
//! written as the file, its stored size, the lens and the resize the mode byte picks, and the
//! size the view is packed at, which an accepted side file must have.

use std::path::PathBuf;

use ramsplat::dataset::{Distortion, ViewSource};
use ramsplat::import::image::{covered_rect, target_size, Resize};

/// The input as a file in this process's folder for its target.
pub struct SideFile {
    pub dir: PathBuf,
    pub path: PathBuf,
    /// The image header's size, or (16, 12) when it is unreadable (the reader must then fail).
    pub stored: (u32, u32),
}

/// Writes `data` as `name` in this process's folder for `target`; `None` when it cannot be
/// written or its header declares more than `max_pixels` (each execution is kept small; the
/// decoder limits already bound the allocation).
pub fn write(target: &str, name: &str, data: &[u8], max_pixels: u64) -> Option<SideFile> {
    let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-{target}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    std::fs::write(&path, data).ok()?;
    let stored = image::ImageReader::open(&path)
        .ok()
        .and_then(|r| r.with_guessed_format().ok())
        .and_then(|r| r.into_dimensions().ok())
        .unwrap_or((16, 12));
    (stored.0 as u64 * stored.1 as u64 <= max_pixels).then_some(SideFile { dir, path, stored })
}

/// The view's lens: a mild barrel distortion (so the view is undistorted) when bit 2 of `mode`
/// is set, else none.
pub fn lens(mode: u8) -> Distortion {
    if mode & 4 != 0 {
        Distortion::RadialTangential {
            k: [0.05, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0; 2],
        }
    } else {
        Distortion::NONE
    }
}

/// Halved when bit 3 of `mode` is set, else the stored size.
pub fn resize(mode: u8) -> Resize {
    if mode & 8 != 0 {
        Resize::Downscale(2)
    } else {
        Resize::None
    }
}

/// The size the view's image is packed at: the window of its undistorted image that the lens
/// covers (the whole image without distortion), then resized.
pub fn packed_size(view: &ViewSource, resize: Resize) -> (u32, u32) {
    let c = &view.camera;
    let rect = covered_rect(
        c.width,
        c.height,
        &c.intrinsics,
        &view.distortion,
        c.projection,
    );
    target_size(rect.width(), rect.height(), resize)
}
