//! Bounds on what hostile or careless input can grow, through the public API: each
//! test feeds one input that used to fill memory, block or flood a message, and checks that it
//! now fails at once with an error naming the bound.
//!
//! Run with `cargo test -p cosid-core --features redis,postgres,etcd,mysql --test hostile_input`.

use cosid_core::config::Config;
use cosid_core::ErrorKind;
use std::path::{Path, PathBuf};

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Files no configuration should name, each with the words its error must hold: a device
/// that never ends, a FIFO (whose open blocks without O_NONBLOCK), a directory and a regular
/// file one byte past `limit`.
fn hostile_files(dir: &Path, limit: u64) -> Vec<(PathBuf, &'static str)> {
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let big = dir.join("big");
    std::fs::write(&big, vec![b'#'; limit as usize + 1]).unwrap();
    vec![
        ("/dev/zero".into(), "a character device, not a regular file"),
        (
            "/dev/urandom".into(),
            "a character device, not a regular file",
        ),
        (fifo, "a FIFO, not a regular file"),
        (dir.to_path_buf(), "a directory, not a regular file"),
        (big, "larger than the limit of"),
    ]
}

#[test]
fn a_configuration_file_that_is_a_device_fifo_directory_or_too_large_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for (path, says) in hostile_files(dir.path(), cosid_core::config::MAX_CONFIG_BYTES as u64) {
        let e = Config::from_path(&path).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{path:?}: {e}");
        assert!(e.message().contains(says), "{path:?}: {e}");
        assert!(
            e.message().contains(&*path.to_string_lossy()),
            "names the file: {e}"
        );
    }
    let e = Config::from_path(&dir.path().join("big")).unwrap_err();
    assert!(e.message().contains("1048576 bytes (1 MiB)"), "{e}");
}

#[test]
fn a_state_file_that_is_a_device_or_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for (path, says) in hostile_files(dir.path(), cosid_core::bounds::MAX_STATE_FILE_BYTES) {
        let e = cosid_core::static_slot::read_state(&path).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateFile, "{path:?}: {e}");
        // A directory's open fails (EISDIR is not reached: O_RDONLY opens it; fstat tells).
        assert!(e.message().contains(says), "{path:?}: {e}");
    }
}

/// Every TLS store's CA-file parameter, through `store::open`: the file is read when the store
/// opens, before any connection, so no server is needed.
#[test]
fn a_ca_file_that_is_a_device_fifo_directory_or_too_large_is_refused_by_every_tls_store() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(unused_mut)]
    let mut urls: Vec<fn(&str) -> String> = Vec::new();
    #[cfg(feature = "redis")]
    {
        urls.push(|p| format!("rediss://127.0.0.1:1/0?cacert={p}"));
        urls.push(|p| format!("rediss+cluster://127.0.0.1:1/0?cacert={p}"));
        urls.push(|p| format!("rediss+sentinel://127.0.0.1:1/m/0?cacert={p}"));
    }
    #[cfg(feature = "postgres")]
    urls.push(|p| format!("postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert={p}"));
    #[cfg(feature = "etcd")]
    urls.push(|p| format!("etcds://127.0.0.1:1?cacert={p}"));
    #[cfg(feature = "mysql")]
    urls.push(|p| format!("mysql://u@127.0.0.1:1/db?ssl-mode=verify_ca&ssl-ca={p}"));
    for (path, says) in hostile_files(dir.path(), cosid_core::bounds::MAX_CA_FILE_BYTES) {
        for url in &urls {
            let url = url(&path.to_string_lossy());
            let e = match cosid_core::store::open(&url) {
                Ok(_) => panic!("{url} opened"),
                Err(e) => e,
            };
            assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
            assert!(e.message().contains(says), "{url}: {e}");
        }
    }
}

