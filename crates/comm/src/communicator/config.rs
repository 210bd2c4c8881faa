//! [`CommConfig`]: who this rank is in which job, how to reach the others, and its
//! limits; from the launch environment (PyTorch's `RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`, and gradex's own variables), each value checked.

use super::MAX_WORLD;
use crate::error::{CommError, Result};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct CommConfig {
    pub rank: usize,
    pub world: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// Address this rank listens on for its peers (all interfaces by default).
    pub bind_addr: String,
    /// Ports a non-zero rank may listen on for its peers, tried in order until one is
    /// free (`GRADEX_PORT_RANGE=lo-hi`, for a firewall that opens only those); `None`:
    /// one the OS picks. Rank 0 listens on `master_port` whatever this says.
    pub listen_ports: Option<std::ops::RangeInclusive<u16>>,
    /// This rank's index among the job's ranks on its machine (`LOCAL_RANK`), which a
    /// trainer uses to pick its GPU; `None` where the launcher did not say.
    pub local_rank: Option<usize>,
    /// Shared secret every rank must prove it knows.
    pub token: Vec<u8>,
    /// Limit on every blocking operation: the rendezvous's deadline, and after it the
    /// longest a send or receive waits without a byte moving (a peer that trickles bytes
    /// is slow, not gone: no deadline is put on a whole collective, whose time grows with
    /// its size and the link).
    pub timeout: Duration,
    /// Largest frame payload a peer may announce.
    pub max_frame: u64,
    /// Rank 0's listener, already bound to `master_port` (see `master.rs`): set by
    /// whoever chose the port, so that no other process can take it before rank 0
    /// listens. Without one, rank 0 binds `master_addr:master_port` itself.
    pub master_listener: Option<Arc<TcpListener>>,
}

impl CommConfig {
    /// One rank of a job on this machine's loopback interface (tests, benchmarks, a
    /// one-process run): master and listener on 127.0.0.1, a 60 s timeout, frames up to
    /// 4 GiB. Port 0 with world size 1 needs no free port. Fields can be set afterwards.
    pub fn loopback(rank: usize, world: usize, port: u16, token: &[u8]) -> CommConfig {
        CommConfig {
            rank,
            world,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            bind_addr: "127.0.0.1".into(),
            listen_ports: None,
            local_rank: None,
            token: token.to_vec(),
            timeout: Duration::from_secs(60),
            max_frame: 1 << 32,
            master_listener: None,
        }
    }

    /// [`CommConfig::loopback`] for every rank of a job of threads in this process, on a
    /// freshly bound master listener that rank 0's configuration holds, so no other
    /// process can take the port before rank 0 listens (see `master.rs`).
    pub fn loopback_job(world: usize, token: &[u8]) -> std::io::Result<Vec<CommConfig>> {
        let listener = Arc::new(crate::master::bind_loopback_master()?);
        let port = listener.local_addr()?.port();
        Ok((0..world)
            .map(|rank| CommConfig {
                master_listener: (rank == 0).then(|| listener.clone()),
                ..CommConfig::loopback(rank, world, port, token)
            })
            .collect())
    }

    /// From `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `GRADEX_TOKEN` (or
    /// `GRADEX_TOKEN_FILE`), optional `LOCAL_RANK`, `GRADEX_BIND_ADDR`,
    /// `GRADEX_PORT_RANGE` (`lo-hi`), `GRADEX_TIMEOUT_SECS` and `GRADEX_MAX_FRAME`
    /// (bytes), and on rank 0 an optional `GRADEX_MASTER_FD` (the master listener a
    /// launcher bound and passed down: see `master.rs`). A value that does not parse or is
    /// out of range is an error naming the variable and the value, never a default.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Checks, before a launcher starts any worker, the settings its local workers will
    /// read from this environment (`GRADEX_TIMEOUT_SECS`, `GRADEX_MAX_FRAME`,
    /// `GRADEX_PORT_RANGE`): a bad value is then one error here, not one from every
    /// worker after they have all started. The job's own variables (rank, size, master,
    /// token) are the launcher's to set and are not read.
    pub fn check_local_job_env() -> Result<()> {
        Self::local_job().map(|_| ())
    }

