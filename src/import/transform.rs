//! `gs-pack convert --points-transform FILE`: the affine map that moves a point cloud into the
//! cameras' frame, applied by the PLY, PCD and LAS readers to every position in `f64`, before
//! it is rounded to the pack's `f32`.
//!
//! A laser scan or a survey-grade cloud usually lives in its own frame (a scanner's, or a
//! projected CRS such as UTM, millions of metres from the origin), while the photos' cameras
//! live in the frame structure-from-motion chose. The tools that register one to the other
//! write the result as a small text file, and this module reads the three shapes they use:
//!
//! - **16 numbers**: a 4×4 homogeneous matrix, row by row (CloudCompare's registration matrix
//!   file, `numpy.savetxt` of an Open3D or PDAL transformation). Its last row must be
//!   `0 0 0 1`: a matrix whose last *column* is `0 0 0 1` instead is refused as transposed.
//! - **12 numbers**: the same matrix without its last row (3×4).
//! - **8 numbers**: COLMAP's `Sim3d` file (`scale qw qx qy qz tx ty tz`, what `colmap
//!   model_aligner --transform_path` writes), `x' = scale · R(q) · x + t`, with a unit
//!   quaternion.
//!
//! Numbers are separated by white space, commas, semicolons or brackets; `#` starts a comment.
//! Each must be finite, and the 3×3 part invertible. The map may be any such affine map (a
//! vertical datum in feet under horizontal metres scales one axis): positions are mapped by it,
//! normals by its inverse transpose, then renormalised. `--invert-points-transform` applies
//! its inverse, for a file that maps the other way (COLMAP's aligner maps the model *to* the
//! reference frame; a scan in that frame needs the inverse to reach the model's).
//!
//! Precision is why it is applied here and not to the packed points: `f32` values are 3 cm
//! apart at a UTM easting of 500 km and 25 cm apart at a northing of 4,000 km, and rounding
//! before moving the cloud to a local origin would keep that error.

use std::fmt;
use std::path::Path;

use super::ImportError;
use crate::scene::maths::quat_to_rot;

/// The most bytes a transform file may hold: 16 numbers need far less; this refuses a point
/// cloud or an image given by mistake before reading it all.
pub const MAX_FILE_BYTES: u64 = 64 << 10;

/// An invertible affine map of 3D points, `x' = A x + t`.
#[derive(Clone, Debug, PartialEq)]
pub struct PointsTransform {
    /// `A`, row-major.
    a: [[f64; 3]; 3],
    t: [f64; 3],
    /// `A⁻¹` transposed: maps normals.
    normal: [[f64; 3]; 3],
}

fn det(a: &[[f64; 3]; 3]) -> f64 {
    a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
}

/// `A⁻¹` by cofactors, for an `A` whose determinant `d` is non-zero.
fn inverse(a: &[[f64; 3]; 3], d: f64) -> [[f64; 3]; 3] {
    let c =
        |r0: usize, r1: usize, c0: usize, c1: usize| a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0];
    // The adjugate is the transposed cofactor matrix.
    [
        [c(1, 2, 1, 2) / d, -c(0, 2, 1, 2) / d, c(0, 1, 1, 2) / d],
        [-c(1, 2, 0, 2) / d, c(0, 2, 0, 2) / d, -c(0, 1, 0, 2) / d],
        [c(1, 2, 0, 1) / d, -c(0, 2, 0, 1) / d, c(0, 1, 0, 1) / d],
    ]
}

fn transpose(a: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| a[c][r]))
}

fn mul(a: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|r| a[r][0] * v[0] + a[r][1] * v[1] + a[r][2] * v[2])
}

