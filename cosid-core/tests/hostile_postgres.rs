//! A PostgreSQL store against a hostile server: a tiny TCP server in this test plays it (it
//! stands in for no store: it answers a connection's startup with the header of one huge
//! message and then sends filler for as long as the connection lasts). Every message is read
//! against a bound before memory is taken for it (the client reserves a message's declared
//! length as soon as its header arrives), so the call fails naming the bound and the heap stays
//! small. Both are checked by bytes: this program's heap peak (a counting global allocator) and
//! those the server managed to write, never by time.
//!
//! Run with `cargo test -p cosid-core --features postgres --test hostile_postgres`.

#![cfg(feature = "postgres")]

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
/// and writes `head` and then `filler` again and again until the connection closes; with
/// `startup`, it first reads the client's startup message, answers it with `startup` and waits
/// for the client's first statement. Returns its `postgres://` URL and the count of bytes it
/// managed to write, over all connections.
fn hostile_server(
    startup: Option<Vec<u8>>,
    head: Vec<u8>,
    filler: Vec<u8>,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            if let Some(answer) = &startup {
                // The startup message: its length (which counts itself), then the rest.
                let mut length = [0u8; 4];
                conn.read_exact(&mut length).unwrap();
                let mut rest = vec![0u8; u32::from_be_bytes(length) as usize - 4];
                conn.read_exact(&mut rest).unwrap();
                conn.write_all(answer).unwrap();
                // The first byte of the first statement.
                conn.read_exact(&mut [0u8; 1]).unwrap();
            }
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
    (
        format!("postgres://cosid:secret@127.0.0.1:{port}/cosid?sslmode=disable"),
        written,
    )
}

/// One read of a slot through the store at `url`, with a 30 s bound on every operation (so
/// that only the message bound can end the call early): its error, once the store is closed.
fn read_error(url: &str) -> cosid_core::Error {
    let url = cosid_core::store::StoreUrl::parse(url).expect("the URL parses");
    let store = cosid_core::store::postgres::PostgresStore::open_with_timeout(
        &url,
        Duration::from_secs(30),
    )
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

/// A backend message header: its type and a declared length (which counts itself).
fn header(kind: u8, length: u32) -> Vec<u8> {
    let mut h = vec![kind];
    h.extend_from_slice(&length.to_be_bytes());
    h
}

/// One test, so that nothing else in this program allocates while a peak is measured.
#[test]
fn a_hostile_postgres_message_fails_at_the_bound_and_costs_bounded_memory() {
    let bound = 1usize << 20;
    // Authentication done (trust), and ready for a statement.
    let ready = [
        header(b'R', 8),
        0u32.to_be_bytes().to_vec(),
        header(b'Z', 5),
        b"I".to_vec(),
    ]
    .concat();
    let cases = [
        // An authentication request declaring 1 GiB, then trickling it.
        (
            "a 1 GiB authentication request",
            None,
            header(b'R', 1 << 30),
        ),
        // An error response declaring 200 MiB.
        ("a 200 MiB error response", None, header(b'E', 200 << 20)),
        // A small message first, then one declaring just over the bound.
        (
            "a message just over the bound",
            None,
            [
                header(b'R', 8),
                0u32.to_be_bytes().to_vec(),
                header(b'S', (bound + 1) as u32),
            ]
            .concat(),
        ),
        // A session that starts, then answers the first statement with a 1 GiB row.
        (
            "a 1 GiB row in answer to a statement",
            Some(ready),
            header(b'D', 1 << 30),
        ),
    ];
    for (what, startup, head) in cases {
        let declared = u32::from_be_bytes(head[head.len() - 4..].try_into().unwrap());
        let (url, written) = hostile_server(startup, head, vec![b'x'; 64 << 10]);
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
            message.contains("is this a PostgreSQL server"),
            "{what}: {message}"
        );
        assert!(message.contains("1 MiB"), "{what}: {message}");
        assert!(
            message.contains(&format!("{declared} bytes")),
            "{what}: {message}"
        );
        assert!(message.contains("127.0.0.1:"), "{what}: {message}");
        assert!(!message.contains("secret"), "{what}: {message}");
        assert!(!message.contains('\n'), "{what}: {message}");
    }
}
