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
//! last checkpoint; the launcher's workers die with it (their parent-death signal). A
//! worker that has not stopped within twice the communication timeout (plus 10 s) of the
//! first that did is killed by the launcher.
//!
//! The launcher installs the same handler: on the first signal it keeps waiting for its
//! workers, which got the same Ctrl-C from the terminal; and it passes the stop on with
//! SIGUSR1 ([`forward`]), which sets the flag and nothing more, for a signal sent to the
//! launcher alone (`kill PID`): a worker that had the Ctrl-C too must not take the
//! forwarded one for a second.

use std::sync::atomic::{AtomicBool, Ordering};

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
