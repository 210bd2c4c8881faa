//! Rank 0's master listener, bound before the job starts. A launcher that picks a free
//! port, lets it go and tells its workers the number leaves a window (the workers'
//! start-up) in which any other process on the machine may take that port; with
//! several local jobs at once (a test suite, a sweep) one eventually does, and rank 0
//! fails with "address already in use" while its peers knock on a stranger's door.
//! Binding the listener in the launcher and handing the socket itself to rank 0 (an
//! inherited file descriptor named by `GRADEX_MASTER_FD`) closes that window: the port
//! is held from the moment it is chosen until rank 0 accepts its peers, and peers that
//! connect before rank 0 is ready wait in the socket's backlog.

use crate::error::{CommError, Result};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The variable naming the inherited listener's descriptor in rank 0's environment.
pub const MASTER_FD_ENV: &str = "GRADEX_MASTER_FD";

/// A listener on 127.0.0.1 at a port the OS picks, for a job on this machine: give it to
/// rank 0 ([`CommConfig::master_listener`](crate::CommConfig) in this process,
/// [`prepare_local_worker`] for worker processes) and its port to the others.
pub fn bind_loopback_master() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
}

/// Prepares `command` to start rank `rank` of a `world`-rank job on this machine whose
/// master is `listener` (from [`bind_loopback_master`]) and whose shared token is
/// `token`: `RANK` and `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `GRADEX_BIND_ADDR`
/// on the loopback interface, `MASTER_PORT` the listener's, `GRADEX_TOKEN`, and for rank
/// 0 the listener itself (inherited, named by `GRADEX_MASTER_FD`). Every launcher of local workers (the
/// trainer's, the collective benchmarks', the multi-process tests) sets exactly these.
pub fn prepare_local_worker(
    command: &mut Command,
    rank: usize,
    world: usize,
    listener: &TcpListener,
    token: &str,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    pass_master_listener(command, rank, listener);
    command
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("GRADEX_TOKEN", token)
        .env("GRADEX_BIND_ADDR", "127.0.0.1");
    Ok(())
}

