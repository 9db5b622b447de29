//! A Redis store against a hostile server: a tiny TCP server in this test plays it (it stands in
//! for no store: it answers whatever it is sent with one endless reply). Every reply is read
//! against a bound before memory is taken for it, so the call fails naming the bound once the
//! server has sent little more than the bound, and the heap stays small. Both are checked by
//! bytes: those the server managed to write, and this program's heap peak (a counting global
//! allocator), never by time.
//!
//! Run with `cargo test -p cosid-core --features redis --test hostile_redis`.

#![cfg(feature = "redis")]

mod heap;

use cosid_core::ErrorKind;
use heap::peak_during;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the server may write beyond the bound before cosid's error closes the connection: the
/// socket buffers of both ends on loopback (a few MiB each at most) and what one read takes.
const MARGIN: usize = 16 << 20;

/// A server on a free loopback port that, on each connection, reads and drops whatever comes
/// and writes `head` and then `filler` again and again until the connection closes. Returns its
/// `redis://` URL and the count of bytes it managed to write, over all connections.
fn hostile_server(head: Vec<u8>, filler: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = conn.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut sink = [0u8; 4096];
                while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
            });
            let (head, filler, count) = (head.clone(), filler.clone(), count.clone());
            std::thread::spawn(move || {
                if conn.write_all(&head).is_err() {
                    return;
                }
                count.fetch_add(head.len(), Ordering::SeqCst);
                while conn.write_all(&filler).is_ok() {
                    count.fetch_add(filler.len(), Ordering::SeqCst);
                }
            });
        }
    });
    (format!("redis://127.0.0.1:{port}/0"), written)
}

/// One read of a slot through the store at `url`, with a 30 s bound on every operation (so
/// that only the reply bound can end the call early): its error, once the store is closed.
fn read_error(url: &str) -> cosid_core::Error {
    let url = cosid_core::store::StoreUrl::parse(url).expect("the URL parses");
    let store =
        cosid_core::store::redis::RedisStore::open_with_timeout(&url, Duration::from_secs(30))
            .expect("the URL opens");
    let e = match cosid_core::store::SlotStore::read_slot(&*store, "hostile", 0) {
        Ok(_) => panic!("{url:?}: a read succeeded"),
        Err(e) => e,
    };
    drop(store);
    e
}

/// Waits until `written` stops growing (the server's writes fail once the connection closed).
fn settled(written: &AtomicUsize) -> usize {
    let mut last = written.load(Ordering::SeqCst);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = written.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// One test, so that nothing else in this program allocates while a peak is measured.
#[test]
fn a_hostile_redis_reply_fails_at_the_bound_and_costs_bounded_memory() {
    let bound = 1usize << 20;
    let element = [b"$1000\r\n".as_slice(), &[b'x'; 1000], b"\r\n"].concat();
    let cases = [
        // A bulk reply declaring 200 MiB, then sending it.
        (
            "a 200 MiB bulk",
            b"$209715200\r\n".to_vec(),
            vec![b'x'; 64 << 10],
        ),
        // A bulk reply without a declared end: a simple string that never ends its line.
        ("an endless line", b"+".to_vec(), vec![b'x'; 64 << 10]),
        // An array of 100,000 elements of 1000 bytes each (100 MB), filled as fast as it goes.
        (
            "an endless array",
            b"*100000\r\n".to_vec(),
            element.repeat(64),
        ),
        // Arrays in arrays, each holding 100 small elements and one more array.
        (
            "nested arrays",
            Vec::new(),
            [b"*101\r\n".as_slice(), &b":1\r\n".repeat(100)].concat(),
        ),
    ];
    for (what, head, filler) in cases {
        let (url, written) = hostile_server(head, filler);
        let mut e = None;
        let peak = peak_during(|| e = Some(read_error(&url)));
        let e = e.unwrap();
        let sent = settled(&written);
        assert!(
            sent < bound + MARGIN,
            "{what}: the server wrote {sent} bytes before the call failed"
        );
        assert!(
            peak < 4 * bound + MARGIN,
            "{what}: the heap grew by {peak} bytes"
        );
        assert_eq!(e.kind(), ErrorKind::Store, "{what}: {e}");
        let message = e.message();
        assert!(
            message.contains("is this a Redis server"),
            "{what}: {message}"
        );
        if what != "nested arrays" {
            assert!(message.contains("1 MiB"), "{what}: {message}");
        }
        assert!(message.contains("127.0.0.1:"), "{what}: {message}");
        assert!(!message.contains('\n'), "{what}: {message}");
    }
}
