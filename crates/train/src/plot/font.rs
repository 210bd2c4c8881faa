//! The TrueType font for the PNG charts' text. plotters' pure-Rust text backend
//! (ab_glyph) has no font of its own and the project ships none, so one is looked up once
//! per process: the file named by `TRAIN_PLOT_FONT`, else a list of the usual locations
//! on Linux and macOS, else any sans-serif `.ttf` under the system font folders. It is
//! registered as plotters' default family, `sans-serif`. With none found the PNGs are
//! drawn without text (one warning says so) and the SVG copies keep the labels: a missing
//! font must not fail a training run at its last step.

use crate::progress::say_err;
use plotters::style::{register_font, FontStyle};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that names the font file to use.
pub const FONT_ENV: &str = "TRAIN_PLOT_FONT";

/// plotters' default family: registering under it makes every default text style use
/// the font.
const FAMILY: &str = "sans-serif";

const KNOWN: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", // Debian, Ubuntu: fonts-dejavu-core
    "/usr/share/fonts/TTF/DejaVuSans.ttf",             // Arch
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf", // Fedora
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf", // macOS
    "/Library/Fonts/Arial.ttf",
];

const FOLDERS: &[&str] = &["/usr/share/fonts", "/usr/local/share/fonts"];

/// The family to draw text with, or `None` when no usable font was found.
pub(super) fn family() -> Option<&'static str> {
    static FOUND: OnceLock<Option<&'static str>> = OnceLock::new();
    *FOUND.get_or_init(|| match load() {
        Ok(_) => Some(FAMILY),
        Err(why) => {
            say_err(&format!(
                "plot: {why}; PNG charts are drawn without text (the .svg copies have it). \
                 Install a font (Debian: apt-get install fonts-dejavu-core) or set {FONT_ENV}=/path/to/font.ttf"
            ));
            None
        }
    })
}

/// Registers the first candidate that parses; returns its path.
fn load() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(FONT_ENV) {
        // An explicit choice that fails is reported as such, not silently replaced.
        let p = PathBuf::from(p);
        return register(&p)
            .map(|()| p.clone())
            .map_err(|e| format!("{FONT_ENV}={}: {e}", p.display()));
    }
    let mut candidates: Vec<PathBuf> = KNOWN.iter().map(PathBuf::from).collect();
    let mut found = Vec::new();
    for dir in FOLDERS {
        scan(Path::new(dir), 5, &mut found);
    }
    // Regular sans-serif faces first, then anything; sorted so every run picks the same.
    found.sort();
    let plain = |p: &PathBuf| {
        let n = p.file_name().map(|n| n.to_string_lossy().to_lowercase());
        let n = n.unwrap_or_default();
        n.contains("sans")
            && !["bold", "italic", "oblique", "mono", "light", "condensed"]
                .iter()
                .any(|w| n.contains(w))
    };
    candidates.extend(found.iter().filter(|p| plain(p)).cloned());
    candidates.extend(found.iter().filter(|p| !plain(p)).cloned());
    for p in &candidates {
        if p.is_file() && register(p).is_ok() {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "no TrueType font found (looked for {} and under {})",
        KNOWN[0],
        FOLDERS.join(", ")
    ))
}

fn register(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    // plotters keeps the font for the rest of the process; it is loaded once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| "not a TrueType/OpenType font".to_string())
}

fn scan(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if depth > 0 {
                scan(&p, depth - 1, out);
            }
        } else if p
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("ttf") || x.eq_ignore_ascii_case("otf"))
        {
            out.push(p);
        }
    }
}
