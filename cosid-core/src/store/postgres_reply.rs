//! The bound on what a PostgreSQL server's messages can make cosid hold. tokio-postgres (through
//! postgres-protocol) reserves a backend message's declared length, up to 4 GiB, as soon as its
//! 5-byte header (a type byte and a big-endian length that counts itself) arrives, so a server
//! that is not PostgreSQL, or a hostile one, could make the process take that much memory with
//! five bytes. Every connection cosid makes to a PostgreSQL server (TCP or a Unix socket, with
//! TLS too) is therefore opened by cosid itself (`postgres.rs`) and handed to the client as a
//! stream that follows the message framing of what it reads and fails the read, before passing
//! the header on, when a message declares more than its bound.
//!
//! The bound is [`MAX_POSTGRES_MESSAGE_BYTES`] for every message, and
//! [`MAX_POSTGRES_LISTING_MESSAGE_BYTES`] while a statement whose answer lists a namespace's
//! records (a snapshot, the candidate view) is in flight on the store. Each record comes in a
//! message of its own, so the rows of a listing are bounded by the namespace's slots and the
//! operation timeout, not here.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

use crate::bounds::bound_text as size;
pub(crate) use crate::bounds::{MAX_POSTGRES_LISTING_MESSAGE_BYTES, MAX_POSTGRES_MESSAGE_BYTES};

/// The message bound of one store's connections: [`MAX_POSTGRES_MESSAGE_BYTES`], or
/// [`MAX_POSTGRES_LISTING_MESSAGE_BYTES`] while a statement that lists records is in flight.
#[derive(Debug, Default)]
pub(crate) struct MessageLimit {
    listing: AtomicUsize,
}

/// Held while a statement that lists a namespace's records is in flight.
pub(crate) struct Listing<'a>(&'a MessageLimit);

impl Drop for Listing<'_> {
    fn drop(&mut self) {
        self.0.listing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MessageLimit {
    /// Raises the bound to [`MAX_POSTGRES_LISTING_MESSAGE_BYTES`] until the guard is dropped.
    pub(crate) fn listing(&self) -> Listing<'_> {
        self.listing.fetch_add(1, Ordering::SeqCst);
        Listing(self)
    }

    fn bytes(&self) -> usize {
        if self.listing.load(Ordering::SeqCst) > 0 {
            MAX_POSTGRES_LISTING_MESSAGE_BYTES
        } else {
            MAX_POSTGRES_MESSAGE_BYTES
        }
    }
}

/// Why a connection's stream failed, kept for the store's messages: the client reports a
/// connection that failed in the middle of a statement only as closed.
pub(crate) type Refusal = Arc<OnceLock<String>>;

/// A stream that fails the read, passing none of its bytes on, that brings the header of a
/// message longer than the bound.
pub(crate) struct Bounded<S> {
    inner: S,
    framing: Framing,
    at: String,
    limit: Arc<MessageLimit>,
    refusal: Refusal,
}

