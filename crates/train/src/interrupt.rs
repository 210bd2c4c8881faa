//! Ctrl-C and SIGTERM: a run stops where its ranks agree, saves, and says how to go on.
//!
//! The first SIGINT or SIGTERM only sets a flag. Each rank reads it at its log lines
//! (after their step's evaluation) and epoch ends, and the ranks agree through a
//! one-float allreduce (a rank interrupted alone stops the job too, and all stop after
//! the same step, so their checkpoints are one generation). They then save their
//! checkpoints as at an epoch's end, rank 0 draws the charts from what was logged, and
//! every process exits with status 130; the job's launcher (else rank 0) says where it
//! stopped. No summary is written: the run is not finished, and `--resume` continues it
//! bit for bit. A flag raised after the run's last log line lets the run finish.
//!
//! A second signal ends the process at once (`_exit(130)`), losing the steps since the
//! last checkpoint, and says in one line which checkpoint a `--resume` continues from
//! (every rank of a hand-started job keeps its own note with [`set_second_signal_note`]
//! after each save; a launcher, through which its workers' lines pass, watches rank 0's
//! checkpoint and says it for the job, [`watch_checkpoints`]); the
//! launcher's workers die with it (their parent-death signal). A
//! worker that has not stopped within twice the communication timeout (plus 10 s) of the
//! first that did is killed by the launcher.
//!
//! The launcher installs the same handler: on the first signal it keeps waiting for its
//! workers, which got the same Ctrl-C from the terminal; and it passes the stop on with
//! SIGUSR1 ([`forward`]), which sets the flag and nothing more, for a signal sent to the
//! launcher alone (`kill PID`): a worker that had the Ctrl-C too must not take the
//! forwarded one for a second.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// The line a second signal prints, in one of two buffers (written only by
/// [`set_second_signal_note`], which fills the idle one and then switches `NOTE_ACTIVE`),
/// so the handler reads a whole note with atomic loads alone: no lock, no allocation.
const NOTE_CAP: usize = 512;
static NOTE: [[AtomicU8; NOTE_CAP]; 2] = [
    [const { AtomicU8::new(0) }; NOTE_CAP],
    [const { AtomicU8::new(0) }; NOTE_CAP],
];
static NOTE_LEN: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static NOTE_ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// The line a second SIGINT or SIGTERM prints to stderr before the process exits
/// (truncated to 510 bytes; empty: nothing). Called from one thread at a time.
pub fn set_second_signal_note(line: &str) {
    let next = 1 - NOTE_ACTIVE.load(Ordering::SeqCst);
    let mut bytes: Vec<u8> = Vec::with_capacity(NOTE_CAP);
    if !line.is_empty() {
        bytes.push(b'\n');
        bytes.extend(line.bytes().take(NOTE_CAP - 2));
        bytes.push(b'\n');
    }
    for (slot, &b) in NOTE[next].iter().zip(&bytes) {
        slot.store(b, Ordering::SeqCst);
    }
    NOTE_LEN[next].store(bytes.len(), Ordering::SeqCst);
    NOTE_ACTIVE.store(next, Ordering::SeqCst);
}

/// The note for a run in `out` whose newest checkpoint (of rank `rank`) stands at `step`,
/// or that has none yet.
pub fn note_for(out: &std::path::Path, rank: usize, step: Option<usize>) -> String {
    let out = out.display();
    match step {
        Some(step) => format!(
            "interrupted again: stopped at once; `--resume --out {out}` continues from the checkpoint of step {step} (rank {rank}'s newest; the ranks take the newest step all of them hold)"
        ),
        None => format!(
            "interrupted again: stopped at once; {out} holds no checkpoint of this run yet, so there is nothing to resume"
        ),
    }
}

