//! Pinning local workers to disjoint CPU sets.
//!
//! N workers on one machine otherwise share every core under the scheduler, and one rank
//! can fall a large part of a step behind the others; every rank then waits for it at the
//! step's last exchange, which shows up as idle time although nothing is wrong with the
//! overlap. Measured on 2 cores, 4 workers, DGC (RESULTS.md): idle 12–16 % of the step
//! unpinned, 6–7 % with two workers pinned to each core.
//!
//! The launcher splits the CPUs it may run on (its own affinity, so `taskset` and cgroup
//! cpusets are honoured) into one contiguous share per worker and passes it as
//! `GRADEX_CPUS`; each worker pins itself before it starts any thread (threads inherit the
//! affinity of the thread that creates them), so rayon's pool, sized by default to the
//! CPUs the process may use, gets one thread per CPU of the share. A multi-node worker can
//! be given `GRADEX_CPUS` by hand.

use anyhow::{bail, Context, Result};

/// The environment variable that carries a worker's CPU list ("0,1,2").
pub const ENV: &str = "GRADEX_CPUS";

/// Worker `r`'s share of `cpus` among `workers`: `cpus.len() / workers` CPUs each when
/// there are at least as many CPUs as workers (one more for some of the later workers
/// when it does not divide), otherwise one CPU shared by about `workers / cpus.len()`
/// workers.
pub fn plan(cpus: &[usize], workers: usize) -> Vec<Vec<usize>> {
    let n = cpus.len();
    if n == 0 || workers == 0 {
        return vec![Vec::new(); workers];
    }
    (0..workers)
        .map(|r| {
            if workers <= n {
                cpus[r * n / workers..(r + 1) * n / workers].to_vec()
            } else {
                vec![cpus[r * n / workers]]
            }
        })
        .collect()
}

/// [`plan`] over the first `capacity` of `cpus` (see [`capacity`]): under a CPU quota
/// smaller than the CPU set (a container's `--cpus`), shares of the whole set would give
/// each worker's thread pool more threads than its part of the quota allows, the
/// oversubscription pinning is meant to avoid.
pub fn plan_within(cpus: &[usize], capacity: usize, workers: usize) -> Vec<Vec<usize>> {
    plan(&cpus[..capacity.max(1).min(cpus.len())], workers)
}

pub fn format(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// How many workers `cpus` can give a CPU each: their number, or fewer when a cgroup CPU
/// quota (a container's `--cpus`) allows less, as the standard library reports it.
pub fn capacity(cpus: &[usize]) -> usize {
    let quota = std::thread::available_parallelism().map_or(usize::MAX, |n| n.get());
    cpus.len().min(quota)
}

/// Parses "0,1,4" (what [`format`] writes) and ranges as `taskset -c` takes them, "0-3,8".
pub fn parse(s: &str) -> Result<Vec<usize>> {
    let num = |c: &str| {
        c.trim()
            .parse::<usize>()
            .with_context(|| format!("{ENV}={s:?}: {c:?} is not a CPU number"))
    };
    let mut cpus = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a >= 1 << 16 {
                    bail!("{ENV}={s:?}: {part:?} is not a range of CPUs");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

#[cfg(target_os = "linux")]
mod sys {
    use anyhow::{bail, Result};

    /// The CPUs this process may run on, ascending.
    pub fn available() -> Result<Vec<usize>> {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
            }
            Ok((0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect())
        }
    }

    /// Restricts the calling thread (and the threads it starts afterwards) to `cpus`.
    pub fn pin(cpus: &[usize]) -> Result<()> {
        // SAFETY: as above; CPU_SET is only called with numbers below CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                if c >= libc::CPU_SETSIZE as usize {
                    bail!(
                        "CPU {c} is beyond the {} this build can address",
                        libc::CPU_SETSIZE
                    );
                }
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                bail!(
                    "sched_setaffinity to CPUs {}: {}",
                    super::format(cpus),
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use anyhow::{bail, Result};
    pub fn available() -> Result<Vec<usize>> {
        bail!("pinning workers to CPUs is implemented for Linux only")
    }
    pub fn pin(_cpus: &[usize]) -> Result<()> {
        bail!("pinning workers to CPUs is implemented for Linux only")
    }
}

pub use sys::{available, pin};

/// In a worker: pins this process to `GRADEX_CPUS` when set. Call before starting threads.
pub fn pin_from_env() -> Result<Option<Vec<usize>>> {
    match std::env::var(ENV) {
        Ok(s) => {
            let cpus = parse(&s)?;
            pin(&cpus)?;
            Ok(Some(cpus))
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => bail!("{ENV}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_disjoint_and_cover_the_cpus() {
        let cpus: Vec<usize> = (0..16).collect();
        let p = plan(&cpus, 8);
        assert_eq!(p[0], [0, 1]);
        assert_eq!(p[7], [14, 15]);
        // Uneven: 3 workers on 8 CPUs get 2, 3 and 3, every CPU used once.
        let p = plan(&(0..8).collect::<Vec<_>>(), 3);
        assert_eq!(p, [vec![0, 1], vec![2, 3, 4], vec![5, 6, 7]]);
        // Only some CPUs allowed (taskset): their numbers are kept.
        assert_eq!(plan(&[2, 5, 7, 9], 2), [vec![2, 5], vec![7, 9]]);
    }

    /// 16 CPUs under a quota of 4, 4 workers: one CPU each (so a thread pool of one), not
    /// 4 CPUs and 4 threads each, 16 threads on a quota of 4.
    #[test]
    fn a_cpu_quota_caps_the_cpus_shared_out() {
        let cpus: Vec<usize> = (0..16).collect();
        assert_eq!(
            plan_within(&cpus, 4, 4),
            [vec![0], vec![1], vec![2], vec![3]]
        );
        assert_eq!(plan_within(&cpus, 16, 4)[0], [0, 1, 2, 3]);
        assert_eq!(
            plan_within(&cpus, 2, 4),
            [vec![0], vec![0], vec![1], vec![1]]
        );
        assert_eq!(plan_within(&[], 4, 2), [Vec::<usize>::new(), Vec::new()]);
    }

    #[test]
    fn more_workers_than_cpus_share_them_evenly() {
        assert_eq!(plan(&[0, 1], 4), [vec![0], vec![0], vec![1], vec![1]]);
        assert_eq!(plan(&[0, 1], 3), [vec![0], vec![0], vec![1]]);
        assert_eq!(plan(&[3], 2), [vec![3], vec![3]]);
        assert_eq!(plan(&[], 2), [Vec::<usize>::new(), Vec::new()]);
    }

    #[test]
    fn the_list_round_trips_and_bad_lists_are_errors() {
        assert_eq!(parse(&format(&[0, 4, 17])).unwrap(), [0, 4, 17]);
        assert_eq!(parse("0-3,8, 2").unwrap(), [0, 1, 2, 3, 8]);
        assert!(parse("").is_err());
        assert!(parse("0,x").is_err());
        assert!(parse("-1").is_err());
        assert!(parse("3-1").is_err());
        assert!(parse("0-").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn pinning_a_thread_restricts_it() {
        // In a thread of its own so the test harness's other threads keep their CPUs.
        std::thread::spawn(|| {
            let all = available().unwrap();
            assert!(!all.is_empty());
            pin(&all[..1]).unwrap();
            assert_eq!(available().unwrap(), &all[..1]);
            assert!(pin(&[1 << 20]).is_err());
        })
        .join()
        .unwrap();
    }
}
