//! Export formats for trained models, and [`nerfstudio`], a pack's views, cameras, split and
//! points as a nerfstudio-style folder or (with [`colmap`]) a COLMAP sparse model
//! (`gs-pack export`) for other trainers.
//!
//! Owns [`cameras_json`], the 3DGS `cameras.json` camera list, [`cfg_args`], 3DGS's record of
//! a run's dataset and loading options, [`spz`], [`splat`], [`compressed_ply`] and [`sog`]
//! (the compressed and web-viewer model formats, read and written; [`quantize`] builds SOG's
//! codebooks, [`webp`] encodes its images and [`zip`] writes its archive), and [`ply`], the standard 3D Gaussian Splatting PLY layout (the format every 3DGS viewer and
//! the original implementation read and write), in both directions: saving a
//! [`crate::scene::gaussians::Gaussians`] and loading one back for `gs-render`, evaluation and
//! resuming.
//!
//! Besides the Gaussians, a model file may say how it is meant to be rendered ([`ModelInfo`]:
//! antialiased or classic); PLY and compressed PLY (a header comment), SPZ (its header's
//! antialiased flag) and SOG (`meta.json`'s `model`) carry it, `.splat` cannot.
//!
//! Invariants: PLY files hold *stored* (pre-activation) values exactly as [`Gaussians`] does,
//! so a PLY save/load round trip is bit-exact (the other formats quantise, each within the
//! bounds its module states); a file is written under a temporary name and renamed into
//! place, so a reader never sees a half-written model; loading parses the file with the crate's
//! one PLY parser ([`crate::import::ply`]) and looks properties up by name.
//!
//! [`Gaussians`]: crate::scene::gaussians::Gaussians

pub mod cameras_json;
pub mod cfg_args;
pub mod colmap;
pub mod compressed_ply;
pub mod nerfstudio;
pub mod ply;
pub mod quantize;
pub mod sog;
pub mod splat;
pub mod spz;
pub mod webp;
pub mod zip;

use std::path::Path;

use crate::scene::gaussians::Gaussians;

/// The model formats a trained model can be written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelFormat {
    Ply,
    Spz,
    Splat,
    /// PlayCanvas/SuperSplat's compressed PLY (`*.compressed.ply`).
    CompressedPly,
    /// PlayCanvas's SOG, bundled (`*.sog`); read also unbundled, from a `meta.json`.
    Sog,
}

impl ModelFormat {
    /// The format a file name selects, case-insensitively: a name ending in
    /// `.compressed.ply` is [`ModelFormat::CompressedPly`] (checked before the plain `.ply`
    /// rule), otherwise the extension `.ply`, `.spz` or `.splat`.
    pub fn from_path(path: &Path) -> Option<ModelFormat> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        if name.len() > ".compressed.ply".len() && name.ends_with(".compressed.ply") {
            return Some(ModelFormat::CompressedPly);
        }
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "ply" | "spz" | "splat" | "sog" => ModelFormat::from_name(&ext),
            _ => None,
        }
    }

    /// `ply`, `spz`, `splat`, `compressed-ply` (also `compressed_ply`) or `sog`.
    pub fn from_name(name: &str) -> Option<ModelFormat> {
        match name {
            "ply" => Some(ModelFormat::Ply),
            "spz" => Some(ModelFormat::Spz),
            "splat" => Some(ModelFormat::Splat),
            "sog" => Some(ModelFormat::Sog),
            "compressed-ply" | "compressed_ply" => Some(ModelFormat::CompressedPly),
            _ => None,
        }
    }

    /// What follows the stem in a file of this format (`compressed.ply` for compressed PLY,
    /// so `Path::with_extension` gives `point_cloud.compressed.ply`).
    pub fn extension(self) -> &'static str {
        match self {
            ModelFormat::Ply => "ply",
            ModelFormat::Spz => "spz",
            ModelFormat::Splat => "splat",
            ModelFormat::CompressedPly => "compressed.ply",
            ModelFormat::Sog => "sog",
        }
    }
}