/// For a launcher, whose workers' lines a second signal cuts off: a thread that keeps the
/// note of [`set_second_signal_note`] on rank 0's newest checkpoint in `out` (polled
/// twice a second; a fresh run ignores files older than the call, which it removes).
pub fn watch_checkpoints(out: std::path::PathBuf, resume: bool) {
    let started = std::time::SystemTime::now();
    let file = crate::checkpoint::path(&out, 0);
    let spawned = std::thread::Builder::new()
        .name("checkpoint-note".into())
        .spawn(move || {
            let mut seen: Option<std::time::SystemTime> = None;
            set_second_signal_note(&note_for(&out, 0, None));
            loop {
                let modified = std::fs::metadata(&file).and_then(|m| m.modified()).ok();
                let current = modified.filter(|&m| resume || m >= started);
                if current.is_some() && current != seen {
                    if let Ok(Some(pos)) = crate::checkpoint::read_position(&file) {
                        set_second_signal_note(&note_for(&out, 0, Some(pos.step)));
                        seen = current;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        });
    if let Err(e) = spawned {
        crate::progress::say_err(&format!(
            "warning: no checkpoint note for a second Ctrl-C (starting its thread: {e})"
        ));
    }
}

/// Writes the active note to stderr: atomic loads and `write`, both async-signal-safe.
fn write_note() {
    let i = NOTE_ACTIVE.load(Ordering::SeqCst);
    let len = NOTE_LEN[i].load(Ordering::SeqCst).min(NOTE_CAP);
    let mut buf = [0u8; NOTE_CAP];
    for (b, slot) in buf.iter_mut().zip(&NOTE[i]).take(len) {
        *b = slot.load(Ordering::SeqCst);
    }
    if len > 0 {
        // SAFETY: writes `len` initialised bytes of a stack buffer to fd 2.
        unsafe { libc::write(2, buf.as_ptr().cast(), len) };
    }
}

/// Asked to stop, by any route (a signal of its own, the launcher's, the test hook).
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// A SIGINT or SIGTERM of this process's own has come: the next one is the second. Kept
/// apart from `REQUESTED`, so that a worker told by its launcher first and signalled
/// itself a moment later (a scheduler signalling every process) still saves.
static OWN_SIGNAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only async-signal-safe work here: atomics and `_exit`.
    REQUESTED.store(true, Ordering::SeqCst);
    if OWN_SIGNAL.swap(true, Ordering::SeqCst) {
        write_note();
        // SAFETY: `_exit` is async-signal-safe; it ends the process without unwinding.
        unsafe { libc::_exit(EXIT_STATUS) }
    }
}

extern "C" fn on_forwarded(_: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Set by the launcher on its workers: their launcher reports an interrupt, so they do
/// not (one line for the job, not one per rank).
pub const LAUNCHED_ENV: &str = "GRADEX_LAUNCHED";

/// The status a process stopped by an interrupt exits with (128 + SIGINT, as shells
/// report a Ctrl-C).
pub const EXIT_STATUS: i32 = 130;

/// Routes SIGINT, SIGTERM and SIGUSR1 to the flag (once per process; later calls do
/// nothing).
pub fn install() -> std::io::Result<()> {
    // The errno of a failed sigaction, kept so that every call reports it.
    static INSTALLED: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    let failed = INSTALLED.get_or_init(|| {
        let own = on_signal as extern "C" fn(libc::c_int);
        let forwarded = on_forwarded as extern "C" fn(libc::c_int);
        for (sig, handler) in [
            (libc::SIGINT, own),
            (libc::SIGTERM, own),
            (libc::SIGUSR1, forwarded),
        ] {
            // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic and
            // calls `_exit`. SA_RESTART: blocking calls resume instead of failing with
            // EINTR (those that fail anyway, sockets with a timeout, are retried by comm).
            let rc = unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = handler as usize;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut())
            };
            if rc != 0 {
                return Some(
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL),
                );
            }
        }
        None
    });
    match failed {
        None => Ok(()),
        Some(errno) => Err(std::io::Error::from_raw_os_error(*errno)),
    }
}

/// Whether this process has been asked to stop. Never cleared: a library caller that
/// runs `train::run` again in an interrupted process sees that run stop at its first
/// log line (the binaries exit instead).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Asks this process to stop, as a first signal would (the test hook
/// `GRADEX_INTERRUPT_STEP`, and the launcher's [`forward`]).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Sends SIGUSR1 to `pid`: the launcher passing its stop on to a worker, which may not
/// have had the signal itself. Errors are ignored: a worker already gone needs no telling.
pub fn forward(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill with a child's pid and a signal whose handler only sets a flag.
        unsafe {
            libc::kill(pid, libc::SIGUSR1);
        }
    }
}

