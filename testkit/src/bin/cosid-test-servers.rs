//! `cosid-test-servers KIND...`: throwaway servers for test suites that are not written in Rust
//! (the C, Python and Node tests), the same servers the Rust store tests use.
//!
//! Starts one server per KIND (`redis`, `postgres`, `etcd`, `mysql`: MariaDB) on free loopback
//! ports, prints one line `COSID_TEST_<KIND>_URL=<url>` per server and then `ready`, and keeps
//! them running until its standard input reaches end of file (the caller closes the pipe, or
//! exits). The servers then
//! stop and their data directories are removed; they also die with this process if it is killed.
//! A kind whose `COSID_TEST_<KIND>_URL` is already set is not started: that URL is printed as it
//! is, so a run against servers of the user's own works the same way. The URLs of the servers
//! it starts say `restart-guard=off`: they are new, so no runtime waits out the guard there.
//!
//! `scripts/with-test-servers` wraps a command in it.

use std::io::{Read, Write};
use std::process::ExitCode;

use cosid_testkit::{Kind, Server};

fn kind_of(arg: &str) -> Option<(Kind, &'static str)> {
    match arg {
        "redis" => Some((Kind::Redis, "COSID_TEST_REDIS_URL")),
        "postgres" => Some((Kind::Postgres, "COSID_TEST_POSTGRES_URL")),
        "etcd" => Some((Kind::Etcd, "COSID_TEST_ETCD_URL")),
        "mysql" => Some((Kind::Mysql, "COSID_TEST_MYSQL_URL")),
        _ => None,
    }
}

fn main() -> ExitCode {
    // The servers die with us (cosid-testkit spawns them with PR_SET_PDEATHSIG); we die with the
    // script that started us, even when it is killed before it can close our input.
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        eprintln!("usage: cosid-test-servers KIND... (KIND: redis, postgres, etcd, mysql)");
        return ExitCode::from(2);
    }
    let mut servers = Vec::new();
    let mut lines = Vec::new();
    for arg in &args {
        let Some((kind, var)) = kind_of(arg) else {
            eprintln!(
                "cosid-test-servers: unknown server kind '{arg}'; use redis, postgres, etcd or mysql"
            );
            return ExitCode::from(2);
        };
        match std::env::var(var) {
            Ok(url) if !url.trim().is_empty() => lines.push(format!("{var}={url}")),
            _ => {
                let server = match kind {
                    Kind::Redis => Server::redis(),
                    Kind::Postgres => Server::postgres(),
                    Kind::Etcd => Server::etcd(),
                    Kind::Mysql => Server::mysql(),
                };
                // A server started here is new: no runtime held a slot on it before, so the
                // restart guard has nothing to keep runtimes above, and the tests need not wait
                // the ttl out after its start or after creating a namespace.
                let url = format!("{}?restart-guard=off", server.url());
                lines.push(format!("{var}={url}"));
                servers.push(server);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    for line in &lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    drop(out);
    // Until the caller closes our standard input (or goes away, which closes it too).
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin().lock();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    drop(servers);
    ExitCode::SUCCESS
}
