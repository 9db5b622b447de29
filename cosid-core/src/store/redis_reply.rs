//! The bound on what a Redis server's replies can make cosid hold. The redis crate reads a
//! reply of any size (a bulk string grows its read buffer as it arrives; an array collects every
//! element it is sent), so a server that is not Redis, or a hostile one, could grow the process
//! for as long as it keeps sending. Every connection cosid makes to a Redis server (a plain
//! server, a sentinel, Sentinel's master, a cluster node; with TLS too) is therefore built here:
//! cosid connects (and makes the TLS handshake) itself and hands the crate a stream that follows
//! the RESP framing of what it reads and fails the read, before passing the bytes on, once one
//! reply grows past its bound, or declares a length or an element count that cannot fit in it.
//!
//! The bound is [`MAX_REDIS_REPLY_BYTES`] for every reply, and
//! [`MAX_REDIS_SNAPSHOT_REPLY_BYTES`] while a call whose reply lists a namespace's records (a
//! snapshot, the candidate view) is in flight on the store. The crate does not allocate from a
//! declared length (a bulk string is taken from the read buffer as it arrives; an array's
//! capacity hint is capped at 4096 elements), so memory follows the bytes read: at most a few
//! times the bound (the read buffer, and a value's copy of it).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::bounds::bound_text as size;
pub(crate) use crate::bounds::{MAX_REDIS_REPLY_BYTES, MAX_REDIS_SNAPSHOT_REPLY_BYTES};

/// The reply bound of one store's connections: [`MAX_REDIS_REPLY_BYTES`], or
/// [`MAX_REDIS_SNAPSHOT_REPLY_BYTES`] while a call that lists records is in flight.
#[derive(Debug, Default)]
pub(crate) struct ReplyLimit {
    listing: AtomicUsize,
}

/// Held while a call that lists a namespace's records is in flight.
pub(crate) struct Listing<'a>(&'a ReplyLimit);

impl Drop for Listing<'_> {
    fn drop(&mut self) {
        self.0.listing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ReplyLimit {
    /// Raises the bound to [`MAX_REDIS_SNAPSHOT_REPLY_BYTES`] until the guard is dropped.
    pub(crate) fn listing(&self) -> Listing<'_> {
        self.listing.fetch_add(1, Ordering::SeqCst);
        Listing(self)
    }

    fn bytes(&self) -> usize {
        if self.listing.load(Ordering::SeqCst) > 0 {
            MAX_REDIS_SNAPSHOT_REPLY_BYTES
        } else {
            MAX_REDIS_REPLY_BYTES
        }
    }
}

/// What a reply that grew past `limit` is called.
fn over(limit: usize) -> String {
    format!(
        "a reply of more than {}, the most any cosid request gets back",
        size(limit)
    )
}

/// A multiplexed connection to `info` whose replies are bounded by `limit`, opened (TCP, TLS
/// against `ca` or the system's roots, the crate's handshake) within `timeout`.
pub(crate) async fn connect(
    info: &ConnectionInfo,
    ca: Option<&[u8]>,
    config: &AsyncConnectionConfig,
    timeout: Duration,
    limit: &Arc<ReplyLimit>,
) -> RedisResult<MultiplexedConnection> {
    let opened = async {
        let (host, port, tls) =
            match info.addr() {
                ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    ..
                } => (host.clone(), *port, true),
                ConnectionAddr::TcpTls { .. } => return Err(RedisError::from(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "TLS without checking the server's certificate (#insecure) is not supported",
                ))),
                _ => {
                    return Err(RedisError::from(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "only TCP connections are supported",
                    )))
                }
            };
        let at = format!("{host}:{port}");
        let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
        tcp.set_nodelay(true)?;
        let limit = limit.clone();
        if tls {
            let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
                .to_owned();
            let stream = tokio_rustls::TlsConnector::from(tls_config(ca)?)
                .connect(name, tcp)
                .await?;
            multiplexed(info, Bounded::new(stream, at, limit), config).await
        } else {
            multiplexed(info, Bounded::new(tcp, at, limit), config).await
        }
    };
    match tokio::time::timeout(timeout, opened).await {
        Ok(done) => done,
        Err(_) => Err(RedisError::from(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connection timed out after {} ms", timeout.as_millis()),
        ))),
    }
}

/// The crate's connection over `stream`, its reading and writing task spawned (it ends when the
/// last clone of the connection is dropped).
async fn multiplexed<S>(
    info: &ConnectionInfo,
    stream: Bounded<S>,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config.clone())
            .await?;
    tokio::spawn(driver);
    Ok(conn)
}