impl<S> Bounded<S> {
    /// `inner` read against `limit`; `at` names the server (host:port or socket path).
    pub(crate) fn new(inner: S, at: String, limit: Arc<MessageLimit>, refusal: Refusal) -> Self {
        Bounded {
            inner,
            framing: Framing::default(),
            at,
            limit,
            refusal,
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
        if let Some(why) = this.refusal.get() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let limit = this.limit.bytes();
            if let Err(declared) = this.framing.feed(&buf.filled()[before..], limit) {
                // Nothing of what was read is passed on.
                buf.set_filled(before);
                let why = format!(
                    "the PostgreSQL server at {} sent a message of {declared} bytes, more than \
                     the {} any cosid query gets back: is this a PostgreSQL server?",
                    crate::bounds::quote(&this.at),
                    size(limit),
                );
                let why = this.refusal.get_or_init(|| why).clone();
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

/// A TLS stream keeps its channel binding (SCRAM's `tls-server-end-point`) when bounded.
impl<S: TlsStream + Unpin> TlsStream for Bounded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose streams are bounded: tokio-postgres makes the `SSLRequest` exchange
/// (one byte back) on the raw stream and hands every message after it to the TLS stream, which
/// is bounded here, on its plain text.
pub(crate) struct BoundedTls<T> {
    pub(crate) inner: T,
    pub(crate) at: String,
    pub(crate) limit: Arc<MessageLimit>,
    pub(crate) refusal: Refusal,
}

type Handshake<S, E> = Pin<Box<dyn std::future::Future<Output = Result<S, E>> + Send>>;

impl<S, T> TlsConnect<S> for BoundedTls<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
    T::Stream: Send + 'static,
{
    type Stream = Bounded<T::Stream>;
    type Error = T::Error;
    type Future = Handshake<Bounded<T::Stream>, T::Error>;

    fn connect(self, stream: S) -> Self::Future {
        let BoundedTls {
            inner,
            at,
            limit,
            refusal,
        } = self;
        let handshake = inner.connect(stream);
        Box::pin(async move { Ok(Bounded::new(handshake.await?, at, limit, refusal)) })
    }
}

/// Where the reader is in the message framing.
#[derive(Debug, Default)]
struct Framing {
    /// The bytes of the current header seen so far (when `body` is 0).
    header: [u8; 5],
    seen: usize,
    /// The bytes of the current message's body still to come.
    body: usize,
}

impl Framing {
    /// Follows `data`; the declared length of a message longer than `limit`, at its header.
    fn feed(&mut self, mut data: &[u8], limit: usize) -> Result<(), usize> {
        while !data.is_empty() {
            if self.body > 0 {
                let n = self.body.min(data.len());
                self.body -= n;
                data = &data[n..];
                continue;
            }
            self.header[self.seen] = data[0];
            self.seen += 1;
            data = &data[1..];
            if self.seen == self.header.len() {
                self.seen = 0;
                let [_, a, b, c, d] = self.header;
                let declared = u32::from_be_bytes([a, b, c, d]) as usize;
                if declared > limit {
                    return Err(declared);
                }
                // A length under 4 is the client's to refuse.
                self.body = declared.saturating_sub(4);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn messages_are_followed_at_any_split() {
        let stream = [
            message(b'R', &[0, 0, 0, 0]),
            message(b'S', b"client_encoding\0UTF8\0"),
            message(b'Z', b"I"),
            message(b'D', &[b'x'; 1000]),
        ]
        .concat();
        for split in 0..stream.len() {
            let mut f = Framing::default();
            f.feed(&stream[..split], 1 << 20).unwrap();
            f.feed(&stream[split..], 1 << 20).unwrap();
            assert_eq!((f.seen, f.body), (0, 0), "split at {split}");
        }
        // One byte at a time.
        let mut f = Framing::default();
        for b in &stream {
            f.feed(std::slice::from_ref(b), 1 << 20).unwrap();
        }
        assert_eq!((f.seen, f.body), (0, 0));
    }

    #[test]
    fn a_message_over_the_limit_fails_at_its_header() {
        let mut f = Framing::default();
        // A body of bytes that would read as a huge header if the framing were lost.
        f.feed(&message(b'D', &[0xff; 64]), 1000).unwrap();
        assert_eq!(f.feed(&[b'D', 0, 0, 3], 1000), Ok(()));
        assert_eq!(f.feed(&[0xe9], 1000), Err(1001));
        let mut f = Framing::default();
        assert_eq!(f.feed(&[b'R', 0x40, 0, 0, 0, b'x'], 1 << 20), Err(1 << 30));
        // The bound itself is allowed.
        let mut f = Framing::default();
        assert_eq!(f.feed(&[b'D', 0, 0, 3, 0xe8], 1000), Ok(()));
    }

    #[test]
    fn sizes_read_as_mib() {
        assert_eq!(size(MAX_POSTGRES_MESSAGE_BYTES), "1 MiB");
        assert_eq!(size(MAX_POSTGRES_LISTING_MESSAGE_BYTES), "16 MiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
