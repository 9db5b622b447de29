//! A small client of etcd's HTTP/JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`,
//! `/v3/auth/authenticate`), which every etcd since 3.4 serves on its client port beside gRPC.
//! Speaking JSON over HTTP/1.1 keeps generated gRPC code, and with it `protoc`, out of the build.
//!
//! - **Connections.** HTTP/1.1 with keep-alive, one request at a time on a connection; idle
//!   connections wait in a small pool and are checked before reuse (a connection the server
//!   closed, or one idle too long, is dropped). A connection that fails in any way is dropped,
//!   never reused, and the next connection starts from the next endpoint, so a cluster of
//!   several members is served by whichever answers. Bodies are sent with `Content-Length`;
//!   answers may come with `Content-Length`, chunked, or up to the end of the connection.
//! - **TLS.** rustls with the ring provider, checking the server's name and chain against the
//!   given CA file and the system's roots.
//! - **Authentication.** With a user, the client asks `/v3/auth/authenticate` for a token and
//!   sends it as `Authorization`; a token the server no longer accepts (expired, or the auth
//!   store changed) is replaced once and the request sent again: the server refused the first
//!   one, so nothing of it was applied.
//!
//! No message here holds the password (the store scrubs messages again on top).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rustls::pki_types::ServerName;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Requests in flight at once (one connection each). Bounded: the gateway turns every answer
/// into JSON, which costs the server far more than gRPC did, and a server flooded with requests
/// answers every caller late. Callers beyond these wait their turn, within the operation's
/// bound.
const MAX_IN_FLIGHT: usize = 32;
/// Idle connections kept for reuse: one per request in flight, so that none is made afresh.
const MAX_IDLE: usize = MAX_IN_FLIGHT;
/// An idle connection older than this is closed rather than reused.
const IDLE_LIFE: Duration = Duration::from_secs(30);
/// Bounds on what the server may send: one header line, the header count, one body (a
/// namespace's snapshot is one answer: some 500 bytes a slot, so this holds 2^19 slots). Memory
/// follows the bytes that arrive, never a size the server declares: a `Content-Length` or a
/// chunk size is checked against the limit, then read in steps of [`READ_STEP`].
const MAX_LINE: usize = 16 << 10;
const MAX_HEADERS: usize = 128;
const MAX_BODY: usize = 256 << 20;
/// The most memory set aside ahead of the bytes that fill it.
const READ_STEP: usize = 64 << 10;

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// The host as the URL gives it (brackets removed from an IPv6 address).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `host:port` or `[v6]:port`, as in the `Host` header and in messages.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Why a call failed. `Display` never holds a credential.
#[derive(Debug)]
pub(super) enum CallError {
    /// No answer: connecting, TLS, the socket, or an answer that is not HTTP/JSON.
    Io(String),
    /// etcd answered with an error (its gRPC code and message).
    Server {
        status: u16,
        code: i64,
        message: String,
    },
}

/// How [`Gateway::connect`]'s error begins; the reason of each member follows, `; ` apart.
const CANNOT_CONNECT: &str = "cannot connect: ";

impl CallError {
    /// Whether trying again cannot cure the error: the server refused the URL's user or
    /// password, or no member could be connected for a reason that lasts (its host name does
    /// not exist, TLS on one side only, a certificate the store does not trust).
    pub(super) fn refused_for_good(&self) -> bool {
        match self {
            CallError::Server { message, .. } => {
                message.starts_with(AUTHENTICATING) && message.contains("authentication failed")
            }
            CallError::Io(text) => text.strip_prefix(CANNOT_CONNECT).is_some_and(|members| {
                members
                    .split("; ")
                    .all(|m| crate::store::blocking::incurable(m).is_some())
            }),
        }
    }
}

/// How an error of authenticating as the URL's user begins.
const AUTHENTICATING: &str = "authenticating as the URL's user: ";

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Io(m) => f.write_str(m),
            CallError::Server {
                status,
                code,
                message,
            } => write!(f, "etcd refused it: {message} (HTTP {status}, code {code})"),
        }
    }
}

