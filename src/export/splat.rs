//! The `.splat` layout of antimatter15's WebGL viewer (also read by SuperSplat, gsplat.js,
//! Spark; written by gsplat's exporter): no header, 32 bytes per Gaussian, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..12 | position, 3 × `f32` (the PLY's axes, unchanged) |
//! | 12..24 | scale, 3 × `f32`, linear (`exp` of the PLY's log-scale) |
//! | 24..28 | RGBA, 4 × `u8`: `round((0.5 + C0·f_dc) · 255)` clamped, alpha `round(sigmoid(opacity) · 255)` |
//! | 28..32 | rotation, 4 × `u8`: normalised (w, x, y, z) as `round(q · 128 + 128)` clamped |
//!
//! The format keeps **SH degree 0 only**: the view-dependent coefficients are dropped and the
//! DC term is baked into the 8-bit base colour. Reading gives a degree-0 model whose DC
//! coefficient is `(rgb/255 − 0.5)/C0` and whose opacity logit is clamped half a level inside
//! (0, 1). Writers usually sort by importance; readers do not rely on order, and ramsplat keeps
//! the model's order.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::scene::gaussians::{sh_coeffs, Gaussians};
use crate::scene::maths::{rgb_to_sh_dc, sh_dc_to_rgb};
#[cfg(test)]
use crate::scene::sh::SH_C0;

/// Bytes per Gaussian.
pub const RECORD_LEN: usize = 32;

/// Why a `.splat` file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SplatError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: {len} bytes is not a whole number of 32-byte .splat records{}",
        path.display(),
        if *len == 0 { " (the file is empty)" } else { "" }
    )]
    BadLength { path: PathBuf, len: usize },
    #[error(
        "{}: Gaussian {index} has a non-finite position or scale: the file is corrupt",
        path.display()
    )]
    NonFinite { path: PathBuf, index: usize },
    #[error("{}: cannot save: {msg}", path.display())]
    InvalidModel { path: PathBuf, msg: String },
}

fn to_u8(x: f32) -> u8 {
    x.round().clamp(0.0, 255.0) as u8
}

/// Encodes `g` (any SH degree; only DC is kept).
pub fn encode(g: &Gaussians) -> Vec<u8> {
    let mut out = Vec::with_capacity(g.len() * RECORD_LEN);
    write_records(&mut out, g).expect("writing to a Vec cannot fail");
    out
}

/// Writes `g`'s records to `w` one at a time (nothing the size of the model is held).
fn write_records(w: &mut impl Write, g: &Gaussians) -> std::io::Result<()> {
    let coeffs = sh_coeffs(g.sh_degree);
    let mut r = [0u8; RECORD_LEN];
    for i in 0..g.len() {
        for (k, v) in g.means[i].iter().enumerate() {
            r[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
        }
        for (k, v) in g.log_scales[i].iter().enumerate() {
            r[12 + 4 * k..16 + 4 * k].copy_from_slice(&v.exp().to_le_bytes());
        }
        let dc = g.sh[i * coeffs];
        for (k, &c) in dc.iter().enumerate() {
            r[24 + k] = to_u8(sh_dc_to_rgb(c) * 255.0);
        }
        let a = 1.0 / (1.0 + (-g.logit_opacities[i]).exp());
        r[27] = to_u8(a * 255.0);
        let q = g.rotations[i];
        let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        for (k, &v) in q.iter().enumerate() {
            r[28 + k] = to_u8(v / n * 128.0 + 128.0);
        }
        w.write_all(&r)?;
    }
    Ok(())
}

/// Decodes a `.splat` file's bytes (`path` only names it in errors).
pub fn decode(bytes: &[u8], path: &Path) -> Result<Gaussians, SplatError> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD_LEN) {
        return Err(SplatError::BadLength {
            path: path.to_owned(),
            len: bytes.len(),
        });
    }
    let n = bytes.len() / RECORD_LEN;
    let mut g = Gaussians {
        sh_degree: 0,
        means: Vec::with_capacity(n),
        log_scales: Vec::with_capacity(n),
        rotations: Vec::with_capacity(n),
        logit_opacities: Vec::with_capacity(n),
        sh: Vec::with_capacity(n),
    };
    for (index, r) in bytes.chunks_exact(RECORD_LEN).enumerate() {
        let f = |k: usize| f32::from_le_bytes(r[k * 4..k * 4 + 4].try_into().expect("4 bytes"));
        let mean = [f(0), f(1), f(2)];
        let scale = [f(3), f(4), f(5)];
        if !mean.iter().chain(&scale).all(|v| v.is_finite()) {
            return Err(SplatError::NonFinite {
                path: path.to_owned(),
                index,
            });
        }
        g.means.push(mean);
        // A zero scale would be −∞ in log space: clamp to the smallest positive normal.
        g.log_scales
            .push(scale.map(|s| s.abs().max(f32::MIN_POSITIVE).ln()));
        g.sh.push([24, 25, 26].map(|k| rgb_to_sh_dc(r[k] as f32 / 255.0)));
        g.logit_opacities.push(super::spz::alpha_logit(r[27]));
        let q = [28, 29, 30, 31].map(|k| (r[k] as f32 - 128.0) / 128.0);
        // An all-128 quaternion (zero) cannot be normalised: identity.
        let q = if q.iter().all(|v| *v == 0.0) {
            [1.0, 0.0, 0.0, 0.0]
        } else {
            q
        };
        g.rotations.push(q);
    }
    Ok(g)
}

