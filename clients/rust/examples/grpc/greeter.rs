//! A gRPC service and its client written by hand, without protoc or a build script: the
//! messages derive `prost::Message`, the server routes a method's path to
//! `tonic::server::Grpc::unary`, the client calls `tonic::client::Grpc::unary`, both with the
//! prost codec (what tonic's code generator would write for this `.proto`):
//!
//! ```proto
//! package demo;
//! service Greeter { rpc SayHello (HelloRequest) returns (HelloReply); }
//! message HelloRequest { string name = 1; }
//! message HelloReply { string message = 1; }
//! ```

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tonic::codegen::{Body, BoxFuture, Bytes, Context, Poll, Service, StdError, http};

#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    #[prost(string, tag = "1")]
    pub message: String,
}

/// The method's path: the route the rate-limit layer sees.
pub const SAY_HELLO: &str = "/demo.Greeter/SayHello";

/// The server: answers `SayHello`, counting the calls that reach it.
#[derive(Clone, Default)]
pub struct Greeter {
    pub served: Arc<AtomicUsize>,
}

impl tonic::server::NamedService for Greeter {
    const NAME: &'static str = "demo.Greeter";
}

struct SayHello(Arc<AtomicUsize>);

impl tonic::server::UnaryService<HelloRequest> for SayHello {
    type Response = HelloReply;
    type Future = std::future::Ready<Result<tonic::Response<HelloReply>, tonic::Status>>;
    fn call(&mut self, request: tonic::Request<HelloRequest>) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(tonic::Response::new(HelloReply {
            message: format!("hello, {}", request.into_inner().name),
        })))
    }
}

impl<B> Service<http::Request<B>> for Greeter
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let served = self.served.clone();
        Box::pin(async move {
            if request.uri().path() != SAY_HELLO {
                return Ok(tonic::Status::unimplemented(format!("no method {}", request.uri().path())).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(SayHello(served), request).await)
        })
    }
}

/// The client's call of `SayHello` on a channel (metadata, such as `x-api-key`, on the request).
pub async fn say_hello(
    channel: tonic::transport::Channel,
    request: tonic::Request<HelloRequest>,
) -> Result<tonic::Response<HelloReply>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unknown(format!("the channel is not ready: {e}")))?;
    grpc.unary(request, http::uri::PathAndQuery::from_static(SAY_HELLO), tonic_prost::ProstCodec::default()).await
}
