//! E57 files for tests, seeds and benchmarks, written in memory by the `e57` crate's writer:
//! scans with Cartesian (double or scaled-integer) or spherical coordinates, invalid states,
//! colour with an invalid flag, and poses.

use std::io::Cursor;

use e57::{
    ColorLimits, E57Writer, Quaternion, Record, RecordDataType, RecordName, RecordValue, Transform,
    Translation,
};

/// How a scan stores its positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum E57Coords {
    /// `cartesianX/Y/Z` as doubles.
    CartesianF64,
    /// `cartesianX/Y/Z` as integers of 0.1 mm in ±100 km.
    CartesianScaled,
    /// `sphericalRange/Azimuth/Elevation` as doubles (a point's `xyz` holds them).
    Spherical,
}

/// One point as written: `xyz` is Cartesian or (range, azimuth, elevation) by the scan's
/// [`E57Coords`]; `invalid` the coordinates' invalid state (0 valid, 1 direction, 2 none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct E57Point {
    pub xyz: [f64; 3],
    pub rgb: [u8; 3],
    pub invalid: u8,
    pub colour_invalid: bool,
}

/// One scan of a file.
#[derive(Clone, Debug)]
pub struct E57Scan {
    pub name: String,
    pub coords: E57Coords,
    pub points: Vec<E57Point>,
    /// Writes `colorRed/Green/Blue` (0 to 255) and `isColorInvalid`.
    pub colour: bool,
    /// Writes the coordinates' invalid-state field.
    pub invalid_states: bool,
    /// Rotation quaternion (w, x, y, z) and translation.
    pub pose: Option<([f64; 4], [f64; 3])>,
}

impl E57Scan {
    /// `n` points on a 1 cm grid with varied colours, Cartesian doubles, no pose.
    pub fn grid(n: usize, colour: bool) -> E57Scan {
        let points = (0..n)
            .map(|i| E57Point {
                xyz: [
                    (i % 1000) as f64 * 0.01,
                    (i / 1000) as f64 * 0.01,
                    ((i * 7) % 13) as f64 * 0.01,
                ],
                rgb: [(i % 251) as u8, (i * 3 % 256) as u8, (i * 11 % 241) as u8],
                invalid: 0,
                colour_invalid: false,
            })
            .collect();
        E57Scan {
            name: format!("grid of {n}"),
            coords: E57Coords::CartesianF64,
            points,
            colour,
            invalid_states: false,
            pose: None,
        }
    }
}

/// The bytes of an E57 file holding `scans`.
pub fn e57_bytes(scans: &[E57Scan]) -> Vec<u8> {
    let mut file = Cursor::new(Vec::new());
    {
        let mut w = E57Writer::new(&mut file, "{ramsplat-synth}").expect("writer");
        for (k, scan) in scans.iter().enumerate() {
            let mut proto = Vec::new();
            let scaled = RecordDataType::ScaledInteger {
                min: -1_000_000_000,
                max: 1_000_000_000,
                scale: 1e-4,
                offset: 0.0,
            };
            let (names, ty) = match scan.coords {
                E57Coords::CartesianF64 => (
                    [
                        RecordName::CartesianX,
                        RecordName::CartesianY,
                        RecordName::CartesianZ,
                    ],
                    RecordDataType::F64,
                ),
                E57Coords::CartesianScaled => (
                    [
                        RecordName::CartesianX,
                        RecordName::CartesianY,
                        RecordName::CartesianZ,
                    ],
                    scaled,
                ),
                E57Coords::Spherical => (
                    [
                        RecordName::SphericalRange,
                        RecordName::SphericalAzimuth,
                        RecordName::SphericalElevation,
                    ],
                    RecordDataType::F64,
                ),
            };
            for name in names {
                proto.push(Record {
                    name,
                    data_type: ty.clone(),
                });
            }
            if scan.invalid_states {
                proto.push(Record {
                    name: if scan.coords == E57Coords::Spherical {
                        RecordName::SphericalInvalidState
                    } else {
                        RecordName::CartesianInvalidState
                    },
                    data_type: RecordDataType::Integer { min: 0, max: 2 },
                });
            }
            if scan.colour {
                for name in [
                    RecordName::ColorRed,
                    RecordName::ColorGreen,
                    RecordName::ColorBlue,
                ] {
                    proto.push(Record {
                        name,
                        data_type: RecordDataType::U8,
                    });
                }
                proto.push(Record {
                    name: RecordName::IsColorInvalid,
                    data_type: RecordDataType::Integer { min: 0, max: 1 },
                });
            }
            let mut pc = w
                .add_pointcloud(&format!("{{scan-{k}}}"), proto)
                .expect("point cloud");
            pc.set_name(Some(scan.name.clone()));
            if let Some((q, t)) = scan.pose {
                pc.set_transform(Some(Transform {
                    rotation: Quaternion {
                        w: q[0],
                        x: q[1],
                        y: q[2],
                        z: q[3],
                    },
                    translation: Translation {
                        x: t[0],
                        y: t[1],
                        z: t[2],
                    },
                }));
            }
            if scan.colour {
                let int = |v| Some(RecordValue::Integer(v));
                pc.set_color_limits(Some(ColorLimits {
                    red_min: int(0),
                    red_max: int(255),
                    green_min: int(0),
                    green_max: int(255),
                    blue_min: int(0),
                    blue_max: int(255),
                }));
            }
            for p in &scan.points {
                let mut values: Vec<RecordValue> = match scan.coords {
                    E57Coords::CartesianScaled => p
                        .xyz
                        .iter()
                        .map(|v| RecordValue::ScaledInteger((v / 1e-4).round() as i64))
                        .collect(),
                    _ => p.xyz.iter().map(|&v| RecordValue::Double(v)).collect(),
                };
                if scan.invalid_states {
                    values.push(RecordValue::Integer(i64::from(p.invalid)));
                }
                if scan.colour {
                    values.extend(p.rgb.map(|c| RecordValue::Integer(i64::from(c))));
                    values.push(RecordValue::Integer(i64::from(p.colour_invalid)));
                }
                pc.add_point(values).expect("point");
            }
            pc.finalize().expect("finalize point cloud");
        }
        w.finalize().expect("finalize file");
    }
    file.into_inner()
}
