//! `OUT/cfg_args`: the file in which 3DGS's `train.py` records a run's loading parameters, and
//! from which its `render.py -m OUT`, `metrics.py` and the SIBR viewer find the dataset again.
//!
//! The file is the Python text of an `argparse.Namespace`
//! (`Namespace(eval=True, images='images', …)`), which those tools read back with `eval`.
//! [`CfgArgs::to_python`] writes exactly that, with every string as a Python literal (quotes,
//! backslashes and control characters escaped), so the file evaluates to the values given
//! whatever the paths contain.
//!
//! What the fields mean to 3DGS: `source_path` is the dataset (COLMAP workspace or NeRF
//! folder) its loader re-reads, `images` its COLMAP images folder, `resolution` its `-r`
//! (−1: views wider than 1,600 px scaled to 1,600; 1, 2, 4, 8: that divisor; any other value:
//! that width), `eval` whether every 8th view is held out, and `sh_degree`,
//! `white_background` the model's. ramsplat's pack records the conversion that made it, so a
//! run states the same loading as 3DGS would have used; `depths` is the pack's `--depths`
//! folder when the run regularized depth with its maps (3DGS's `-d`), and `data_device`,
//! `depths` and `train_test_exp` are otherwise written with 3DGS's defaults so every version
//! of its scripts finds them.

/// The loading parameters of a run, as 3DGS names them.
#[derive(Clone, Debug, PartialEq)]
pub struct CfgArgs {
    pub source_path: String,
    pub model_path: String,
    pub images: String,
    pub resolution: i64,
    pub sh_degree: u32,
    pub white_background: bool,
    pub eval: bool,
    /// The run learned per-view exposures (`exposure.json`, 3DGS's `--train_test_exp`).
    pub train_test_exp: bool,
    /// The depth maps' folder of a depth-regularized run (3DGS's `-d`), else empty.
    pub depths: String,
}

impl CfgArgs {
    /// The file's text: `Namespace(...)` with the fields in alphabetical order, as Python's
    /// own `repr` of a Namespace lists them.
    pub fn to_python(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "Namespace(data_device='cuda', depths={}, eval={}, images={}, model_path={}, \
             resolution={}, sh_degree={}, source_path={}, train_test_exp={}, \
             white_background={})",
            py_str(&self.depths),
            b(self.eval),
            py_str(&self.images),
            py_str(&self.model_path),
            self.resolution,
            self.sh_degree,
            py_str(&self.source_path),
            b(self.train_test_exp),
            b(self.white_background)
        )
    }
}

/// `s` as a single-quoted Python string literal.
fn py_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// 3DGS's `-r` for a run on a pack converted with `max_width` / `downscale` (as the manifest
/// records them) whose views the run read at `run` (`gs-train -r`), `width` being the widest
/// view it trained on. A whole factor of 1, 2, 4 or 8 (the pack's `--downscale` times the
/// run's) is `-r` that factor; the default 1,600 px cap alone is `-r -1`; another width cap
/// alone is that width; anything else (factors 3DGS does not take as divisors, a factor on top
/// of a width cap) is the trained width, which 3DGS takes as the target width.
pub fn resolution(
    max_width: Option<u32>,
    downscale: Option<u32>,
    run: crate::resample::Resize,
    width: u32,
) -> i64 {
    use crate::resample::Resize;
    let as_divisor = |f: u64| {
        if matches!(f, 1 | 2 | 4 | 8) {
            f as i64
        } else {
            width as i64
        }
    };
    let pack_factor = match (downscale, max_width) {
        (Some(n), _) => Some(n.max(1) as u64),
        (None, None) => Some(1),
        (None, Some(_)) => None,
    };
    match (run, pack_factor, max_width) {
        (r, Some(f), _) if r.is_none() => as_divisor(f),
        (r, None, Some(1600)) if r.is_none() => -1,
        (r, None, Some(w)) if r.is_none() => w as i64,
        (Resize::Downscale(m), Some(f), _) => as_divisor(f * m as u64),
        _ => width as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_python_literals_and_fields_are_sorted() {
        let c = CfgArgs {
            source_path: "/data/it's a \\ path\n".into(),
            model_path: "out".into(),
            images: "images_4".into(),
            resolution: -1,
            sh_degree: 3,
            white_background: true,
            eval: false,
            train_test_exp: false,
            depths: String::new(),
        };
        assert_eq!(
            c.to_python(),
            "Namespace(data_device='cuda', depths='', eval=False, images='images_4', \
             model_path='out', resolution=-1, sh_degree=3, \
             source_path='/data/it\\'s a \\\\ path\\n', train_test_exp=False, \
             white_background=True)"
        );
        let d = CfgArgs {
            depths: "depths".into(),
            ..c
        };
        assert!(d
            .to_python()
            .starts_with("Namespace(data_device='cuda', depths='depths', "));
        assert_eq!(py_str("\u{1}é"), "'\\x01é'");
    }

    #[test]
    fn resolutions_follow_3dgs_r() {
        use crate::resample::Resize::{self, Downscale, MaxWidth};
        let none = Resize::None;
        assert_eq!(resolution(Some(1600), None, none, 1600), -1);
        assert_eq!(resolution(None, Some(4), none, 400), 4);
        assert_eq!(resolution(Some(1000), None, none, 1000), 1000);
        assert_eq!(resolution(None, None, none, 1600), 1);
        // 3DGS reads -r 3 as a width of 3 px: a factor of 3 is written as the width.
        assert_eq!(resolution(None, Some(3), none, 533), 533);
        // A run's factor multiplies the pack's.
        assert_eq!(resolution(None, Some(2), Downscale(2), 400), 4);
        assert_eq!(resolution(None, None, Downscale(8), 200), 8);
        assert_eq!(resolution(None, Some(4), Downscale(4), 100), 100);
        // On a width-capped pack, or to a width, the run's views' width.
        assert_eq!(resolution(Some(1600), None, Downscale(2), 800), 800);
        assert_eq!(resolution(None, None, MaxWidth(1200), 1200), 1200);
        assert_eq!(resolution(None, Some(2), Downscale(1), 800), 2);
    }
}