/// Why a transform is refused (the caller names the file).
#[derive(Clone, Debug, PartialEq)]
pub struct TransformError(pub String);

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PointsTransform {
    /// The map `x' = A x + t`, refused when not finite or when `A` is singular.
    pub fn new(a: [[f64; 3]; 3], t: [f64; 3]) -> Result<PointsTransform, TransformError> {
        if a.iter().flatten().chain(&t).any(|v| !v.is_finite()) {
            return Err(TransformError(
                "it holds a number that is not finite".into(),
            ));
        }
        let d = det(&a);
        // Relative to the columns' lengths, so a map that shrinks everything a millionfold is
        // still invertible and a flattening one is not.
        let scale: f64 = (0..3)
            .map(|c| (0..3).map(|r| a[r][c] * a[r][c]).sum::<f64>().sqrt())
            .product();
        let invertible = d.is_finite() && scale.is_finite() && d.abs() > 1e-12 * scale;
        if !invertible || scale == 0.0 {
            return Err(TransformError(format!(
                "its 3×3 part is singular (determinant {d:e}): it would flatten the cloud; check \
                 that it is the registration's matrix"
            )));
        }
        Ok(PointsTransform {
            a,
            t,
            normal: transpose(&inverse(&a, d)),
        })
    }

    /// Reads the numbers of a transform file's text (see the module documentation).
    pub fn parse(text: &str) -> Result<PointsTransform, TransformError> {
        let mut numbers = Vec::new();
        for (line_no, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            for token in line
                .split(|c: char| c.is_whitespace() || ",;[]".contains(c))
                .filter(|s| !s.is_empty())
            {
                let v: f64 = token.parse().map_err(|_| {
                    TransformError(format!(
                        "line {}: `{token}` is not a number; the file must hold 16 (a 4×4 \
                         matrix), 12 (3×4) or 8 numbers (COLMAP's scale qw qx qy qz tx ty tz)",
                        line_no + 1
                    ))
                })?;
                if !v.is_finite() {
                    return Err(TransformError(format!(
                        "line {}: `{token}` is not a finite number",
                        line_no + 1
                    )));
                }
                numbers.push(v);
            }
        }
        match numbers.len() {
            16 => {
                let last_row = &numbers[12..16];
                if last_row != [0.0, 0.0, 0.0, 1.0] {
                    let last_column = [numbers[3], numbers[7], numbers[11], numbers[15]];
                    let hint = if last_column == [0.0, 0.0, 0.0, 1.0] {
                        ": its last column is, so it is written column by column (transposed); \
                         write it row by row, translation in the last column"
                    } else {
                        ": it is not an affine map (a projective one cannot move points rigidly)"
                    };
                    return Err(TransformError(format!(
                        "the 4×4 matrix's last row is {last_row:?}, not [0, 0, 0, 1]{hint}"
                    )));
                }
                Self::from_rows(&numbers[..12])
            }
            12 => Self::from_rows(&numbers),
            8 => {
                let (s, q, t) = (
                    numbers[0],
                    &numbers[1..5],
                    [numbers[5], numbers[6], numbers[7]],
                );
                if s <= 0.0 {
                    return Err(TransformError(format!(
                        "COLMAP's scale (the first of its 8 numbers) is {s}, not positive"
                    )));
                }
                let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
                if (norm - 1.0).abs() > 1e-6 {
                    return Err(TransformError(format!(
                        "COLMAP's rotation qw qx qy qz (numbers 2 to 5) has length {norm}, not 1: \
                         it is not a unit quaternion, or the numbers are not in COLMAP's order \
                         (scale qw qx qy qz tx ty tz)"
                    )));
                }
                let r = quat_to_rot([q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm]);
                Self::new(r.map(|row| row.map(|v| s * v)), t)
            }
            n => Err(TransformError(format!(
                "it holds {n} numbers; a transform is 16 (a 4×4 matrix, row by row), 12 (its \
                 first three rows) or 8 (COLMAP's scale qw qx qy qz tx ty tz)"
            ))),
        }
    }

    fn from_rows(rows: &[f64]) -> Result<PointsTransform, TransformError> {
        let a = std::array::from_fn(|r| std::array::from_fn(|c| rows[4 * r + c]));
        let t = std::array::from_fn(|r| rows[4 * r + 3]);
        Self::new(a, t)
    }

    /// Reads a transform file (at most [`MAX_FILE_BYTES`]), errors naming it.
    pub fn from_file(path: &Path) -> Result<PointsTransform, ImportError> {
        let len = std::fs::metadata(path)
            .map_err(|e| ImportError::io(path, e))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(ImportError::invalid(
                path,
                format!(
                    "the --points-transform file is {len} bytes; a transform is a few numbers \
                     (at most {MAX_FILE_BYTES} bytes): is this the right file?"
                ),
            ));
        }
        let bytes = crate::fsutil::read_file(path).map_err(|e| ImportError::io(path, e))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ImportError::invalid(
                path,
                "the --points-transform file is not text: it must hold the transform's numbers",
            )
        })?;
        Self::parse(&text).map_err(|e| {
            ImportError::invalid(path, format!("the --points-transform file is refused: {e}"))
        })
    }

    /// The inverse map.
    pub fn inverse(&self) -> PointsTransform {
        let d = det(&self.a);
        let a = inverse(&self.a, d);
        let t = mul(&a, self.t).map(|v| -v);
        PointsTransform {
            normal: transpose(&self.a),
            a,
            t,
        }
    }

    /// Maps a position.
    pub fn point(&self, p: [f64; 3]) -> [f64; 3] {
        let q = mul(&self.a, p);
        std::array::from_fn(|r| q[r] + self.t[r])
    }

    /// Maps a normal: by `A`'s inverse transpose, renormalised to its original length (unit
    /// normals stay unit; a zero normal stays zero).
    pub fn normal(&self, n: [f32; 3]) -> [f32; 3] {
        let n64 = n.map(f64::from);
        let len = n64.iter().map(|v| v * v).sum::<f64>().sqrt();
        let m = mul(&self.normal, n64);
        let m_len = m.iter().map(|v| v * v).sum::<f64>().sqrt();
        if len == 0.0 || m_len == 0.0 || !m_len.is_finite() {
            return n;
        }
        m.map(|v| (v / m_len * len) as f32)
    }

    /// How much the map scales lengths, on average over directions (the cube root of its
    /// determinant's magnitude): how a file's quantum grows or shrinks in the cameras' frame.
    pub fn mean_scale(&self) -> f64 {
        det(&self.a).abs().cbrt()
    }

    /// The 3×4 matrix `[A | t]`, row by row (recorded in the manifest).
    pub fn rows(&self) -> [[f64; 4]; 3] {
        std::array::from_fn(|r| [self.a[r][0], self.a[r][1], self.a[r][2], self.t[r]])
    }

    /// A one-line description for the user: a similarity as its scale, rotation angle and
    /// translation, anything else as an affine map.
    pub fn describe(&self) -> String {
        let s = self.mean_scale();
        let ata = mul3(&transpose(&self.a), &self.a);
        let similar = (0..3).all(|r| {
            (0..3).all(|c| {
                let want = if r == c { s * s } else { 0.0 };
                (ata[r][c] - want).abs() <= 1e-6 * s * s
            })
        });
        let t = self.t;
        if similar {
            let trace = (self.a[0][0] + self.a[1][1] + self.a[2][2]) / s;
            let reflect = det(&self.a) < 0.0;
            let angle = if reflect {
                // A reflection times a rotation: report the rotation of −A.
                ((-trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos()
            } else {
                ((trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos()
            };
            format!(
                "scale {s:.6}, rotation {:.3}°{}, translation ({}, {}, {})",
                angle.to_degrees(),
                if reflect { " with a reflection" } else { "" },
                t[0],
                t[1],
                t[2]
            )
        } else {
            format!(
                "an affine map that scales axes differently (mean scale {s:.6}), translation \
                 ({}, {}, {})",
                t[0], t[1], t[2]
            )
        }
    }
}

fn mul3(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| (0..3).map(|k| a[r][k] * b[k][c]).sum()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [f64; 3], b: [f64; 3], tol: f64) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    fn refused(text: &str, needle: &str) {
        match PointsTransform::parse(text) {
            Err(e) => assert!(e.0.contains(needle), "{e}"),
            Ok(t) => panic!("accepted {text:?} as {t:?}, expected {needle:?}"),
        }
    }

    // A rotation of 90° about z, scale 2, translation (10, 20, 30), written three ways.
    const MATRIX: &str = "# CloudCompare registration\n\
        0 -2 0 10\n2 0 0 20\n0 0 2 30\n0 0 0 1\n";

    #[test]
    fn the_three_shapes_give_the_same_map() {
        let four = PointsTransform::parse(MATRIX).unwrap();
        let three =
            PointsTransform::parse("[[0, -2, 0, 10], [2, 0, 0, 20], [0, 0, 2, 30]]").unwrap();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let colmap = PointsTransform::parse(&format!("2 {h} 0 0 {h} 10 20 30\n")).unwrap();
        for t in [&four, &three, &colmap] {
            assert!(close(t.point([1.0, 0.0, 0.0]), [10.0, 22.0, 30.0], 1e-12));
            assert!(close(t.point([0.0, 1.0, 1.0]), [8.0, 20.0, 32.0], 1e-12));
            assert!((t.mean_scale() - 2.0).abs() < 1e-12);
            assert!(
                t.describe()
                    .starts_with("scale 2.000000, rotation 90.000°,"),
                "{}",
                t.describe()
            );
        }
        assert_eq!(four, three);
    }

    #[test]
    fn the_inverse_undoes_the_map_and_normals_stay_unit() {
        // A general affine map: vertical feet under horizontal metres, and a shear.
        let t = PointsTransform::new(
            [[1.0, 0.2, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.3048]],
            [500_000.0, -4_000_000.0, 12.0],
        )
        .unwrap();
        let p = [123.456, -7.5, 1e3];
        assert!(close(t.inverse().point(t.point(p)), p, 1e-9));
        assert!(close(t.point(t.inverse().point(p)), p, 1e-6));
        assert!(
            t.describe().starts_with("an affine map"),
            "{}",
            t.describe()
        );
        // A normal stays perpendicular to the surface it belongs to: take the plane spanned by
        // two tangents, map them, and check the mapped normal against the mapped tangents.
        let (u, v): ([f64; 3], [f64; 3]) = ([1.0, 2.0, 0.5], [0.0, -1.0, 3.0]);
        let n = [
            u[1] * v[2] - u[2] * v[1],
            u[2] * v[0] - u[0] * v[2],
            u[0] * v[1] - u[1] * v[0],
        ];
        let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
        let n = n.map(|x| (x / len) as f32);
        let m = t.normal(n).map(f64::from);
        let map_tangent = |w: [f64; 3]| {
            let (a, b) = (t.point(w), t.point([0.0; 3]));
            [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
        };
        for w in [map_tangent(u), map_tangent(v)] {
            let dot: f64 = (0..3).map(|k| m[k] * w[k]).sum();
            assert!(dot.abs() < 1e-6, "{dot}");
        }
        assert!(((m[0] * m[0] + m[1] * m[1] + m[2] * m[2]).sqrt() - 1.0).abs() < 1e-6);
        assert_eq!(t.normal([0.0; 3]), [0.0; 3]);
        // A reflection is an invertible map too.
        let mirror = PointsTransform::new(
            [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            [0.0; 3],
        )
        .unwrap();
        assert!(
            mirror.describe().contains("with a reflection"),
            "{}",
            mirror.describe()
        );
    }

    #[test]
    fn a_utm_scan_moved_to_a_local_origin_keeps_millimetres() {
        // The reason positions are mapped in f64: at a UTM northing of 4,000 km, f32 values
        // are 25 cm apart, and rounding first would keep that error after the move.
        let t = PointsTransform::parse("1 0 0 -500000\n0 1 0 -4000000\n0 0 1 -100\n").unwrap();
        let p = [500_012.345_6, 4_000_007.891_2, 101.25];
        let moved = t.point(p).map(|v| v as f32);
        assert!((f64::from(moved[0]) - 12.3456).abs() < 1e-6);
        assert!((f64::from(moved[1]) - 7.8912).abs() < 1e-6);
        let rounded_first = t.point(p.map(|v| f64::from(v as f32)));
        assert!((rounded_first[1] - 7.8912).abs() > 0.05);
    }

    #[test]
    fn damaged_files_are_refused_saying_why() {
        refused("1 2 3", "holds 3 numbers");
        refused("1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1 9", "holds 17 numbers");
        refused("1 0 0 x\n", "line 1: `x` is not a number");
        refused(
            "1 0 0 0\n0 1 0 0\n0 0 1 nan\n",
            "line 3: `nan` is not a finite number",
        );
        refused("1 0 0 0\n0 1 0 0\n0 0 0 0\n", "singular");
        // Transposed: the translation in the last row.
        refused(
            "1 0 0 0\n0 1 0 0\n0 0 1 0\n5 6 7 1\n",
            "written column by column (transposed)",
        );
        refused("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 1 2\n", "not an affine map");
        refused("0 1 0 0 0 1 2 3", "scale (the first of its 8 numbers) is 0");
        refused("1 1 1 0 0 0 0 0", "has length 1.414");
    }

    #[test]
    fn files_are_read_with_their_name_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("T.txt");
        std::fs::write(&good, MATRIX).unwrap();
        assert!(PointsTransform::from_file(&good).is_ok());
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, "1 2 3").unwrap();
        let e = PointsTransform::from_file(&bad).unwrap_err().to_string();
        assert!(
            e.contains("bad.txt") && e.contains("holds 3 numbers"),
            "{e}"
        );
        let big = dir.path().join("cloud.ply");
        std::fs::write(&big, vec![b'1'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = PointsTransform::from_file(&big).unwrap_err().to_string();
        assert!(
            e.contains("cloud.ply") && e.contains("is this the right file"),
            "{e}"
        );
        let binary = dir.path().join("bin.txt");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        let e = PointsTransform::from_file(&binary).unwrap_err().to_string();
        assert!(e.contains("not text"), "{e}");
    }
}
