//! Shared command-line plumbing for the thin binaries in `src/bin/`: progress reporting that
//! is a bar on a terminal and plain lines otherwise, human-readable sizes, and error printing
//! with the whole cause chain and documented exit codes.
//!
//! Exit codes used by every ramsplat binary:
//! - 0: success;
//! - 1: the command failed (bad input, I/O error, refused configuration); the message says why;
//! - 2: bad command line (clap's own code);
//! - 3: `gs-pack verify` found damaged or inconsistent data;
//! - 141: standard output was closed by its reader (`gs-pack info | head -1`): the command
//!   stops quietly, as a Unix tool killed by `SIGPIPE` does (128 + 13), instead of panicking.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A byte size flag's parser for clap (`4G`, `512M`, `1.5G`: [`crate::budget::parse_size`]).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    crate::budget::parse_size(s).map_err(|e| e.to_string())
}

/// Exit code for a failed command.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code when verification finds damage.
pub const EXIT_CORRUPT: u8 = 3;

/// Exit code when the reader of standard output went away.
pub const EXIT_STDOUT_CLOSED: i32 = 141;

/// Writes `text` and a newline to standard output. `println!` panics when the reader has
/// closed the pipe (Rust ignores `SIGPIPE`); here a closed pipe ends the process quietly with
/// [`EXIT_STDOUT_CLOSED`], the status a shell shows for a tool stopped by `SIGPIPE`. Only for
/// commands whose work is done or read-only when they print: nothing is left half-written.
/// Any other write error (a full disk behind a redirect) is returned.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let result = out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(EXIT_STDOUT_CLOSED)
        }
        other => other,
    }
}

/// Prints `error: ` and the whole cause chain and returns the exit code.
pub fn report_error(err: &anyhow::Error, code: u8) -> ExitCode {
    eprintln!("error: {}", chain_message(err));
    ExitCode::from(code)
}

/// The cause chain joined with ": ", each cause once: many library errors already show their
/// source in their own message (`"{path}: {source}"`), so a cause whose text the previous
/// message already holds is not repeated.
pub fn chain_message(err: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut prev = String::new();
    for cause in err.chain() {
        let msg = cause.to_string();
        if !prev.is_empty() && prev.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
        prev = msg;
    }
    out
}

/// Progress for long work: an indicatif bar when stderr is a terminal, otherwise a plain line
/// at most every few seconds (CI logs and pipes stay readable).
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    label: String,
    total: u64,
    last_line: Mutex<Option<Instant>>,
}

/// Interval between plain progress lines when stderr is not a terminal.
const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

impl Progress {
    pub fn new(label: &str, total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            bar.set_message(label.to_owned());
            bar
        });
        Progress {
            bar,
            label: label.to_owned(),
            total,
            last_line: Mutex::new(None),
        }
    }

    pub fn set(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= PLAIN_INTERVAL);
        if due || done == self.total {
            eprintln!("{}: {done}/{}", self.label, self.total);
            *last = Some(Instant::now());
        }
    }

    /// Prints a line without tearing the bar.
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(bar) => bar.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct WithSource {
        path: String,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(WithSource {
            path: "a/b.shard".into(),
            source: io,
        })
        .context("verifying a");
        assert_eq!(
            chain_message(&e),
            "verifying a: a/b.shard: No such file or directory"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain_message(&plain), "outer: inner");
    }
}

/// `-r R` / `--data-factor N`, flattened into the arguments of every binary that reads views
/// (`gs-train`, `gs-render`, `gs-pack bench`); [`ResolutionArgs::resize`] reads them.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolutionArgs {
    /// Work at a smaller size than the views' (gs-train trains and scores there, gs-render
    /// renders each camera there and scores a pack's views there, gs-pack bench reads there),
    /// as 3DGS's -r reads it: 1, 2, 4, 8 divide each side, -1 caps the width at 1,600 px, a
    /// value above 8 is a target width. A packed view is decoded at its stored size and
    /// resampled (the packer's area filter); `gs-pack convert --downscale N` packs at that
    /// size and saves the work.
    #[arg(
        short = 'r',
        long = "resolution",
        value_name = "R",
        allow_hyphen_values = true,
        conflicts_with = "data_factor"
    )]
    pub resolution: Option<String>,
    /// The views' size divided by N, any whole N (gsplat's --data_factor, which reads a
    /// dataset's own images_N copies instead: for its benchmark protocol, pack those with
    /// `gs-pack convert --images images_N`).
    #[arg(long = "data-factor", alias = "data_factor", value_name = "N")]
    pub data_factor: Option<u32>,
}