impl CallError {
    /// A refusal that a fresh token cures: the token expired or the auth store moved on.
    fn is_stale_token(&self) -> bool {
        matches!(self, CallError::Server { code, message, .. }
            if *code == 16
                || message.contains("invalid auth token")
                || message.contains("revision of auth store is old"))
    }
}

/// The transport under a connection: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

struct Conn {
    io: BufReader<Box<dyn Io>>,
    endpoint: usize,
    idle_since: Instant,
}

struct State {
    idle: Vec<Conn>,
    token: Option<String>,
    /// The endpoint the next new connection tries first.
    next: usize,
}

/// The client: endpoints, TLS, credentials and the connection pool. Shared by the store's
/// callers; every call runs on the store's IO runtime.
pub(super) struct Gateway {
    endpoints: Vec<Endpoint>,
    tls: Option<TlsConnector>,
    /// User name and password: never printed.
    user: Option<(String, String)>,
    connect_timeout: Duration,
    state: Mutex<State>,
    in_flight: tokio::sync::Semaphore,
}

impl Gateway {
    pub(super) fn new(
        endpoints: Vec<Endpoint>,
        tls: Option<Arc<rustls::ClientConfig>>,
        user: Option<(String, String)>,
        timeout: Duration,
    ) -> Gateway {
        // Several members share the operation's bound, so that a member that does not answer
        // leaves time to try the next.
        let n = endpoints.len().max(1) as u32;
        let connect_timeout = (timeout / n).max(Duration::from_millis(100)).min(timeout);
        Gateway {
            endpoints,
            tls: tls.map(TlsConnector::from),
            user,
            connect_timeout,
            state: Mutex::new(State {
                idle: Vec::new(),
                token: None,
                next: 0,
            }),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// POSTs `body` to `path` (with a token when the URL names a user) and returns the body of
    /// etcd's answer (JSON, left for the caller's thread to parse: a snapshot's answer can be
    /// large, and the IO thread serves every caller of the store).
    pub(super) async fn call(&self, path: &str, body: &Value) -> Result<Vec<u8>, CallError> {
        let body = body.to_string();
        let mut renewed = false;
        loop {
            let token = match &self.user {
                None => None,
                Some(_) => Some(self.token().await?),
            };
            match self.request(path, &body, token.as_deref()).await {
                Err(e) if e.is_stale_token() && token.is_some() && !renewed => {
                    renewed = true;
                    let mut st = self.state();
                    if st.token == token {
                        st.token = None;
                    }
                }
                other => return other,
            }
        }
    }

    /// The current token, asking the server for one when there is none.
    async fn token(&self) -> Result<String, CallError> {
        if let Some(t) = self.state().token.clone() {
            return Ok(t);
        }
        let Some((name, password)) = &self.user else {
            return Err(CallError::Io("no user to authenticate".into()));
        };
        let body = serde_json::json!({ "name": name, "password": password }).to_string();
        let answer = self
            .request("/v3/auth/authenticate", &body, None)
            .await
            .and_then(|b| parse::<Value>(&b))
            .map_err(|e| match e {
                CallError::Server {
                    status,
                    code,
                    message,
                } => CallError::Server {
                    status,
                    code,
                    message: format!("{AUTHENTICATING}{message}"),
                },
                io => io,
            })?;
        let token = answer
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| CallError::Io("authenticating: the answer has no token".into()))?
            .to_string();
        self.state().token = Some(token.clone());
        Ok(token)
    }

    /// One HTTP exchange on a pooled or new connection.
    async fn request(
        &self,
        path: &str,
        body: &str,
        token: Option<&str>,
    ) -> Result<Vec<u8>, CallError> {
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| CallError::Io("the client is closed".into()))?;
        let mut conn = match self.idle_conn().await {
            Some(c) => c,
            None => self.connect().await?,
        };
        let endpoint = &self.endpoints[conn.endpoint];
        let mut unfinished = MoveOnIfUnfinished {
            gateway: self,
            endpoint: conn.endpoint,
            finished: false,
        };
        let exchanged = exchange(&mut conn.io, &endpoint.authority(), path, body, token).await;
        unfinished.finished = true;
        match exchanged {
            Ok((status, answer, keep_alive)) => {
                if keep_alive {
                    conn.idle_since = Instant::now();
                    let mut st = self.state();
                    if st.idle.len() < MAX_IDLE {
                        st.idle.push(conn);
                    }
                }
                interpret(status, answer)
            }
            Err(e) => {
                // The connection is dropped; the next one starts from the next member, and the
                // idle ones (likely to the same trouble) are closed too.
                self.move_on_from(conn.endpoint);
                Err(CallError::Io(format!(
                    "{} ({}): {e}",
                    endpoint.authority(),
                    if self.tls.is_some() { "https" } else { "http" }
                )))
            }
        }
    }