/// Writes `g` to `path` atomically.
pub fn save(path: &Path, g: &Gaussians) -> Result<(), SplatError> {
    super::validate_model(g).map_err(|msg| SplatError::InvalidModel {
        path: path.to_owned(),
        msg,
    })?;
    crate::fsutil::write_atomic_with(path, &mut |w| write_records(w, g)).map_err(|source| {
        SplatError::Io {
            path: path.to_owned(),
            source,
        }
    })
}

/// Reads a `.splat` file.
pub fn load(path: &Path) -> Result<Gaussians, SplatError> {
    let bytes = crate::fsutil::read_file(path).map_err(|source| SplatError::Io {
        path: path.to_owned(),
        source,
    })?;
    decode(&bytes, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_web_viewers() {
        let g = Gaussians {
            sh_degree: 1,
            means: vec![[1.0, -2.0, 3.5]],
            log_scales: vec![[0.0, 1.0f32.ln() - 1.0, -2.0]],
            rotations: vec![[2.0, 0.0, 0.0, 0.0]],
            logit_opacities: vec![0.0],
            sh: vec![[0.0, 1.0, -1.0], [0.3, 0.3, 0.3], [0.0; 3], [0.0; 3]],
        };
        let b = encode(&g);
        assert_eq!(b.len(), 32);
        assert_eq!(f32::from_le_bytes(b[4..8].try_into().unwrap()), -2.0);
        assert_eq!(f32::from_le_bytes(b[12..16].try_into().unwrap()), 1.0);
        assert!((f32::from_le_bytes(b[20..24].try_into().unwrap()) - (-2.0f32).exp()).abs() < 1e-7);
        // DC 0 → 0.5 → 128; DC 1 → 0.782 → 199; alpha sigmoid(0) = 0.5 → 128.
        assert_eq!(&b[24..28], &[128, 199, 56, 128]);
        assert_eq!(&b[28..32], &[255, 128, 128, 128]);
        let back = decode(&b, Path::new("x.splat")).unwrap();
        assert_eq!(back.sh_degree, 0);
        assert_eq!(back.means, g.means);
        assert!((back.log_scales[0][2] + 2.0).abs() < 1e-6);
        assert!((back.sh[0][1] - 1.0).abs() < 0.5 / 255.0 / SH_C0 as f32 + 1e-6);
        assert!(back.logit_opacities[0].abs() < 0.02);
    }

    /// `save` writes record by record what `encode` returns at once.
    #[test]
    fn saving_streams_what_encode_returns() {
        let dir = tempfile::tempdir().unwrap();
        let g = crate::export::spz::tests::model(257, 3, 9);
        let path = dir.path().join("m.splat");
        save(&path, &g).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), encode(&g));
        assert_eq!(encode(&g).len(), 257 * RECORD_LEN);
    }

    #[test]
    fn bad_lengths_and_values_are_refused() {
        let p = Path::new("m.splat");
        assert!(matches!(
            decode(&[], p),
            Err(SplatError::BadLength { len: 0, .. })
        ));
        assert!(matches!(
            decode(&[0; 33], p),
            Err(SplatError::BadLength { len: 33, .. })
        ));
        let mut b = vec![0u8; 64];
        b[32..36].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = decode(&b, p).unwrap_err();
        assert!(matches!(e, SplatError::NonFinite { index: 1, .. }), "{e}");
        // All-zero records load (zero scale and quaternion are repaired, not NaN).
        let g = decode(&[128; 32], p).unwrap();
        assert!(g.log_scales[0].iter().all(|v| v.is_finite()));
    }
}