/// `${BIG}` (120 KB) written many times in owner-key: the expansion stops at its limit
/// instead of building a value of gigabytes, and the message names the key and the limit
/// without quoting the value (the environment may hold a password).
#[test]
fn a_huge_expansion_stops_at_the_value_limit() {
    std::env::set_var("COSID_TEST_BIG_120K", "b".repeat(120_000));
    std::env::set_var("COSID_TEST_BIG_40K", "b".repeat(40_000));
    for var in ["COSID_TEST_BIG_120K", "COSID_TEST_BIG_40K"] {
        let doc = format!(
            "cosid: {{machine: {{lease: {{store: 'memory:', owner-key: '{}'}}}}}}",
            format!("${{{var}}}").repeat(800)
        );
        let e = Config::from_yaml(&doc).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        let m = e.message();
        assert!(m.contains("cosid.machine.lease.owner-key"), "{m}");
        assert!(m.contains("longer than the limit of 65536 bytes"), "{m}");
        assert!(!m.contains("bbbb") && m.len() < 400, "{m}");
    }
}

/// Values within the document's size limit but past their own: each refused naming the key,
/// the limit and the length, quoting only the start of the value.
#[test]
fn owner_key_and_namespace_have_length_limits() {
    use cosid_core::bounds::{MAX_NAMESPACE_BYTES, MAX_OWNER_KEY_BYTES};
    let key = "k".repeat(MAX_OWNER_KEY_BYTES + 1);
    let e = Config::from_yaml(&format!(
        "cosid: {{machine: {{lease: {{store: 'memory:', owner-key: '{key}'}}}}}}"
    ))
    .unwrap_err();
    assert!(
        e.message().contains(
            "cosid.machine.lease.owner-key is 513 bytes long, more than the limit of 512"
        ),
        "{e}"
    );
    assert!(e.message().len() < 200, "{e}");
    let ns = "n".repeat(500_000);
    let e = Config::from_yaml(&format!("cosid: {{namespace: '{ns}'}}")).unwrap_err();
    assert!(
        e.message()
            .contains("cosid.namespace is 500000 bytes long, more than the limit of 128"),
        "{e}"
    );
    assert!(e.message().len() < 200, "{e}");
    // A configuration built in code (as a binding may) meets the same bounds when it starts.
    let mut config = Config::from_yaml("cosid: {machine: {lease: {store: 'memory:'}}}").unwrap();
    config.namespace = "n".repeat(MAX_NAMESPACE_BYTES + 1);
    let refused = |config: Config| match cosid_core::Runtime::new(config) {
        Ok(_) => panic!("the runtime started"),
        Err(e) => e,
    };
    let e = refused(config.clone());
    assert!(
        e.message().contains("the namespace is 129 bytes long"),
        "{e}"
    );
    config.namespace = "ok".into();
    if let cosid_core::config::Machine::Lease(l) = &mut config.machine {
        l.owner_key = Some("k".repeat(4_000_000));
    }
    let e = refused(config);
    assert!(
        e.message().contains("the owner key is 4000000 bytes long"),
        "{e}"
    );
    assert!(e.message().len() < 200, "{e}");
}

/// A misspelled, differently cased, percent-encoded or repeated parameter is refused by every
/// scheme, plain `redis://` included (which ran without `WAIT` before), through `store::open`.
#[test]
fn every_store_url_refuses_a_parameter_it_does_not_take() {
    for url in [
        "redis://127.0.0.1:1/0?replica=1",
        "redis://127.0.0.1:1/0?Replicas=1",
        "redis://127.0.0.1:1/0?replicas%3D1",
        "redis://127.0.0.1:1/0?replicas=1&replicas=0",
        "redis://127.0.0.1:1/0?replcias=2",
        "rediss+cluster://127.0.0.1:1/0?replica=1",
        "redis+sentinel://127.0.0.1:1/m?Replicas=1",
        "postgres://u@127.0.0.1:1/db?SSLMODE=disable",
        "etcd://127.0.0.1:1?cacert=/a&cacert=/b",
        "mysql://u@127.0.0.1:1/db?ssl_ca=/x",
    ] {
        let e = match cosid_core::store::open(url) {
            Ok(_) => panic!("{url} opened"),
            Err(e) => e,
        };
        assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        assert!(
            e.message().contains("does not take") || e.message().contains("twice"),
            "{url}: {e}"
        );
    }
}