/// The TLS setup: the server is checked against `ca` when given, else against the system's
/// roots (as the redis crate does).
fn tls_config(ca: Option<&[u8]>) -> io::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                roots
                    .add(cert)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io::Error::other(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A stream whose reads are checked by [`Resp`] against the store's reply bound.
pub(crate) struct Bounded<S> {
    inner: S,
    resp: Resp,
    at: String,
    limit: Arc<ReplyLimit>,
    failed: Option<String>,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S, at: String, limit: Arc<ReplyLimit>) -> Bounded<S> {
        Bounded {
            inner,
            resp: Resp::default(),
            at,
            limit,
            failed: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = &this.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let limit = this.limit.bytes();
            if let Err(over) = this.resp.feed(&buf.filled()[before..], limit) {
                // Nothing of what was read is passed on.
                buf.set_filled(before);
                let why = format!(
                    "the Redis server at {} sent {over}: is this a Redis server, whose cosid keys only cosid \
                     writes?",
                    crate::bounds::quote(&this.at),
                );
                this.failed = Some(why.clone());
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The deepest nesting of aggregates a reply may have (the redis crate's own limit).
const MAX_DEPTH: usize = 100;

/// The longest header line (type byte excepted) of a length or a count.
const MAX_HEADER: usize = 24;

/// Where the RESP framing of the replies read so far stands.
#[derive(Debug, Default)]
pub(crate) struct Resp {
    /// Bytes of the reply under way read so far.
    used: usize,
    /// Each open aggregate: the values it still expects, and whether it is an attribute (which
    /// precedes a value and is not one of its parent's).
    open: Vec<(u64, bool)>,
    state: State,
}

#[derive(Debug, Default)]
enum State {
    /// The next byte is a value's type.
    #[default]
    Type,
    /// In the line after the type byte `kind`: its text so far (kept for a length or a count
    /// only), and whether a CR ended it.
    Line { kind: u8, text: Vec<u8>, cr: bool },
    /// In a bulk value's body: the bytes left, its CRLF included.
    Body(u64),
}

impl Resp {
    /// Follows `data`, the next bytes read. `Err` names what went over `limit`.
    pub(crate) fn feed(&mut self, data: &[u8], limit: usize) -> Result<(), String> {
        let mut at = 0;
        while at < data.len() {
            match &mut self.state {
                State::Body(left) => {
                    let take = (*left).min((data.len() - at) as u64) as usize;
                    *left -= take as u64;
                    let ended = *left == 0;
                    at += take;
                    self.count(take, limit)?;
                    if ended {
                        self.state = State::Type;
                        self.value_done();
                    }
                }
                State::Type => {
                    let kind = data[at];
                    at += 1;
                    self.count(1, limit)?;
                    if !b"+-:$*_#,(!=%~>|".contains(&kind) {
                        return Err(format!(
                            "bytes that are not RESP (a value of type {:?})",
                            char::from(kind)
                        ));
                    }
                    self.state = State::Line {
                        kind,
                        text: Vec::new(),
                        cr: false,
                    };
                }
                State::Line { kind, text, cr } => {
                    let byte = data[at];
                    at += 1;
                    let kind = *kind;
                    if *cr {
                        if byte != b'\n' {
                            return Err("bytes that are not RESP (a CR without LF)".to_string());
                        }
                        let text = std::mem::take(text);
                        self.count(1, limit)?;
                        self.state = State::Type;
                        self.line_done(kind, &text, limit)?;
                        continue;
                    }
                    if byte == b'\r' {
                        *cr = true;
                    } else if b"$*!=%~>|".contains(&kind) {
                        if text.len() >= MAX_HEADER {
                            return Err(
                                "bytes that are not RESP (a length of over 24 digits)".to_string()
                            );
                        }
                        text.push(byte);
                    }
                    self.count(1, limit)?;
                }
            }
        }
        Ok(())
    }

    /// Counts `n` more bytes of the reply under way.
    fn count(&mut self, n: usize, limit: usize) -> Result<(), String> {
        self.used = self.used.saturating_add(n);
        if self.used > limit {
            return Err(over(limit));
        }
        Ok(())
    }

    /// A line of type `kind` with `text` ended.
    fn line_done(&mut self, kind: u8, text: &[u8], limit: usize) -> Result<(), String> {
        let number = || -> Result<i64, String> {
            std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| "bytes that are not RESP (a malformed length)".to_string())
        };
        let room = limit.saturating_sub(self.used) as u64;
        match kind {
            b'$' | b'!' | b'=' => {
                let n = number()?;
                if n < 0 {
                    self.value_done();
                } else {
                    let body = (n as u64).saturating_add(2);
                    if body > room && body <= limit as u64 {
                        return Err(over(limit));
                    }
                    if body > room {
                        return Err(format!(
                            "a reply declaring a value of {n} bytes, more than the {} any cosid \
                             request gets back",
                            size(limit)
                        ));
                    }
                    self.state = State::Body(body);
                }
            }
            b'*' | b'%' | b'~' | b'>' | b'|' => {
                let n = number()?;
                let values = if matches!(kind, b'%' | b'|') {
                    (n.max(0) as u64).saturating_mul(2)
                } else {
                    n.max(0) as u64
                };
                // Every value takes at least 3 bytes ("_\r\n").
                if values.saturating_mul(3) > room && values.saturating_mul(3) <= limit as u64 {
                    return Err(over(limit));
                }
                if values.saturating_mul(3) > room {
                    return Err(format!(
                        "a reply declaring {n} elements, more than fit in the {} any cosid \
                         request gets back",
                        size(limit)
                    ));
                }
                if values == 0 {
                    if kind != b'|' {
                        self.value_done();
                    }
                } else {
                    if self.open.len() >= MAX_DEPTH {
                        return Err(format!("a reply nested over {MAX_DEPTH} deep"));
                    }
                    self.open.push((values, kind == b'|'));
                }
            }
            _ => self.value_done(),
        }
        Ok(())
    }

    /// A value ended: the aggregates it completes end too, and with the outermost the reply.
    fn value_done(&mut self) {
        loop {
            let Some((left, attribute)) = self.open.last_mut() else {
                self.used = 0;
                return;
            };
            *left -= 1;
            if *left > 0 {
                return;
            }
            let attribute = *attribute;
            self.open.pop();
            if attribute {
                // An attribute precedes the value it describes: that one still comes.
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(parts: &[&[u8]], limit: usize) -> Result<usize, String> {
        let mut resp = Resp::default();
        for part in parts {
            resp.feed(part, limit)?;
        }
        Ok(resp.used)
    }

    #[test]
    fn whole_replies_end_the_count_at_any_split() {
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR nope\r\n",
            b":42\r\n",
            b"$5\r\nhello\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$1\r\na\r\n:2\r\n*2\r\n+x\r\n$0\r\n\r\n",
            b"%1\r\n+k\r\n*1\r\n_\r\n",
            b"|1\r\n+a\r\n:1\r\n*1\r\n#t\r\n",
            b"*2\r\n|1\r\n+a\r\n:1\r\n,1.5\r\n(12\r\n",
            b"=7\r\ntxt:abc\r\n",
        ];
        for reply in replies {
            for split in 0..reply.len() {
                let (a, b) = reply.split_at(split);
                assert_eq!(
                    fed(&[a, b], 1000),
                    Ok(0),
                    "{:?}",
                    String::from_utf8_lossy(reply)
                );
            }
            // Many replies one after the other: each counted alone.
            let many = reply.repeat(50);
            assert_eq!(fed(&[&many], reply.len()), Ok(0));
        }
    }

    #[test]
    fn a_reply_over_the_limit_fails_and_a_declared_one_fails_at_its_header() {
        let big = format!("${}\r\n", 1 << 30);
        assert_eq!(
            fed(&[big.as_bytes()], 1 << 20),
            Err(format!(
                "a reply declaring a value of {} bytes, more than the 1 MiB any cosid request \
                 gets back",
                1 << 30
            ))
        );
        let many = format!("*{}\r\n", 1 << 20);
        assert_eq!(
            fed(&[many.as_bytes()], 1 << 20),
            Err(format!(
                "a reply declaring {} elements, more than fit in the 1 MiB any cosid request \
                 gets back",
                1 << 20
            ))
        );
        let endless = [b"*1000\r\n".as_slice(), &b":1\r\n".repeat(1000)].concat();
        assert!(fed(&[&endless], 1000).is_err());
        assert!(fed(&[&endless], 5000).is_ok());
        let line = vec![b'a'; 2000];
        assert!(fed(&[b"+", &line], 1000).is_err());
        assert!(fed(&[b"*1\r\n".repeat(101).as_slice()], 1000).is_err());
        assert!(fed(&[b"?"], 1000).is_err());
    }
}
