//! What the command's test programs share: running the built `cosid` binary.
// Each test program compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The built `cosid`, without a `COSID_CONFIG` from the environment.
pub fn cosid() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cosid"));
    c.env_remove("COSID_CONFIG");
    c
}

/// Runs the built `cosid` with `args`.
pub fn run(args: &[&str]) -> Output {
    cosid().args(args).output().expect("cosid runs")
}

/// [`run`], which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}