/// Why a model could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ModelIoError {
    #[error(transparent)]
    Ply(#[from] ply::GaussianPlyError),
    #[error(transparent)]
    Spz(#[from] spz::SpzError),
    #[error(transparent)]
    Splat(#[from] splat::SplatError),
    /// Boxed: its record-naming variants are larger than the others.
    #[error(transparent)]
    CompressedPly(Box<compressed_ply::CompressedPlyError>),
    #[error(transparent)]
    Sog(#[from] sog::SogError),
    #[error(
        "{}: a streamed SOG (levels of detail in chunks), which is not read; give one chunk's \
         meta.json (a folder beside it), or convert the scene to one SOG or PLY with \
         splat-transform",
        path.display()
    )]
    StreamedSog { path: std::path::PathBuf },
    #[error(
        "{}: unknown model format (expected .ply, .spz, .splat, .compressed.ply, .sog or a \
         SOG's meta.json)",
        path.display()
    )]
    UnknownFormat { path: std::path::PathBuf },
    #[error(
        "{}: {kind}, not a model file; give the path of a .ply, .spz, .splat, .compressed.ply, \
         .sog or a SOG's meta.json",
        path.display()
    )]
    NotAFile {
        path: std::path::PathBuf,
        kind: &'static str,
    },
}

impl From<compressed_ply::CompressedPlyError> for ModelIoError {
    fn from(e: compressed_ply::CompressedPlyError) -> Self {
        ModelIoError::CompressedPly(Box::new(e))
    }
}

/// How a model is meant to be rendered, as far as its file says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelInfo {
    /// Trained with antialiased rasterization ([`crate::render::RenderOptions::antialiased`]):
    /// rendering it classic shows its small splats too bright and too wide. PLY and compressed
    /// PLY: a header comment `rasterize_mode antialiased` ([`ply::ANTIALIASED_COMMENT`]); SPZ:
    /// header flag `0x1`; SOG: `"model": "antialiased"` in its `meta.json`;
    /// `.splat` has no room for it (always `false` when read).
    pub antialiased: bool,
    /// When read: the file's SH degree if it is above [`MAX_SH_DEGREE`] (SPZ, whose writer
    /// takes degree 4, and a PLY of 72 `f_rest_*`). The model keeps degrees 0–3: the higher
    /// band is dropped, which a loader's caller says. Ignored by the writers.
    ///
    /// [`MAX_SH_DEGREE`]: crate::scene::gaussians::MAX_SH_DEGREE
    pub cut_sh_degree: Option<u32>,
    /// When read: the file held Mip-Splatting's 3D smoothing filter (a PLY's `filter_3D`
    /// property), now folded into the model's scales and opacities
    /// ([`crate::scene::filter3d`]), which a loader's caller says. Such a file is also read as
    /// antialiased. Ignored by the writers: they write the folded values (and
    /// [`ModelInfo::folded_filter_3d`] says so).
    pub fused_filter_3d: bool,
    /// The model's scales and opacities hold a 3D smoothing filter folded in: a model saved by
    /// `gs-train --filter-3d`, or a Mip-Splatting file whose `filter_3D` was folded in as it
    /// was read. PLY and compressed PLY carry it as a header comment
    /// ([`ply::FOLDED_FILTER_COMMENT`]; other readers skip it), so a run that trains through
    /// its own filter can take the old one out (`gs-train --init --filter-3d`); SPZ, SOG and
    /// `.splat` have no room for it.
    pub folded_filter_3d: bool,
}

impl ModelInfo {
    /// What a writer is given: the rendering mode (nothing else of the info is written).
    pub fn with_mode(antialiased: bool) -> ModelInfo {
        ModelInfo {
            antialiased,
            cut_sh_degree: None,
            fused_filter_3d: false,
            folded_filter_3d: false,
        }
    }

    /// What a writer is given for a model whose scales and opacities hold a folded 3D filter
    /// (when `folded`): the mode and the mark.
    pub fn with_folded_filter(self, folded: bool) -> ModelInfo {
        ModelInfo {
            folded_filter_3d: folded,
            ..self
        }
    }