    /// The timeout a local job's workers will take (`GRADEX_TIMEOUT_SECS`, else 60 s),
    /// checked as [`CommConfig::check_local_job_env`] checks it.
    pub fn local_job_timeout() -> Result<std::time::Duration> {
        Self::local_job().map(|c| c.timeout)
    }

    /// This process's settings as a local job's worker would read them.
    fn local_job() -> Result<Self> {
        Self::from_lookup(|k| match k {
            "RANK" | "MASTER_PORT" => Some("0".into()),
            "WORLD_SIZE" => Some("1".into()),
            "MASTER_ADDR" => Some("127.0.0.1".into()),
            "GRADEX_TOKEN" => Some("checked".into()),
            "GRADEX_TOKEN_FILE" | "LOCAL_RANK" | "GRADEX_MASTER_FD" => None,
            _ => std::env::var(k).ok(),
        })
    }

    /// [`CommConfig::from_env`] with the variables read through `get`.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |k: &str| {
            get(k).ok_or_else(|| {
                CommError::Config(format!(
                    "{k} is not set (see docs/train.md on launching workers)"
                ))
            })
        };
        let num = |k: &str| -> Result<usize> {
            let v = var(k)?;
            v.trim()
                .parse()
                .map_err(|_| CommError::Config(format!("{k}={v:?} is not a non-negative integer")))
        };
        let token = match (get("GRADEX_TOKEN"), get("GRADEX_TOKEN_FILE")) {
            (Some(t), _) => {
                if t.is_empty() {
                    return Err(CommError::Config(
                        "GRADEX_TOKEN is set but empty: set it to the job's shared token".into(),
                    ));
                }
                t.into_bytes()
            }
            (_, Some(f)) => {
                let mut t = std::fs::read(&f)
                    .map_err(|e| CommError::Config(format!("GRADEX_TOKEN_FILE {f}: {e}")))?;
                // One line ending, as `echo token > file` leaves it: the token is the
                // same whether it came from a file or from GRADEX_TOKEN.
                if t.ends_with(b"\n") {
                    t.pop();
                    if t.ends_with(b"\r") {
                        t.pop();
                    }
                }
                if t.is_empty() {
                    return Err(CommError::Config(format!(
                        "GRADEX_TOKEN_FILE {f} holds an empty token"
                    )));
                }
                t
            }
            _ => {
                return Err(CommError::Config(
                    "set GRADEX_TOKEN or GRADEX_TOKEN_FILE to the job's shared token".into(),
                ))
            }
        };
        let timeout = match get("GRADEX_TIMEOUT_SECS") {
            None => Duration::from_secs(60),
            Some(t) => t
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    CommError::Config(format!(
                        "GRADEX_TIMEOUT_SECS={t:?} is not a finite number of seconds above 0"
                    ))
                })?,
        };
        let port = var("MASTER_PORT")?;
        let master_port = port.trim().parse::<u16>().map_err(|_| {
            CommError::Config(format!(
                "MASTER_PORT={port:?} is not a port number (0-65535)"
            ))
        })?;
        let listen_ports = get("GRADEX_PORT_RANGE")
            .map(|r| parse_port_range(&r))
            .transpose()?;
        let max_frame = match get("GRADEX_MAX_FRAME") {
            None => 1 << 32,
            Some(m) => m
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| {
                    CommError::Config(format!(
                        "GRADEX_MAX_FRAME={m:?} is not a number of bytes above 0"
                    ))
                })?,
        };
        let mut cfg = CommConfig {
            rank: num("RANK")?,
            world: num("WORLD_SIZE")?,
            master_addr: var("MASTER_ADDR")?,
            master_port,
            bind_addr: get("GRADEX_BIND_ADDR").unwrap_or_else(|| "0.0.0.0".into()),
            listen_ports,
            local_rank: get("LOCAL_RANK").map(|_| num("LOCAL_RANK")).transpose()?,
            token,
            timeout,
            max_frame,
            master_listener: None,
        };
        if cfg.world > MAX_WORLD {
            return Err(CommError::Config(format!(
                "WORLD_SIZE {} is over the {MAX_WORLD} ranks this communicator supports",
                cfg.world
            )));
        }
        if cfg.world == 0 || cfg.rank >= cfg.world {
            return Err(CommError::Config(format!(
                "RANK {} is not in 0..WORLD_SIZE ({})",
                cfg.rank, cfg.world
            )));
        }
        // A machine holds at most the whole job.
        if let Some(l) = cfg.local_rank.filter(|&l| l >= cfg.world) {
            return Err(CommError::Config(format!(
                "LOCAL_RANK {l} is not in 0..WORLD_SIZE ({})",
                cfg.world
            )));
        }
        if let Some(fd) = get(crate::master::MASTER_FD_ENV) {
            if cfg.rank != 0 {
                return Err(CommError::Config(format!(
                    "{}={fd:?} is set on rank {}: only rank 0 listens as the master",
                    crate::master::MASTER_FD_ENV,
                    cfg.rank
                )));
            }
            cfg.master_listener = Some(crate::master::adopt_master_listener(&fd, cfg.master_port)?);
        }
        Ok(cfg)
    }
}

