//! An etcd store against a hostile or broken server (issue 32): a tiny HTTP server in this test
//! plays it (it stands in for no store: it answers every request with one bad answer). This
//! program counts its heap with a global allocator, so that "a declared size costs no memory"
//! is checked by bytes, not by time.
//!
//! Run with `cargo test -p cosid-core --features etcd --test hostile_etcd`.

#![cfg(feature = "etcd")]

mod heap;

use cosid_core::ErrorKind;
use heap::peak_during;
use std::io::{Read, Write};
use std::net::TcpListener;

/// A server on a free loopback port that reads each request (head and body) and answers it
/// with `answer`, then closes the connection. Returns its `etcd://` URL.
fn hostile_server(answer: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                // The request: a head up to its blank line, then Content-Length bytes.
                let mut got = Vec::new();
                let mut byte = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = conn.read(&mut byte) else { return };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&byte[..n]);
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while got.len() < head_end + length {
                    match conn.read(&mut byte) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&byte[..n]),
                    }
                }
                let _ = conn.write_all(&answer);
            });
        }
    });
    format!("etcd://127.0.0.1:{port}")
}

/// One read of a namespace through the store at `url`: its error.
fn read_error(url: &str) -> cosid_core::Error {
    let store = cosid_core::store::open(url).expect("the URL opens");
    match store.snapshot("hostile") {
        Ok(_) => panic!("{url}: a read succeeded"),
        Err(e) => e,
    }
}

/// One test, so that nothing else in this program allocates while a peak is measured.
#[test]
fn a_hostile_etcd_server_costs_no_memory_for_sizes_it_declares_and_its_words_are_cut() {
    // A chunk header of 0xFFFFFFF (256 MiB less a byte, under the body limit) and no chunk:
    // this allocated and zeroed 256 MiB per request before.
    let chunk = hostile_server(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFF\r\nabc".to_vec(),
    );
    // The same as a Content-Length.
    let length =
        hostile_server(b"HTTP/1.1 200 OK\r\nContent-Length: 268435455\r\n\r\n{\"x\":".to_vec());
    for url in [&chunk, &length] {
        let mut e = None;
        let peak = peak_during(|| e = Some(read_error(url)));
        let e = e.unwrap();
        assert!(peak < 32 << 20, "{url}: the heap grew by {peak} bytes");
        assert_eq!(e.kind(), ErrorKind::Store, "{url}: {e}");
        assert!(e.message().contains("mid-answer"), "{url}: {e}");
    }
    // A size past the limit is refused naming it, before any byte of the body is read.
    let over = hostile_server(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFF\r\n".to_vec(),
    );
    let e = read_error(&over);
    assert!(
        e.message()
            .contains("larger than the limit of 268435456 bytes (256 MiB)"),
        "{e}"
    );
    // etcd's words, 10 MiB of them: cut, on one line.
    let mut big = b"{\"code\":3,\"message\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'm', 10 << 20));
    big.extend_from_slice(b"\\nsecond line\"}");
    let mut answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        big.len()
    )
    .into_bytes();
    answer.extend_from_slice(&big);
    let e = read_error(&hostile_server(answer));
    let m = e.message();
    assert!(m.contains("bytes in all)"), "{}", &m[..m.len().min(400)]);
    assert!(m.len() < 2000 && !m.contains('\n'), "{} bytes", m.len());
}
