//! Running `gs-pack` from the point-cloud tests (`tests/las_import.rs`, `tests/e57_import.rs`,
//! `tests/points_transform.rs`, `tests/metashape.rs`) and reading back the points it packed.
//! A test binary includes it with `#[path = "common/gs_pack.rs"] mod gs_pack;` (it is not part
//! of `common`, which other test binaries include); each uses what it needs.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use ramsplat::shard::reader::Pack;
use ramsplat::shard::PointChunkRef;

/// Runs `gs-pack` with `args`.
pub fn gs_pack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args(args)
        .output()
        .expect("run gs-pack")
}

/// A run's status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every point of `pack`'s cloud `cloud`: position, colour, label.
pub fn packed(pack: &Path, cloud: usize) -> Vec<([f32; 3], [u8; 3], Option<i32>)> {
    let p = Pack::open(pack).unwrap();
    let mut out = Vec::new();
    for (ci, ch) in p.manifest().clouds[cloud].chunks.iter().enumerate() {
        let mut buf = vec![0u8; ch.record.decoded_len as usize];
        let layout = p.read_chunk_into(cloud, ci, &mut buf).unwrap();
        let r = PointChunkRef::new(layout, &buf).unwrap();
        for j in 0..r.len() {
            out.push((r.xyz(j), r.rgb(j), r.label(j)));
        }
    }
    out
}
