//! The response body: the service's own, holding the request's leases until it ends (or is
//! dropped: a cancelled request), or a refusal's.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::Lease;

pin_project_lite::pin_project! {
    /// The layer's response body. The leases of the request's concurrency limits are released
    /// when the body has sent its last frame, fails, or is dropped unfinished (the client went
    /// away): never while a streamed response is still being written.
    #[project = Projected]
    pub enum LimitedBody<B> {
        Inner { #[pin] body: B, leases: Vec<Lease> },
        Full { data: Option<Bytes> },
    }
}

impl<B> LimitedBody<B> {
    pub(crate) fn new(body: B, leases: Vec<Lease>) -> Self {
        LimitedBody::Inner { body, leases }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        LimitedBody::Full { data: (!data.is_empty()).then_some(data) }
    }
}

impl<B: Body<Data = Bytes>> Body for LimitedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            Projected::Inner { body, leases } => {
                let frame = ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    leases.clear(); // the end (or a failure): each lease released as it drops
                }
                Poll::Ready(frame)
            }
            Projected::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            LimitedBody::Inner { body, .. } => body.is_end_stream(),
            LimitedBody::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            LimitedBody::Inner { body, .. } => body.size_hint(),
            LimitedBody::Full { data } => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}
