//! What `cosid next` says while its start waits for a store, and that it does not wait for one
//! that refuses it for good. No test measures a time: a start that waited its whole acquire
//! timeout for an incurable error would still end, so the check is that it says so, and that
//! it ends at once is what the test program's bound catches.

mod common;

use common::run;

/// A port on 127.0.0.1 that nobody listens on.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A store that refuses the connection (a server not started yet) is retried until the acquire
/// timeout (here the ttl's, 3 s); after about a second the command says once, on one line, what
/// it waits for and for how long at most.
#[test]
fn a_wait_for_an_unreachable_store_says_what_it_waits_for_and_how_long_at_most() {
    let store = format!("redis://:SECRET@127.0.0.1:{}/0", dead_port());
    let o = run(&["next", "--store", &store, "--ttl", "3s"]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(3), "{err}");
    let waits: Vec<_> = err
        .lines()
        .filter(|l| l.starts_with("cosid: waiting for the store"))
        .collect();
    assert_eq!(waits.len(), 1, "{err}");
    for part in ["at most 3.0 s", "acquire-timeout", "127.0.0.1", "refused"] {
        assert!(waits[0].contains(part), "{part:?} in {err}");
    }
    assert!(!err.contains("SECRET"), "{err}");
}

/// A host name that does not resolve fails the start at once (the default acquire timeout is
/// 30 s), saying so; the command never says it waits.
#[test]
fn an_unresolvable_host_fails_at_once_naming_it() {
    let o = run(&[
        "next",
        "--store",
        "redis://no-such-host.cosid-test.invalid:6379/0",
    ]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("does not resolve"), "{err}");
    assert!(!err.contains("waiting for the store"), "{err}");
    assert!(!err.contains("acquire-timeout"), "{err}");
}
