//! `interrupt::request` ends a caller's waits: a start-up acquisition stuck in a store call to a
//! server that accepts connections and never answers (the store's own bound on the call is an
//! hour here, so only the interrupt can end it), and an id call that must wait. One test: the
//! request is process-wide.
//!
//! Run with `cargo test -p cosid-core --features redis --test interrupt`.

#![cfg(feature = "redis")]

use cosid_core::{interrupt, Config, ErrorKind, Runtime};
use std::net::TcpListener;
use std::time::Duration;

#[test]
fn an_interrupt_ends_a_store_call_and_an_id_wait_and_clearing_it_ends_nothing_more() {
    // Built before the request: building waits too.
    let rt = Runtime::builder()
        .config(
            Config::from_yaml(
                "cosid:\n  namespace: ids\n  machine:\n    lease:\n      store: 'memory:'\n",
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    // A server that accepts connections and never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let url = cosid_core::store::StoreUrl::parse(&format!("redis://127.0.0.1:{port}/0")).unwrap();
    let store =
        cosid_core::store::redis::RedisStore::open_with_timeout(&url, Duration::from_secs(3600))
            .unwrap();
    let config = Config::from_yaml(
        "cosid:\n  namespace: interrupted\n  machine:\n    lease:\n      store: 'memory:'\n      \
         acquire-timeout: 30s\n",
    )
    .unwrap();
    let requester = std::thread::spawn(|| {
        // Whether this comes before or after the call starts waiting, the call ends.
        std::thread::sleep(Duration::from_millis(200));
        interrupt::request();
    });
    let e = match Runtime::builder().config(config).store(store).build() {
        Ok(_) => panic!("a runtime was built on a silent server"),
        Err(e) => e,
    };
    requester.join().unwrap();
    assert!(interrupt::is_interrupted(&e), "{e}");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("interrupted"), "{e}");

    // An id call that must wait (more ids than one millisecond holds) ends at its first wait
    // while the request stands; one that need not wait is not affected.
    assert!(rt.next().is_ok());
    let mut out = vec![0u64; 100_000];
    let e = rt.next_batch(&mut out).unwrap_err();
    assert!(interrupt::is_interrupted(&e), "{e}");
    assert!(out.iter().all(|id| *id == 0), "nothing written");
    interrupt::clear();
    rt.next_batch(&mut out).unwrap();
    assert!(out.windows(2).all(|w| w[0] < w[1]));
    rt.close().unwrap();
}
