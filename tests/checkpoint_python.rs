//! A checkpoint opened from Python: `tools/checkpoint.py` reads a container written by
//! `checkpoint::save_state`, verifies its checksums, and converts it to safetensors, whose
//! arrays this test parses back and compares bit for bit with the saved model.
//!
//! Needs `python3` with numpy and xxhash. Without them the test prints a skip line and passes,
//! unless `GS_REQUIRE_REFERENCE=1` is set (CI sets it after installing both), in which case it
//! fails.

mod common;

use std::path::Path;
use std::process::Command;

use ramsplat::data::Position;
use ramsplat::scene::gaussians::{Field, Gaussians};
use ramsplat::train::checkpoint;
use ramsplat::train::densify::Model;
use ramsplat::train::{TrainConfig, TrainState};

/// A small state whose every value is distinct (pre-activation, plausible).
fn state() -> TrainState {
    let config = TrainConfig {
        sh_degree: 1,
        ..TrainConfig::default()
    };
    let mut g = Gaussians::zeros(5, 1);
    for (fi, f) in Field::ALL.into_iter().enumerate() {
        for (j, v) in g.field_mut(f).iter_mut().enumerate() {
            *v = -0.5 - 0.01 * (fi * 100 + j) as f32;
        }
    }
    g.rotations.iter_mut().for_each(|q| q[0] = 1.0);
    let mut model = Model::new(g.clone());
    model.adam.exp_avg = g.clone();
    for f in Field::ALL {
        let sq: Vec<f32> = g.field(f).iter().map(|v| v * v).collect();
        model.adam.exp_avg_sq.field_mut(f).copy_from_slice(&sq);
    }
    model.adam.steps = [3; 6];
    model.stats.denom = vec![1, 2, 3, 4, 5];
    TrainState {
        config,
        extent: 2.5,
        step: 3,
        model,
        growth_stopped: false,
        rng: [1, 2, 3, 4],
        position: Position { epoch: 0, index: 3 },
        exposure: Default::default(),
        poses: Default::default(),
        grids: None,
    }
}

fn tool(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/checkpoint.py");
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("spawn python3")
}

/// The arrays of a safetensors file: name → (dtype, shape, bytes), and its metadata.
type Tensors = std::collections::BTreeMap<String, (String, Vec<u64>, Vec<u8>)>;

fn read_safetensors(path: &Path) -> (Tensors, serde_json::Map<String, serde_json::Value>) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!((8 + n) % 8, 0, "data starts 8-aligned");
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut tensors = Tensors::new();
    let mut meta = serde_json::Map::new();
    for (name, v) in header {
        if name == "__metadata__" {
            meta = v.as_object().unwrap().clone();
            continue;
        }
        let off: Vec<usize> = v["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let shape = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let dtype = v["dtype"].as_str().unwrap().to_owned();
        tensors.insert(name, (dtype, shape, data[off[0]..off[1]].to_vec()));
    }
    (tensors, meta)
}

fn le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn python_reads_a_checkpoint_and_converts_it_to_safetensors_bit_exactly() {
    if !common::python_with(
        "python_reads_a_checkpoint_and_converts_it_to_safetensors",
        "numpy, xxhash",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = state();
    let ckpt = checkpoint::save_state(dir.path(), (&s).into(), "00ff").unwrap();
    let out = dir.path().join("state.safetensors");
    let r = tool(&[ckpt.as_os_str(), "--safetensors".as_ref(), out.as_os_str()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (tensors, meta) = read_safetensors(&out);
    let m = &s.model;
    for (prefix, g) in [
        ("params", &m.gaussians),
        ("adam.exp_avg", &m.adam.exp_avg),
        ("adam.exp_avg_sq", &m.adam.exp_avg_sq),
    ] {
        for f in Field::ALL {
            let name = format!("{prefix}.{}", f.name());
            let (dtype, shape, bytes) = &tensors[&name];
            assert_eq!(dtype, "F32", "{name}");
            assert_eq!(shape, &f.shape(g.len(), g.sh_degree), "{name}");
            assert_eq!(bytes, &le_bytes(g.field(f)), "{name}: bit-exact");
        }
    }
    let (dtype, _, bytes) = &tensors["stats.denom"];
    assert_eq!(dtype, "U32");
    let denom: Vec<u8> = m.stats.denom.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(bytes, &denom);
    let state: serde_json::Value =
        serde_json::from_str(meta["ramsplat.meta"].as_str().unwrap()).unwrap();
    assert_eq!(state["step"], 3);
    assert_eq!(state["pack_id"], "00ff");
    assert_eq!(state["num_gaussians"], 5);

    // The listing names the state and every array.
    let r = tool(&[ckpt.as_os_str()]);
    let listing = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success() && listing.contains("step 3, 5 Gaussians"),
        "{listing}"
    );
    assert!(listing.contains("adam.exp_avg_sq.sh"), "{listing}");
}

#[test]
fn python_refuses_a_damaged_checkpoint_naming_the_array() {
    if !common::python_with(
        "python_refuses_a_damaged_checkpoint_naming_the_array",
        "numpy, xxhash",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint::save_state(dir.path(), (&state()).into(), "00ff").unwrap();
    let entry = checkpoint::Container::open(&ckpt)
        .unwrap()
        .entry("stats.max_radii")
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(&ckpt).unwrap();
    // The data section starts at the 32-byte preamble plus the header, 8-aligned.
    let header_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let at = ((32 + header_len).div_ceil(8) * 8 + entry.offset) as usize;
    bytes[at] ^= 0x40;
    std::fs::write(&ckpt, &bytes).unwrap();
    let out = dir.path().join("x.safetensors");
    let r = tool(&[ckpt.as_os_str(), "--safetensors".as_ref(), out.as_os_str()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stats.max_radii") && err.contains("checksum"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "nothing is written from a damaged checkpoint"
    );
}
