//! The processes of a container: `hab sup run` started in a session of its own (the launcher's
//! pid is the session id, shared by `hab-sup` and the service's hooks), signals to the launcher
//! or to the whole session, and the readiness probe.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Starts `program ARGS` with exactly `env` (and PATH), its output appended to `log`, in a new
/// session, with SIGTERM as its parent-death signal: if the nodes process dies without stopping
/// its containers, each launcher is asked to stop as a pod deletion would ask it. Call it from
/// a thread that lives as long as the containers: the signal follows the spawning thread.
pub fn spawn(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: only async-signal-safe calls (setsid, prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: kill(2) with a positive pid touches only that process.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Every process of session `sid`, read from /proc.
pub fn session_pids(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| session_of(*pid) == Some(sid))
        .collect()
}

/// The session of process `pid` (field 6 of /proc/PID/stat, after the command's parentheses).
pub fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Sends `signal` to every process of session `sid`; returns how many there were.
pub fn signal_session(sid: i32, sig: i32) -> usize {
    let pids = session_pids(sid);
    for pid in &pids {
        signal(*pid, sig);
    }
    pids.len()
}

/// An HTTP GET of `path` at `addr`, as a kubelet's httpGet probe: success is a status from 200
/// to 399 within `timeout`.
pub fn http_probe(addr: SocketAddr, path: &str, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {}\r\nUser-Agent: kube-probe/sandbox\r\n\r\n",
        addr.ip()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < head.len() {
        match s.read(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    let line = String::from_utf8_lossy(&head[..got]);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .is_some_and(|c| (200..400).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_process_leads_its_own_session_and_dies_with_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut child = spawn(
            Path::new("/bin/sh"),
            &["-c".into(), "sleep 30 & sleep 30".into()],
            &[],
            &dir.path().join("log"),
        )
        .expect("spawned");
        let sid = child.id() as i32;
        let mut n = 0;
        for _ in 0..100 {
            n = session_pids(sid).len();
            if n >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(n >= 2, "the shell's sleeps share its session: {n}");
        assert_eq!(session_of(sid), Some(sid));
        signal_session(sid, libc::SIGKILL);
        let _ = child.wait();
        for _ in 0..100 {
            if session_pids(sid).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            session_pids(sid).is_empty(),
            "nothing of the session is left"
        );
    }

    #[test]
    fn a_probe_of_a_closed_port_fails() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bound");
        let addr = l.local_addr().expect("addr");
        drop(l);
        assert!(!http_probe(addr, "/", Duration::from_millis(200)));
    }
}