    /// The note a loader's caller prints for a model whose 3D filter was folded in, if it was.
    pub fn filter_3d_note(&self, path: &Path) -> Option<String> {
        (self.fused_filter_3d && self.folded_filter_3d).then(|| {
            format!(
                "{} holds Mip-Splatting's 3D smoothing filter (`filter_3D`): it is folded into \
                 the scales and opacities, as Mip-Splatting's fused export does, and the model \
                 is read as antialiased (ramsplat's nearest mode to Mip-Splatting's 2D filter)",
                path.display()
            )
        })
    }

    /// The warning a loader's caller prints for a model whose SH degree was cut, if it was.
    pub fn sh_cut_note(&self, path: &Path) -> Option<String> {
        self.cut_sh_degree.map(|d| {
            format!(
                "{} stores SH degree {d}; ramsplat keeps degrees 0 to {} and dropped the rest \
                 (its view-dependent colour loses that band's detail)",
                path.display(),
                crate::scene::gaussians::MAX_SH_DEGREE
            )
        })
    }
}

/// Loads a model in the format its name selects ([`ModelFormat::from_path`]; PLY with
/// `ply_options`, and a `.ply` whose header is a compressed PLY's as one), with what the file
/// says about rendering it.
pub fn load_model(
    path: &Path,
    ply_options: &ply::LoadOptions,
) -> Result<(Gaussians, ModelInfo), ModelIoError> {
    // The kind first, from the metadata: opening a named pipe would wait for a writer forever.
    // A path that does not exist is left to the reader, whose error names it.
    if let Some(kind) = std::fs::metadata(path)
        .ok()
        .and_then(|m| crate::fsutil::not_a_file(&m))
    {
        return Err(ModelIoError::NotAFile {
            path: path.to_owned(),
            kind,
        });
    }
    if sog::is_sog_meta(path) {
        return Ok(sog::load_with_info(path)?);
    }
    if path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.to_ascii_lowercase().ends_with("lod-meta.json"))
    {
        return Err(ModelIoError::StreamedSog {
            path: path.to_owned(),
        });
    }
    match ModelFormat::from_path(path) {
        // A compressed PLY saved under a plain `.ply` name is recognised by its header.
        Some(ModelFormat::Ply) => match ply::load_with_info(path, ply_options) {
            Err(ply::GaussianPlyError::MissingProperty { .. })
                if compressed_ply::is_compressed_ply(path) =>
            {
                Ok(compressed_ply::load_with_info(path)?)
            }
            r => Ok(r?),
        },
        Some(ModelFormat::Spz) => Ok(spz::load_with_info(path)?),
        Some(ModelFormat::Splat) => Ok((splat::load(path)?, ModelInfo::default())),
        Some(ModelFormat::CompressedPly) => Ok(compressed_ply::load_with_info(path)?),
        Some(ModelFormat::Sog) => Ok(sog::load_with_info(path)?),
        None => Err(ModelIoError::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

/// Saves a model in `format` (binary PLY for [`ModelFormat::Ply`]) with `info` where the
/// format has room for it.
pub fn save_model(
    path: &Path,
    g: &Gaussians,
    format: ModelFormat,
    info: ModelInfo,
) -> Result<(), ModelIoError> {
    match format {
        ModelFormat::Ply => Ok(ply::save_with_info(
            path,
            g,
            ply::PlyEncoding::BinaryLittleEndian,
            info,
        )?),
        ModelFormat::Spz => Ok(spz::save_with_info(path, g, info)?),
        ModelFormat::Splat => Ok(splat::save(path, g)?),
        ModelFormat::CompressedPly => Ok(compressed_ply::save_with_info(path, g, info)?),
        ModelFormat::Sog => Ok(sog::save_with_info(path, g, info)?),
    }
}

/// The checks [`ply::save`] makes (consistent lengths, finite values), for every format; what
/// every reader's model satisfies too.
pub fn validate_model(g: &Gaussians) -> Result<(), String> {
    ply::validate_for_save(g)
}