    /// The next new connection starts from the member after `endpoint`; idle connections
    /// (likely to the same trouble) are closed.
    fn move_on_from(&self, endpoint: usize) {
        let mut st = self.state();
        st.next = (endpoint + 1) % self.endpoints.len();
        st.idle.clear();
    }

    /// An idle connection that is still open, if any.
    async fn idle_conn(&self) -> Option<Conn> {
        loop {
            let mut conn = self.state().idle.pop()?;
            if conn.idle_since.elapsed() > IDLE_LIFE {
                continue;
            }
            // Nothing may be waiting on an idle connection: an end of file (the server closed
            // it) or stray bytes both mean it cannot carry a request. A read that would wait
            // means it is open.
            let probe = tokio::time::timeout(Duration::ZERO, conn.io.fill_buf()).await;
            if probe.is_err() {
                return Some(conn);
            }
        }
    }

    /// A new connection, trying each member in turn from the preferred one.
    async fn connect(&self) -> Result<Conn, CallError> {
        let n = self.endpoints.len();
        let first = self.state().next % n;
        let mut errors = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let ep = &self.endpoints[i];
            match tokio::time::timeout(self.connect_timeout, self.open(ep)).await {
                Ok(Ok(io)) => {
                    self.state().next = i;
                    return Ok(Conn {
                        io: BufReader::new(io),
                        endpoint: i,
                        idle_since: Instant::now(),
                    });
                }
                Ok(Err(e)) => {
                    let fix = match crate::store::blocking::incurable(&e) {
                        Some(crate::store::blocking::Incurable::UnknownHost) => {
                            format!(" ({})", crate::store::blocking::UNKNOWN_HOST_FIX)
                        }
                        _ => String::new(),
                    };
                    errors.push(format!("{}: {e}{fix}", ep.authority()))
                }
                Err(_) => errors.push(format!(
                    "{}: no connection within {} ms",
                    ep.authority(),
                    self.connect_timeout.as_millis()
                )),
            }
        }
        Err(CallError::Io(format!(
            "{CANNOT_CONNECT}{}",
            errors.join("; ")
        )))
    }

    async fn open(&self, ep: &Endpoint) -> Result<Box<dyn Io>, String> {
        let tcp = TcpStream::connect((ep.host.as_str(), ep.port))
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => {
                let name = ServerName::try_from(ep.host.clone())
                    .map_err(|e| format!("'{}' is not a TLS server name: {e}", ep.host))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                Ok(Box::new(stream))
            }
        }
    }
}

/// The body of a successful answer, or etcd's error.
fn interpret(status: u16, body: Vec<u8>) -> Result<Vec<u8>, CallError> {
    if status == 200 {
        return Ok(body);
    }
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    let field = |k: &str| json.as_ref().and_then(|j| j.get(k));
    let message = field("message")
        .or_else(|| field("error"))
        .and_then(Value::as_str)
        // etcd's words, or any server's: quoted, cut (a 10 MiB message stays one line).
        .map(crate::bounds::quote)
        .unwrap_or_else(|| shorten(&String::from_utf8_lossy(&body)));
    let code = field("code").and_then(Value::as_i64).unwrap_or(-1);
    Err(CallError::Server {
        status,
        code,
        message,
    })
}

/// Foreign text (a status line, a header, a body) for a message: trimmed, on one line, cut.
fn shorten(s: &str) -> String {
    crate::bounds::quote(s.trim())
}

