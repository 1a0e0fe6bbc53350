//! The request body of the hyper transport: nothing, bytes in memory, or generated content
//! produced chunk by chunk as the connection takes it, each chunk stamping the exchange's
//! progress (so the body-idle deadline sees it move).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::deadline::ProgressReader;

/// A request body: nothing, bytes in memory, or generated content produced as it is sent.
#[derive(Debug)]
pub struct ReqBody(pub(super) BodyKind);

/// What a [`ReqBody`] carries.
#[derive(Debug)]
pub(crate) enum BodyKind {
    Empty,
    Bytes(Option<Bytes>),
    /// Boxed: a request waits in its connection's queue of 32 slots, each as large as the
    /// largest request; generated content would make each slot 100 bytes larger.
    Content(Box<ContentBody>),
}

/// Generated content as it is sent.
#[derive(Debug)]
pub(crate) struct ContentBody {
    pub(super) chunks: ProgressReader,
    pub(super) remaining: u64,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = match &mut self.get_mut().0 {
            BodyKind::Empty => None,
            BodyKind::Bytes(b) => b.take(),
            BodyKind::Content(content) => {
                let chunk = content.chunks.next();
                if let Some(c) = &chunk {
                    content.remaining = content.remaining.saturating_sub(c.len() as u64);
                }
                chunk
            }
        };
        Poll::Ready(next.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            BodyKind::Empty => true,
            BodyKind::Bytes(b) => b.is_none(),
            BodyKind::Content(content) => content.remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(match &self.0 {
            BodyKind::Empty => 0,
            BodyKind::Bytes(b) => b.as_ref().map_or(0, |b| b.len() as u64),
            BodyKind::Content(content) => content.remaining,
        })
    }
}