/// `GRADEX_PORT_RANGE`'s `lo-hi` (both included; one port alone is `p-p`).
fn parse_port_range(r: &str) -> Result<std::ops::RangeInclusive<u16>> {
    let bad = |why: &str| {
        CommError::Config(format!(
            "GRADEX_PORT_RANGE={r:?} {why} (expected lo-hi, e.g. 29600-29699)"
        ))
    };
    let (lo, hi) = r.trim().split_once('-').ok_or_else(|| bad("has no '-'"))?;
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p > 0);
    match (port(lo), port(hi)) {
        (Some(lo), Some(hi)) if lo <= hi => Ok(lo..=hi),
        (Some(_), Some(_)) => Err(bad("is empty: its first port is above its last")),
        _ => Err(bad("names a port outside 1-65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::CommConfig;
    use std::collections::HashMap;
    use std::time::Duration;

    fn parse(vars: &[(&str, &str)]) -> Result<CommConfig, String> {
        let mut env: HashMap<String, String> = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("GRADEX_TOKEN", "s3cret"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in vars {
            if v.is_empty() && k.starts_with('-') {
                env.remove(&k[1..]);
            } else {
                env.insert(k.to_string(), v.to_string());
            }
        }
        CommConfig::from_lookup(|k| env.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn launch_variables_out_of_range_are_errors_naming_variable_and_value() {
        let ok = parse(&[]).unwrap();
        assert_eq!((ok.rank, ok.world, ok.master_port), (1, 2, 29500));
        assert_eq!(ok.token, b"s3cret");
        assert_eq!(ok.timeout, Duration::from_secs(60));
        assert_eq!(
            parse(&[("GRADEX_TIMEOUT_SECS", "2.5")]).unwrap().timeout,
            Duration::from_millis(2500)
        );
        for bad in [
            "-1", "inf", "-inf", "nan", "0", "0.0", "1e-12", "1e300", "abc", "",
        ] {
            let e = parse(&[("GRADEX_TIMEOUT_SECS", bad)]).unwrap_err();
            assert!(
                e.contains("GRADEX_TIMEOUT_SECS") && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
        for bad in ["65536", "-1", "99999999999", "http", ""] {
            let e = parse(&[("MASTER_PORT", bad)]).unwrap_err();
            assert!(
                e.contains("MASTER_PORT") && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            parse(&[("MASTER_PORT", "65535")]).unwrap().master_port,
            65535
        );
        let e = parse(&[("RANK", "one")]).unwrap_err();
        assert!(e.contains("RANK=\"one\""), "{e}");
        let e = parse(&[("RANK", "2")]).unwrap_err();
        assert!(e.contains("WORLD_SIZE"), "{e}");
        // A mistyped world size is refused, not a try at per-peer tables for 10¹¹ ranks.
        let e = parse(&[("WORLD_SIZE", "100000000000")]).unwrap_err();
        assert!(e.contains("WORLD_SIZE 100000000000 is over"), "{e}");
        assert_eq!(
            parse(&[("WORLD_SIZE", "65536")]).unwrap().world,
            super::MAX_WORLD
        );
        let huge = CommConfig {
            world: usize::MAX,
            ..parse(&[]).unwrap()
        };
        let e = crate::Communicator::connect(&huge)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("at most 65536"), "{e}");
        let e = parse(&[("-MASTER_ADDR", "")]).unwrap_err();
        assert!(e.contains("MASTER_ADDR is not set"), "{e}");
        // The inherited master listener is rank 0's alone, and must be a real one.
        let e = parse(&[("GRADEX_MASTER_FD", "3")]).unwrap_err();
        assert!(e.contains("GRADEX_MASTER_FD=\"3\" is set on rank 1"), "{e}");
        let e = parse(&[("RANK", "0"), ("GRADEX_MASTER_FD", "x")]).unwrap_err();
        assert!(e.contains("GRADEX_MASTER_FD=\"x\""), "{e}");
    }

    #[test]
    fn port_range_local_rank_and_frame_limit_come_from_the_environment() {
        let ok = parse(&[]).unwrap();
        assert_eq!(
            (ok.listen_ports, ok.local_rank, ok.max_frame),
            (None, None, 1 << 32)
        );
        let c = parse(&[
            ("GRADEX_PORT_RANGE", "29600-29699"),
            ("LOCAL_RANK", "1"),
            ("GRADEX_MAX_FRAME", "1048576"),
        ])
        .unwrap();
        assert_eq!(c.listen_ports, Some(29600..=29699));
        assert_eq!((c.local_rank, c.max_frame), (Some(1), 1 << 20));
        assert_eq!(
            parse(&[("GRADEX_PORT_RANGE", " 7000 - 7000 ")])
                .unwrap()
                .listen_ports,
            Some(7000..=7000)
        );
        for (bad, why) in [
            ("29600", "has no '-'"),
            ("29699-29600", "is empty"),
            ("0-10", "outside 1-65535"),
            ("1-65536", "outside 1-65535"),
            ("a-b", "outside 1-65535"),
        ] {
            let e = parse(&[("GRADEX_PORT_RANGE", bad)]).unwrap_err();
            assert!(
                e.contains(&format!("GRADEX_PORT_RANGE={bad:?}")) && e.contains(why),
                "{bad}: {e}"
            );
        }
        let e = parse(&[("LOCAL_RANK", "2")]).unwrap_err();
        assert!(
            e.contains("LOCAL_RANK 2 is not in 0..WORLD_SIZE (2)"),
            "{e}"
        );
        let e = parse(&[("LOCAL_RANK", "gpu0")]).unwrap_err();
        assert!(e.contains("LOCAL_RANK=\"gpu0\""), "{e}");
        for bad in ["0", "-1", "1e6", "big"] {
            let e = parse(&[("GRADEX_MAX_FRAME", bad)]).unwrap_err();
            assert!(
                e.contains(&format!("GRADEX_MAX_FRAME={bad:?}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn empty_tokens_are_refused_and_a_token_files_line_ending_is_not_part_of_it() {
        let e = parse(&[("GRADEX_TOKEN", "")]).unwrap_err();
        assert!(e.contains("GRADEX_TOKEN is set but empty"), "{e}");
        let dir = std::env::temp_dir().join(format!("comm-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (contents, want) in [
            (&b"s3cret\n"[..], Some(&b"s3cret"[..])),
            (b"s3cret\r\n", Some(b"s3cret")),
            (b"s3cret", Some(b"s3cret")),
            // Only one line ending is the file's; anything else is the token's.
            (b"s3cret\n\n", Some(b"s3cret\n")),
            (b" s3cret ", Some(b" s3cret ")),
            (b"", None),
            (b"\n", None),
        ] {
            let f = dir.join("token");
            std::fs::write(&f, contents).unwrap();
            let f = f.to_str().unwrap().to_string();
            let got = parse(&[("-GRADEX_TOKEN", ""), ("GRADEX_TOKEN_FILE", &f)]);
            match want {
                Some(t) => assert_eq!(got.unwrap().token, t, "{contents:?}"),
                None => {
                    let e = got.unwrap_err();
                    assert!(e.contains("empty token"), "{contents:?}: {e}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let e = parse(&[("-GRADEX_TOKEN", "")]).unwrap_err();
        assert!(e.contains("set GRADEX_TOKEN or GRADEX_TOKEN_FILE"), "{e}");
    }
}