/// Sends one request and reads its answer: `(status, body, connection reusable)`.
async fn exchange(
    io: &mut BufReader<Box<dyn Io>>,
    authority: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> Result<(u16, Vec<u8>, bool), String> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: {t}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    let w = io.get_mut();
    w.write_all(&out)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    w.flush().await.map_err(|e| format!("sending: {e}"))?;

    let status_line = read_line(io).await?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| format!("not an HTTP answer: {}", shorten(&status_line)))?;
    let mut length = None;
    let mut chunked = false;
    let mut keep_alive = version == "HTTP/1.1";
    for n in 0.. {
        if n > MAX_HEADERS {
            return Err("the answer has too many header lines".into());
        }
        let line = read_line(io).await?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("a malformed header line: {}", shorten(&line)));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("a malformed Content-Length: {value}"))?,
                )
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "connection" => {
                let v = value.to_ascii_lowercase();
                if v.contains("close") {
                    keep_alive = false;
                } else if v.contains("keep-alive") {
                    keep_alive = true;
                }
            }
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(io).await?
    } else if let Some(len) = length {
        if len > MAX_BODY {
            return Err(too_large(len));
        }
        let mut buf = Vec::new();
        read_exactly(io, &mut buf, len).await?;
        buf
    } else {
        keep_alive = false;
        let mut buf = Vec::new();
        io.take(MAX_BODY as u64 + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if buf.len() > MAX_BODY {
            return Err(too_large(buf.len()));
        }
        buf
    };
    Ok((status, body, keep_alive))
}

/// The error of an answer past [`MAX_BODY`] (`len`: its declared size, or what arrived).
fn too_large(len: usize) -> String {
    format!(
        "an answer of at least {len} bytes is larger than the limit of {}",
        crate::bounds::bytes_text(MAX_BODY as u64)
    )
}

