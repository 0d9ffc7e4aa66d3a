//! The response body: the service's own, holding the request's leases until it ends (or is
//! dropped: a cancelled request), or a refusal's.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::Lease;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a [`LimitedBody`] ends with when one of its request's concurrency leases may have
/// been lost: its last confirmed expiry passed (renewals could not reach the server), so
/// another request may hold the slot and this one no longer counts within the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost;

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the response's concurrency lease may have been taken by another request (its renewals could not reach the server): the response is cut"
        )
    }
}

impl std::error::Error for LeaseLost {}

pin_project_lite::pin_project! {
    /// The layer's response body. The leases of the request's concurrency limits are released
    /// when the body has sent its last frame, fails, or is dropped unfinished (the client went
    /// away): never while a streamed response is still being written. Each frame is a sign of
    /// life for them ([`Lease::extend`]); if one may have been lost ([`Lease::is_lost`]: its last
    /// confirmed expiry passed), the body ends with [`LeaseLost`] at once (a timer wakes it at
    /// that expiry), so no response outlives its slot.
    #[project = Projected]
    pub enum LimitedBody<B> {
        Inner { #[pin] body: B, leases: Vec<Lease>, timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)> },
        Full { data: Option<Bytes> },
    }
}

impl<B> LimitedBody<B> {
    pub(crate) fn new(body: B, leases: Vec<Lease>) -> Self {
        LimitedBody::Inner { body, leases, timer: None }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        LimitedBody::Full { data: (!data.is_empty()).then_some(data) }
    }
}

/// Whether a lease may be lost; otherwise arms `timer` for the earliest confirmed expiry.
fn lease_lost(
    leases: &[Lease],
    timer: &mut Option<(Instant, Pin<Box<tokio::time::Sleep>>)>,
    cx: &mut Context<'_>,
) -> bool {
    let Some(earliest) = leases.iter().map(Lease::held_until).min() else { return false };
    if leases.iter().any(Lease::is_lost) {
        return true;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return false; // no timer without a runtime: checked at each frame only
    }
    match timer {
        Some((at, sleep)) if *at == earliest => {
            if sleep.as_mut().poll(cx).is_ready() {
                return leases.iter().any(Lease::is_lost);
            }
        }
        _ => {
            let mut sleep = Box::pin(tokio::time::sleep_until(earliest.into()));
            let _ = sleep.as_mut().poll(cx);
            *timer = Some((earliest, sleep));
        }
    }
    false
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            Projected::Inner { body, leases, timer } => {
                if lease_lost(leases, timer, cx) {
                    tracing::warn!(
                        "redis-throttle: a response's concurrency lease may have been lost; the response is cut"
                    );
                    metrics::counter!("throttle_http_lease_lost_total").increment(1);
                    leases.clear();
                    *timer = None;
                    return Poll::Ready(Some(Err(Box::new(LeaseLost))));
                }
                let frame = ready!(body.poll_frame(cx));
                match &frame {
                    Some(Ok(_)) => leases.iter().for_each(Lease::touch),
                    // The end (or a failure): each lease released as it drops.
                    _ => {
                        leases.clear();
                        *timer = None;
                    }
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
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