impl ResolutionArgs {
    /// The size the flags ask for ([`resolution_flags`]).
    pub fn resize(&self) -> Result<crate::resample::Resize, String> {
        resolution_flags(self.resolution.as_deref(), self.data_factor)
    }
}

/// The size views are read at, from `-r/--resolution R` (3DGS's reading) or `--data-factor N`
/// (gsplat's), relative to the pack's views; at most one of them is given (clap enforces it).
///
/// `-r`: 1, 2, 4 and 8 divide each side; -1 caps the width at 1,600 px (3DGS's default, and
/// `gs-pack convert`'s); any value above 8 is a target width (3DGS's reading: views narrower
/// than it are kept, never enlarged). 3DGS also reads 3, 5, 6 and 7 as widths in pixels, which
/// nobody means: refused, pointing at `--data-factor`. `--data-factor N`: any whole factor.
pub fn resolution_flags(
    resolution: Option<&str>,
    data_factor: Option<u32>,
) -> Result<crate::resample::Resize, String> {
    use crate::resample::Resize;
    if let Some(n) = data_factor {
        return match n {
            0 => Err("--data-factor 0: give a whole factor of at least 1".into()),
            1 => Ok(Resize::None),
            n => Ok(Resize::Downscale(n)),
        };
    }
    let Some(r) = resolution else {
        return Ok(Resize::None);
    };
    match r.trim().parse::<i64>() {
        Ok(-1) => Ok(Resize::MaxWidth(1600)),
        Ok(1) => Ok(Resize::None),
        Ok(n @ (2 | 4 | 8)) => Ok(Resize::Downscale(n as u32)),
        Ok(w) if (9..=u32::MAX as i64).contains(&w) => Ok(Resize::MaxWidth(w as u32)),
        Ok(n @ (3 | 5 | 6 | 7)) => Err(format!(
            "-r {n}: 3DGS reads -r as a factor only for 1, 2, 4 and 8, and any other value as a \
             width in pixels ({n} px here); for a factor of {n} give --data-factor {n}, for a \
             width give it (e.g. -r 1000)"
        )),
        _ => Err(format!(
            "-r {r}: give 1, 2, 4 or 8 (a factor), -1 (at most 1,600 px wide) or a width in \
             pixels above 8; --data-factor N takes any whole factor"
        )),
    }
}

#[cfg(test)]
mod resolution_tests {
    use super::resolution_flags;
    use crate::resample::Resize;

    #[test]
    fn resolution_flags_read_as_3dgs_and_gsplat_do() {
        let r = |v: &str| resolution_flags(Some(v), None);
        assert_eq!(r("-1"), Ok(Resize::MaxWidth(1600)));
        assert_eq!(r("1"), Ok(Resize::None));
        assert_eq!(r("2"), Ok(Resize::Downscale(2)));
        assert_eq!(r("8"), Ok(Resize::Downscale(8)));
        assert_eq!(r("1000"), Ok(Resize::MaxWidth(1000)));
        assert_eq!(r("9"), Ok(Resize::MaxWidth(9)));
        assert!(r("3").unwrap_err().contains("--data-factor 3"));
        for bad in ["0", "-2", "two", "1.5", "99999999999"] {
            assert!(r(bad).unwrap_err().contains("--data-factor N"), "{bad}");
        }
        assert_eq!(resolution_flags(None, Some(3)), Ok(Resize::Downscale(3)));
        assert_eq!(resolution_flags(None, Some(1)), Ok(Resize::None));
        assert!(resolution_flags(None, Some(0)).is_err());
        assert_eq!(resolution_flags(None, None), Ok(Resize::None));
    }
}