/// Prepares `command`, which starts worker `rank`, for the job whose master is `listener`.
/// Rank 0 gets the listener: the descriptor stays open across `exec` in that child only
/// (every other child, and every other descriptor, keeps close-on-exec) and
/// `GRADEX_MASTER_FD` names it; [`CommConfig::from_env`](crate::CommConfig::from_env) in
/// the child adopts it. Every other rank gets the variable removed, so none inherits one
/// from the launcher's own environment. The caller may close its own copy once rank 0
/// has started.
fn pass_master_listener(command: &mut Command, rank: usize, listener: &TcpListener) {
    if rank != 0 {
        command.env_remove(MASTER_FD_ENV);
        return;
    }
    let fd = listener.as_raw_fd();
    command.env(MASTER_FD_ENV, fd.to_string());
    // SAFETY: the closure runs in the child between fork and exec and only calls fcntl,
    // which is async-signal-safe; it touches the child's copy of the descriptor table.
    unsafe {
        command.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags == -1 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Listeners adopted so far, by descriptor: a second `from_env` in the same process gets
/// the same socket instead of a second owner of one descriptor (which would close it
/// twice). They stay open until [`release_master_listeners`] (after the rendezvous);
/// the entry stays, emptied, so that a later adoption of that descriptor number (reused
/// by then for something else) is refused rather than taken for the listener.
static ADOPTED: Mutex<Vec<(RawFd, Option<Arc<TcpListener>>)>> = Mutex::new(Vec::new());

/// Lets go of the inherited master listeners once the job's rendezvous is over: the
/// socket closes when the last configuration holding it is dropped, so that strangers'
/// connections are refused instead of queued unread for the rest of the job (a
/// hand-started rank 0, which binds its own, closes it the same way).
pub fn release_master_listeners() {
    if let Ok(mut adopted) = ADOPTED.lock() {
        for (_, l) in adopted.iter_mut() {
            *l = None;
        }
    }
}

/// Takes ownership of the inherited listener `value` (the text of `GRADEX_MASTER_FD`)
/// names, after checking that it is an open, listening stream socket bound to `port`
/// (MASTER_PORT). Anything else is a configuration error naming the variable; nothing
/// is adopted then.
pub(crate) fn adopt_master_listener(value: &str, port: u16) -> Result<Arc<TcpListener>> {
    let bad = |why: String| CommError::Config(format!("{MASTER_FD_ENV}={value:?} {why}"));
    let fd: RawFd = value
        .trim()
        .parse()
        .ok()
        .filter(|&fd: &RawFd| fd > 2)
        .ok_or_else(|| bad("is not a descriptor number above 2".into()))?;
    let mut adopted = ADOPTED
        .lock()
        .map_err(|_| CommError::Config("the adopted-listener table is poisoned".into()))?;
    if let Some((_, l)) = adopted.iter().find(|(f, _)| *f == fd) {
        return l
            .clone()
            .ok_or_else(|| bad("was closed after the job's rendezvous".into()));
    }
    let sockopt = |opt: libc::c_int| -> std::io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`; on a descriptor that is
        // not open or not a socket it fails without side effects.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(v)
        }
    };
    let kind = sockopt(libc::SO_TYPE).map_err(|e| {
        bad(format!(
            "is not an inherited socket ({e}); it is set by the launcher for rank 0 only"
        ))
    })?;
    if kind != libc::SOCK_STREAM || sockopt(libc::SO_ACCEPTCONN).ok() != Some(1) {
        return Err(bad("is not a listening TCP socket".into()));
    }
    // SAFETY: the descriptor is open, is a listening stream socket and is owned by nobody
    // else in this process (inherited across exec and not adopted before, per ADOPTED).
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    let bound = listener.local_addr();
    match bound {
        Ok(b) if b.port() == port => {}
        _ => {
            // Not the job's master: give the descriptor back unclosed to whoever owns it.
            let _ = listener.into_raw_fd();
            let at = bound.map_or_else(|e| format!("an unknown address ({e})"), |b| b.to_string());
            return Err(bad(format!("is bound to {at}, not to MASTER_PORT {port}")));
        }
    }
    // Back to close-on-exec: rank 0's own children are not part of the rendezvous.
    // SAFETY: fcntl on a descriptor this process now owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags != -1 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    let listener = Arc::new(listener);
    adopted.push((fd, Some(listener.clone())));
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A listener that was never inherited (here: created in this process) is adopted
    /// once; a second request gets the same socket, and connections made before anyone
    /// accepts wait in its backlog.
    #[test]
    fn an_open_listener_is_adopted_once_and_keeps_its_backlog() {
        let l = bind_loopback_master().unwrap();
        let port = l.local_addr().unwrap().port();
        let fd = l.as_raw_fd();
        // The test hands its ownership over, as exec does for the real worker.
        std::mem::forget(l);
        let early = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let a = adopt_master_listener(&fd.to_string(), port).unwrap();
        let b = adopt_master_listener(&fd.to_string(), port).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let (s, _) = a.accept().unwrap();
        assert_eq!(s.peer_addr().unwrap(), early.local_addr().unwrap());
    }

    #[test]
    fn a_descriptor_that_is_not_a_listener_on_master_port_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let fd = l.as_raw_fd().to_string();
        let e = adopt_master_listener(&fd, port.wrapping_add(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not to MASTER_PORT"), "{e}");
        // Still open and still ours after the refusal.
        assert_eq!(l.local_addr().unwrap().port(), port);
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let fd = s.as_raw_fd().to_string();
        let e = adopt_master_listener(&fd, port).unwrap_err().to_string();
        assert!(e.contains("not a listening TCP socket"), "{e}");
        for v in ["x", "-1", "2"] {
            let e = adopt_master_listener(v, port).unwrap_err().to_string();
            assert!(e.contains("descriptor number"), "{v}: {e}");
        }
        let e = adopt_master_listener("100000", port)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an inherited socket"), "{e}");
    }
}
