//! A run's bilateral grids on disk, beside its model: `OUT/bilateral_grids.npy`, the grids as
//! one NumPy array, and `OUT/bilateral_grids.json`, which names the view of each grid.
//!
//! The array is `[views, 12, L, Y, X]` little-endian `f32`, the layout of gsplat's
//! `BilateralGrid.grids` (so `torch.from_numpy(np.load(…))` is that parameter): coefficient
//! `c = 4·j + i` of the 3×4 matrix maps input channel `i` (3: the offset) to output channel
//! `j`, at brightness cell `l`, row `y`, column `x`. The crate holds grids cell-major
//! ([`super::bilagrid`]); the transpose is done here, both ways.
//!
//! The JSON:
//!
//! ```json
//! { "format": "ramsplat bilateral grids 1", "data": "bilateral_grids.npy",
//!   "shape": [3, 12, 8, 16, 16], "layout": "…", "views": ["IMG_0001", "IMG_0002", …] }
//! ```
//!
//! `views[k]` names grid `k` by the same key `exposure.json` uses
//! ([`super::exposure::view_keys`]: the image name's stem, or the whole view name when stems
//! repeat). `gs-render --bilateral-grids OUT/bilateral_grids.json` renders each view it names
//! through its grid, so training views score as `gs-train` scored them.
//!
//! Invariants of a file this module reads: the shape is 5 positive dimensions with 12
//! coefficients and a grid shape within [`super::bilagrid::MAX_CELLS`]; the array holds
//! exactly that many finite floats; every view name is unique.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::bilagrid::{BilateralGrids, GridShape, COEFFS, IDENTITY};

/// The JSON's file name in OUT.
pub const GRIDS_JSON: &str = "bilateral_grids.json";
/// The array's file name in OUT.
pub const GRIDS_NPY: &str = "bilateral_grids.npy";
/// The JSON's `format` value.
const FORMAT: &str = "ramsplat bilateral grids 1";
const LAYOUT: &str = "[view, coefficient, brightness cell, row, column], float32 little-endian; \
                      coefficient 4*j + i maps input channel i (r, g, b, 3: offset) to output \
                      channel j (gsplat's BilateralGrid.grids)";
const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// Why a grids file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GridFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
}

/// A run's grids, read back: each view's grid (cell-major, as [`super::bilagrid`] holds it) by
/// its key.
#[derive(Debug)]
pub struct GridFile {
    pub shape: GridShape,
    pub by_key: HashMap<String, Vec<f32>>,
}

impl GridFile {
    /// View `name`'s grid: by its stem (3DGS's image name), else by the name itself, as
    /// `exposure.json` is looked up.
    pub fn grid_of(&self, name: &str) -> Option<&[f32]> {
        self.by_key
            .get(&crate::export::cameras_json::img_name(name))
            .or_else(|| self.by_key.get(name))
            .map(Vec::as_slice)
    }
}