/// The error a run returns when it stopped for an interrupt (the binary exits with
/// [`EXIT_STATUS`] on it, printing it without the `error:` prefix).
#[derive(Debug)]
pub struct Interrupted {
    /// The step the ranks stopped after, where a worker knows it (the launcher does not).
    pub step: Option<usize>,
    /// The run's end, in steps.
    pub total: Option<usize>,
    /// Whether checkpoints were written (`--checkpoint-every 0` writes none, nor does a
    /// worker stopped before it trained).
    pub saved: bool,
    /// The run directory.
    pub out: std::path::PathBuf,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.step, self.total) {
            (Some(s), Some(t)) => write!(f, "interrupted after step {s} of {t}")?,
            (Some(s), None) => write!(f, "interrupted after step {s}")?,
            _ => write!(f, "interrupted")?,
        }
        if self.saved {
            write!(
                f,
                ": checkpoint saved; `train --resume --out {}` continues the run",
                self.out.display()
            )
        } else {
            write!(
                f,
                ": nothing saved since the last checkpoint, if any (--checkpoint-every 0 writes none); the run's records are in {}",
                self.out.display()
            )
        }
    }
}

impl std::error::Error for Interrupted {}

/// The interrupt behind `e`, if it is one (through any context added on the way up).
pub fn of(e: &anyhow::Error) -> Option<&Interrupted> {
    e.chain().find_map(|c| c.downcast_ref::<Interrupted>())
}

/// A launcher's interrupt (which knows neither the step nor the run directory) told
/// with the run directory `out`, whether its workers write checkpoints, and the step
/// rank 0's checkpoint stands at; other errors unchanged.
pub fn in_run(e: anyhow::Error, out: &std::path::Path, checkpoints: bool) -> anyhow::Error {
    let Some(i) = of(&e) else { return e };
    let saved = i.saved && checkpoints;
    let step = if saved {
        crate::checkpoint::read_position(&crate::checkpoint::path(out, 0))
            .ok()
            .flatten()
            .map(|p| p.step)
    } else {
        None
    };
    Interrupted {
        step,
        total: None,
        saved,
        out: out.to_path_buf(),
    }
    .into()
}

/// For a binary's `main`: where `e` is an interrupt, says so (not as an error, and only
/// once a job: by its launcher, else by rank 0) and exits with [`EXIT_STATUS`].
pub fn exit_if_interrupted(e: &anyhow::Error) {
    let Some(i) = of(e) else { return };
    let launched = std::env::var_os(LAUNCHED_ENV).is_some();
    if !launched && std::env::var("RANK").ok().is_none_or(|r| r == "0") {
        crate::progress::say_err(&i.to_string());
    }
    std::process::exit(EXIT_STATUS);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note as the handler would write it.
    fn current_note() -> String {
        let i = NOTE_ACTIVE.load(Ordering::SeqCst);
        let len = NOTE_LEN[i].load(Ordering::SeqCst);
        let bytes: Vec<u8> = NOTE[i]
            .iter()
            .take(len)
            .map(|b| b.load(Ordering::SeqCst))
            .collect();
        String::from_utf8(bytes).unwrap()
    }

    /// A launcher's watcher follows rank 0's newest checkpoint; a long note is cut to the
    /// buffer, on its line.
    #[test]
    fn the_second_signal_note_follows_rank_0s_checkpoint() {
        let out = std::env::temp_dir().join(format!("gradex-note-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(out.join("checkpoint")).unwrap();
        let pos = crate::checkpoint::Position {
            step: 7,
            ..Default::default()
        };
        crate::checkpoint::save(&crate::checkpoint::path(&out, 0), &[], &pos).unwrap();
        watch_checkpoints(out.clone(), true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !current_note().contains("checkpoint of step 7") {
            assert!(std::time::Instant::now() < deadline, "{}", current_note());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(current_note().contains(&format!("--resume --out {}", out.display())));
        set_second_signal_note(&"x".repeat(2000));
        let n = current_note();
        assert_eq!(n.len(), NOTE_CAP);
        assert!(n.starts_with('\n') && n.ends_with('\n'));
        let _ = std::fs::remove_dir_all(&out);
    }
}