/// Appends exactly `len` more bytes of `io` to `buf`, growing it only as they arrive (at most
/// [`READ_STEP`] ahead): a size the server declares and never sends costs no memory.
async fn read_exactly(
    io: &mut BufReader<Box<dyn Io>>,
    buf: &mut Vec<u8>,
    len: usize,
) -> Result<(), String> {
    let end = buf.len() + len;
    while buf.len() < end {
        let start = buf.len();
        let step = (end - start).min(READ_STEP);
        buf.resize(start + step, 0);
        let n = io
            .read(&mut buf[start..])
            .await
            .map_err(|e| format!("reading the answer: {e}"));
        match n {
            Ok(0) => {
                buf.truncate(start);
                return Err("the server closed the connection mid-answer".into());
            }
            Ok(n) => buf.truncate(start + n),
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A chunked body, trailers read and dropped.
async fn read_chunked(io: &mut BufReader<Box<dyn Io>>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line = read_line(io).await?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| format!("a malformed chunk size: {}", shorten(&line)))?;
        if size == 0 {
            break;
        }
        // `body` never holds more than `MAX_BODY`, so this cannot wrap, whatever size is sent.
        if size > MAX_BODY - body.len() {
            return Err(too_large(body.len().saturating_add(size)));
        }
        read_exactly(io, &mut body, size).await?;
        if !read_line(io).await?.is_empty() {
            return Err("a chunk does not end where its size says".into());
        }
    }
    for n in 0.. {
        if n > MAX_HEADERS {
            return Err("the answer has too many trailer lines".into());
        }
        if read_line(io).await?.is_empty() {
            break;
        }
    }
    Ok(body)
}

/// One line without its CRLF; an end of file before it is an error.
async fn read_line(io: &mut BufReader<Box<dyn Io>>) -> Result<String, String> {
    let mut line = Vec::new();
    let n = (&mut *io)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    if n == 0 {
        return Err("the server closed the connection".into());
    }
    if line.last() != Some(&b'\n') {
        return Err(if n >= MAX_LINE {
            "a header line is too long".into()
        } else {
            "the server closed the connection mid-answer".into()
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| "a header line is not UTF-8".into())
}

/// Base64 of `bytes`, as the gateway takes keys and values.
pub(super) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The bytes of a base64 field of an answer (absent: empty).
fn unb64(v: Option<&str>) -> Result<Vec<u8>, CallError> {
    match v {
        None => Ok(Vec::new()),
        Some(s) => B64
            .decode(s)
            .map_err(|e| CallError::Io(format!("a field is not base64: {e}"))),
    }
}

/// An int64 of an answer: the gateway writes them as strings (as JSON for protobuf says), a
/// number is taken too.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct I64(pub i64);

impl<'de> Deserialize<'de> for I64 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<I64, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = I64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an int64, as a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<I64, E> {
                s.parse().map(I64).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<I64, E> {
                Ok(I64(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<I64, E> {
                i64::try_from(n).map(I64).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A response header: the store's revision when it answered.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Header {
    #[serde(default)]
    pub revision: I64,
}

/// One key-value of a range answer, as sent (base64).
#[derive(Debug, Deserialize)]
struct RawKv<'a> {
    #[serde(borrow, default)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    value: Option<Cow<'a, str>>,
    #[serde(default, alias = "modRevision")]
    mod_revision: I64,
}

/// A range answer (`/v3/kv/range`, or one read of a transaction).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RangeAnswer<'a> {
    /// How many keys the range holds (before `min_mod_revision` leaves some out).
    #[serde(default)]
    count: I64,
    #[serde(borrow, default)]
    kvs: Vec<RawKv<'a>>,
}

/// One answer of a transaction's operations; only reads and nested transactions are looked at.
#[derive(Debug, Deserialize)]
pub(super) struct OpAnswer<'a> {
    #[serde(borrow, default, alias = "responseRange")]
    pub response_range: Option<RangeAnswer<'a>>,
    /// A nested transaction's answer (a compare-and-set over several slots nests each next
    /// write in the failure branch of the one before).
    #[serde(borrow, default, alias = "responseTxn")]
    pub response_txn: Option<Box<TxnAnswer<'a>>>,
}

/// A transaction's answer (`/v3/kv/txn`).
#[derive(Debug, Deserialize)]
pub(super) struct TxnAnswer<'a> {
    #[serde(default)]
    pub header: Option<Header>,
    /// Absent when false (the gateway leaves out default values).
    #[serde(default)]
    pub succeeded: bool,
    #[serde(borrow, default)]
    pub responses: Vec<OpAnswer<'a>>,
}

/// A key-value, decoded.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

impl RangeAnswer<'_> {
    /// How many keys the range holds.
    pub(super) fn count(&self) -> i64 {
        self.count.0
    }

    /// The key-values read (none when the answer has no `kvs`).
    pub(super) fn kvs(&self) -> Result<Vec<Kv>, CallError> {
        self.kvs
            .iter()
            .map(|kv| {
                Ok(Kv {
                    key: unb64(kv.key.as_deref())?,
                    value: unb64(kv.value.as_deref())?,
                    mod_revision: kv.mod_revision.0,
                })
            })
            .collect()
    }
}

/// A successful answer, read as `T`.
pub(super) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, CallError> {
    serde_json::from_slice(body).map_err(|e| {
        CallError::Io(format!(
            "the answer is not what etcd sends ({e}): {}",
            shorten(&String::from_utf8_lossy(body))
        ))
    })
}

/// Moves the next connection on to the following member when a request is dropped before its
/// answer came: the operation's deadline cancelled it. A member that is stopped or cut off from
/// its cluster still accepts connections and never answers, so without this every retry would
/// go back to it while the other members serve.
struct MoveOnIfUnfinished<'a> {
    gateway: &'a Gateway,
    endpoint: usize,
    finished: bool,
}

impl Drop for MoveOnIfUnfinished<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.gateway.move_on_from(self.endpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends one request through `exchange` to a peer that answers `answer`, and returns what
    /// `exchange` made of it.
    fn answered(answer: &'static [u8]) -> Result<(u16, Vec<u8>, bool), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (client, mut server) = tokio::io::duplex(1 << 16);
            let peer = tokio::spawn(async move {
                let mut request = vec![0; 4096];
                let n = server.read(&mut request).await.unwrap();
                server.write_all(answer).await.unwrap();
                // Ends the connection: only a close-delimited answer reads up to here.
                drop(server);
                String::from_utf8(request[..n].to_vec()).unwrap()
            });
            let mut io: BufReader<Box<dyn Io>> = BufReader::new(Box::new(client));
            let got = exchange(&mut io, "h:1", "/v3/kv/range", "{}", Some("tok")).await;
            let request = peer.await.unwrap();
            assert!(
                request.starts_with("POST /v3/kv/range HTTP/1.1\r\nHost: h:1\r\n")
                    && request.contains("\r\nContent-Length: 2\r\n")
                    && request.contains("\r\nAuthorization: tok\r\n")
                    && request.ends_with("\r\n\r\n{}"),
                "{request:?}"
            );
            got
        })
    }

    #[test]
    fn reads_answers_of_every_framing() {
        let (status, body, keep) =
            answered(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}").unwrap();
        assert_eq!(
            (status, body.as_slice(), keep),
            (200, &b"{\"a\":1}"[..], true)
        );

        // Chunked, with a chunk extension and trailers, as etcd sends its errors.
        let (status, body, keep) = answered(
            b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n\
              4;x=y\r\n{\"co\r\n6\r\nde\":1}\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (status, body.as_slice(), keep),
            (401, &b"{\"code\":1}"[..], true)
        );

        let (_, body, keep) =
            answered(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"b\":2}").unwrap();
        assert_eq!((body.as_slice(), keep), (&b"{\"b\":2}"[..], false));
    }

    #[test]
    fn refuses_broken_answers() {
        for (answer, why) in [
            (&b""[..], "closed the connection"),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}",
                "closed the connection mid-answer",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "chunk size",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                "Content-Length",
            ),
            // A chunk whose size, added to what came before, passes the largest `usize`.
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  1\r\na\r\nffffffffffffffff\r\n",
                "larger than the limit of 268435456 bytes (256 MiB)",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n",
                "larger than the limit",
            ),
        ] {
            let e = answered(answer).expect_err(why);
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn server_errors_carry_etcds_message_and_code() {
        let e = interpret(
            401,
            br#"{"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16}"#.to_vec(),
        )
        .unwrap_err();
        assert!(e.is_stale_token(), "{e}");
        assert!(
            e.to_string()
                .contains("invalid auth token (HTTP 401, code 16)"),
            "{e}"
        );
        let e = interpret(
            412,
            br#"{"message":"etcdserver: authentication is not enabled","code":9}"#.to_vec(),
        )
        .unwrap_err();
        assert!(!e.is_stale_token(), "{e}");
        assert!(matches!(parse::<Value>(b"<html>"), Err(CallError::Io(_))));
        assert_eq!(parse::<Value>(b"{\"x\":1}").unwrap()["x"], 1);
    }

    #[test]
    fn answers_decode_as_the_gateway_writes_them() {
        let txn: TxnAnswer = parse(
            br#"{"header":{"cluster_id":"1","revision":"42"},"succeeded":true,"responses":[
                {"response_range":{"header":{"revision":"42"}}},
                {"responseRange":{"kvs":[{"key":"a2V5","create_revision":"3",
                  "modRevision":"7","version":"1","value":"dg=="}],"count":"1"}},
                {"response_put":{"header":{"revision":"42"}}}]}"#,
        )
        .unwrap();
        assert!(txn.succeeded);
        assert_eq!(txn.header.unwrap().revision, I64(42));
        let reads: Vec<_> = txn
            .responses
            .iter()
            .map(|r| r.response_range.as_ref())
            .collect();
        assert_eq!(reads.len(), 3);
        assert_eq!(reads[0].unwrap().kvs().unwrap(), []);
        assert_eq!(
            reads[1].unwrap().kvs().unwrap(),
            [Kv {
                key: b"key".to_vec(),
                value: b"v".to_vec(),
                mod_revision: 7
            }]
        );
        assert!(reads[2].is_none());
        // A failed compare: `succeeded` left out.
        let lost: TxnAnswer = parse(br#"{"header":{"revision":5}}"#).unwrap();
        assert!(!lost.succeeded && lost.responses.is_empty());
        assert!(parse::<TxnAnswer>(br#"{"header":{"revision":"x"}}"#).is_err());
        let bad: RangeAnswer = parse(br#"{"kvs":[{"key":"!!"}]}"#).unwrap();
        assert!(bad.kvs().is_err());
        assert_eq!(b64(b"key"), "a2V5");
    }
}