/// Writes the array file of `views` grids: grid `k` from `grids` (the identity beyond the grids
/// held), transposed to `[12, L, Y, X]`. Streams: holds no copy of the grids (a run's memory
/// budget counts the grids once).
pub fn write_npy(w: &mut impl Write, grids: &BilateralGrids, views: usize) -> std::io::Result<()> {
    let s = grids.shape;
    let cells = s.cells();
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({views}, {COEFFS}, {}, {}, {}), }}",
        s.l, s.y, s.x
    );
    // Magic (6) + version (2) + length (2) + header + padding + '\n', a multiple of 64.
    let unpadded = NPY_MAGIC.len() + 4 + header.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    w.write_all(NPY_MAGIC)?;
    w.write_all(&[1, 0])?;
    w.write_all(&((header.len() + pad + 1) as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    w.write_all(&vec![b' '; pad])?;
    w.write_all(b"\n")?;
    for v in 0..views {
        let grid = grids.grid(v);
        for c in 0..COEFFS {
            for cell in 0..cells {
                let value = grid.map_or(IDENTITY[c], |g| g[cell * COEFFS + c]);
                w.write_all(&value.to_le_bytes())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
fn to_npy(grids: &BilateralGrids, views: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_npy(&mut out, grids, views).expect("a Vec takes every write");
    out
}

/// The JSON naming the views of [`write_npy`]'s grids (`keys[k]`: grid `k`).
pub fn to_json(shape: GridShape, keys: &[String]) -> String {
    let v = serde_json::json!({
        "format": FORMAT,
        "data": GRIDS_NPY,
        "shape": [keys.len(), COEFFS, shape.l, shape.y, shape.x],
        "layout": LAYOUT,
        "views": keys,
    });
    serde_json::to_string_pretty(&v).expect("a JSON value serialises") + "\n"
}

/// Reads the JSON at `path` and the array it names (relative to the JSON's folder).
pub fn read(path: &Path) -> Result<GridFile, GridFileError> {
    let fail = |p: &Path, message: String| GridFileError::Format {
        path: p.to_path_buf(),
        message,
    };
    let text = crate::fsutil::read_file_to_string(path).map_err(|source| GridFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| fail(path, format!("not JSON: {e}")))?;
    if v["format"] != FORMAT {
        return Err(fail(
            path,
            format!(
                "not a bilateral grids file (\"format\" is {}, expected {FORMAT:?}); pass the \
                 {GRIDS_JSON} that gs-train --bilateral-grid wrote",
                v["format"]
            ),
        ));
    }
    let dims: Vec<u64> = v["shape"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    let [views, coeffs, l, y, x] = dims[..] else {
        return Err(fail(
            path,
            format!("\"shape\" must be 5 whole numbers, not {}", v["shape"]),
        ));
    };
    let too_big = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let shape = GridShape {
        x: too_big(x),
        y: too_big(y),
        l: too_big(l),
    };
    if coeffs != COEFFS as u64 {
        return Err(fail(
            path,
            format!("a grid cell has {COEFFS} coefficients, not {coeffs}"),
        ));
    }
    if let Some(e) = shape.invalid() {
        return Err(fail(path, e));
    }
    let keys: Vec<String> = v["views"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if keys.len() as u64 != views {
        return Err(fail(
            path,
            format!(
                "\"views\" names {} views, \"shape\" says {views}",
                keys.len()
            ),
        ));
    }
    let data = v["data"].as_str().unwrap_or(GRIDS_NPY);
    if Path::new(data).components().count() != 1 {
        return Err(fail(
            path,
            format!("\"data\" must be a file name beside it, not {data:?}"),
        ));
    }
    let npy = path.parent().unwrap_or(Path::new(".")).join(data);
    let bytes = crate::fsutil::read_file(&npy).map_err(|source| GridFileError::Io {
        path: npy.clone(),
        source,
    })?;
    let body = npy_body(&bytes, &[views, coeffs, l, y, x]).map_err(|m| fail(&npy, m))?;
    let (cells, floats) = (shape.cells(), shape.floats());
    let mut by_key = HashMap::with_capacity(keys.len());
    for (k, key) in keys.into_iter().enumerate() {
        let src = &body[4 * k * floats..4 * (k + 1) * floats];
        let mut grid = vec![0f32; floats];
        for c in 0..COEFFS {
            for cell in 0..cells {
                let at = 4 * (c * cells + cell);
                let value = f32::from_le_bytes(src[at..at + 4].try_into().expect("4 bytes"));
                if !value.is_finite() {
                    return Err(fail(
                        &npy,
                        format!("view {key:?}: coefficient {c} of cell {cell} is {value}"),
                    ));
                }
                grid[cell * COEFFS + c] = value;
            }
        }
        if by_key.insert(key.clone(), grid).is_some() {
            return Err(fail(path, format!("view {key:?} is named twice")));
        }
    }
    Ok(GridFile { shape, by_key })
}

/// The data of a version-1 `.npy` of little-endian f32 in C order with shape `dims`.
fn npy_body<'a>(bytes: &'a [u8], dims: &[u64]) -> Result<&'a [u8], String> {
    if bytes.len() < 10 || &bytes[..6] != NPY_MAGIC {
        return Err("not a NumPy .npy file (no \\x93NUMPY magic)".into());
    }
    if bytes[6] != 1 {
        return Err(format!(
            "NumPy format version {}.{}, expected 1.0",
            bytes[6], bytes[7]
        ));
    }
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = bytes
        .get(10..10 + len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("truncated or non-ASCII header")?;
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(format!(
            "expected little-endian float32 in C order, header {header:?}"
        ));
    }
    let shape = dims
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if !header.contains(&format!("'shape': ({shape})")) {
        return Err(format!("expected shape ({shape}), header {header:?}"));
    }
    let want = dims
        .iter()
        .try_fold(4u64, |a, &d| a.checked_mul(d))
        .ok_or("the shape overflows")?;
    let body = &bytes[10 + len..];
    if body.len() as u64 != want {
        return Err(format!(
            "{} bytes of data, the shape ({shape}) needs {want}",
            body.len()
        ));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_round_trip_in_gsplats_layout() {
        let shape = GridShape { x: 3, y: 2, l: 2 };
        let mut grids = BilateralGrids::new(shape);
        grids.ensure(2);
        for (i, v) in grids.values.iter_mut().enumerate() {
            *v = i as f32 * 0.5 - 3.0;
        }
        let keys = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(GRIDS_NPY), to_npy(&grids, 3)).unwrap();
        std::fs::write(dir.path().join(GRIDS_JSON), to_json(shape, &keys)).unwrap();
        let npy = std::fs::read(dir.path().join(GRIDS_NPY)).unwrap();
        assert_eq!(npy.len() % 4, 0);
        let header_end = 10 + u16::from_le_bytes([npy[8], npy[9]]) as usize;
        assert_eq!(header_end % 64, 0, "NumPy aligns the data to 64 bytes");
        // [view][coefficient][l][y][x]: view 0, coefficient 1 (one block of 12 cells past
        // coefficient 0), cell (l 1, y 0, x 2) = (1·2 + 0)·3 + 2 = 8.
        let at = header_end + 4 * (shape.cells() + 8);
        let got = f32::from_le_bytes(npy[at..at + 4].try_into().unwrap());
        assert_eq!(got, grids.grid(0).unwrap()[8 * COEFFS + 1]);

        let back = read(&dir.path().join(GRIDS_JSON)).unwrap();
        assert_eq!(back.shape, shape);
        assert_eq!(back.grid_of("a").unwrap(), grids.grid(0).unwrap());
        assert_eq!(back.grid_of("dir/b.png").unwrap(), grids.grid(1).unwrap());
        // A view beyond the grids held is written as the identity.
        assert_eq!(
            back.grid_of("c").unwrap(),
            super::super::bilagrid::identity_grid(shape)
        );
        assert!(back.grid_of("d").is_none());
    }

    #[test]
    fn damaged_files_are_refused_naming_the_problem() {
        let shape = GridShape { x: 2, y: 2, l: 1 };
        let mut grids = BilateralGrids::new(shape);
        grids.ensure(1);
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join(GRIDS_JSON);
        let npy_path = dir.path().join(GRIDS_NPY);
        let npy = to_npy(&grids, 1);
        let check = |text: &str, data: &[u8], says: &str| {
            std::fs::write(&json, text).unwrap();
            std::fs::write(&npy_path, data).unwrap();
            let e = read(&json).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        };
        let good = to_json(shape, &["a".into()]);
        check(&good, &npy[..npy.len() - 4], "bytes of data");
        check(&good, b"PK\x03\x04", "magic");
        let mut nan = npy.clone();
        let n = nan.len();
        nan[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
        check(&good, &nan, "is NaN");
        check(
            &good.replace("ramsplat", "other"),
            &npy,
            "not a bilateral grids file",
        );
        check(&good.replace("12,", "9,"), &npy, "coefficients");
        check(
            &to_json(shape, &["a".into(), "a".into()]),
            &to_npy(&grids, 2),
            "named twice",
        );
        check(
            &good.replace("\"a\"", "\"a\", \"b\""),
            &npy,
            "names 2 views",
        );
        check(
            &good.replace(GRIDS_NPY, "../x.npy"),
            &npy,
            "file name beside it",
        );
        std::fs::remove_file(&npy_path).unwrap();
        std::fs::write(&json, &good).unwrap();
        assert!(read(&json).unwrap_err().to_string().contains("cannot read"));
    }
}
