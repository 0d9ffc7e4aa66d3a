//! The gateway guide's LLM example, end to end: its rate limit configuration and its Envoy
//! configuration (read from docs/src/guides/gateway.md, addresses replaced by free ports) in
//! front of an OpenAI-style backend that reports `usage.total_tokens`. A key's calls pass while
//! it is within its token budget; the call that overdraws is charged in full; the next ones get
//! 429; another key is untouched; Redis holds what was charged.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use harness::Server;
use rls::EnvoyProcess;
use rls::envoy::fetch;
use rls::{Rls, host_port, runtime};

/// The fenced block that follows `marker` in the gateway guide.
fn guide_block(marker: &str) -> String {
    let guide = std::fs::read_to_string(harness::workspace_root().join("docs/src/guides/gateway.md")).unwrap();
    let after = &guide[guide.find(marker).unwrap_or_else(|| panic!("the guide lost its marker {marker:?}"))..];
    let start = after.find("```yaml\n").unwrap() + "```yaml\n".len();
    let end = after[start..].find("\n```").unwrap();
    after[start..start + end + 1].to_string()
}

/// An OpenAI-style backend: every call used the tokens its `x-test-tokens` header says.
async fn backend() -> u16 {
    let app = axum::Router::new().fallback(|headers: axum::http::HeaderMap| async move {
        let tokens: Option<u64> = headers.get("x-test-tokens").and_then(|v| v.to_str().ok()?.parse().ok());
        let usage = tokens.map_or(String::new(), |t| {
            format!(r#","usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{t}}}"#, t / 2, t - t / 2)
        });
        let body = format!(
            r#"{{"object":"chat.completion","choices":[{{"message":{{"role":"assistant","content":"hi"}}}}]{usage}}}"#
        );
        ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_per_api_key_checked_on_the_request_and_charged_when_the_response_is_done() {
    let server = Server::start();
    let dir = runtime(&[("llm.yaml", &guide_block("gateway/tests/llm.rs runs this file"))]);
    let rls = Rls::start(&dir, &host_port(&server.url()), &[("DECISION_DEADLINE", "")]);
    let backend = backend().await;
    let port = harness::free_port(false);
    let yaml = guide_block("gateway/tests/llm.rs runs this Envoy configuration")
        .replace("address: 0.0.0.0, port_value: 10000", &format!("address: 127.0.0.1, port_value: {port}"))
        .replace("port_value: 8081", &format!("port_value: {}", rls.grpc.rsplit_once(':').unwrap().1))
        .replace("port_value: 8000", &format!("port_value: {backend}"));
    let envoy = EnvoyProcess::start("llm", port, &yaml);

    let call = |key: &'static str, tokens: u64| {
        let port = envoy.port;
        async move {
            let t = tokens.to_string();
            fetch(port, "/v1/chat/completions", &[("x-api-key", key), ("x-test-tokens", &t)]).await
        }
    };
    let total = || rls.stat("ratelimit.service.rate_limit.llm.api_key.total_hits");
    // The charge is sent when the stream ends, after the answer: wait until it is counted (a
    // client faster than that could slip one more call in, as with upstream).
    let counted = |at_least: u64| {
        for _ in 0..300 {
            if total() >= at_least {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the charge was never counted: {} of {at_least}", total());
    };
    // 40,000 tokens a call against 100,000 a minute: three calls pass (the third overdraws the
    // budget, to 120,000, and is charged in full), then 429.
    let mut statuses = Vec::new();
    for n in 1..=3 {
        let (status, _, body) = call("alice", 40_000).await;
        assert!(body.contains("total_tokens"), "{body}");
        statuses.push(status);
        counted(40_000 * n);
    }
    assert_eq!(statuses, [200, 200, 200]);
    assert_eq!(total(), 120_000);
    let (status, headers, _) = call("alice", 1).await;
    assert_eq!(status, 429, "over its budget: {headers:?}");
    // Redis holds the charges (a sliding window per second: one bucket of 120,000 here).
    let mut redis = server.client();
    let held: Vec<u8> = redis::cmd("GET").arg("llm_api_key_alice_sliding").query(&mut redis).unwrap();
    assert!(!held.is_empty());
    // Another key is untouched.
    assert_eq!(call("bob", 500).await.0, 200);
    counted(120_500);
    // A response that reports no usage charges nothing.
    let (status, _, _) = fetch(envoy.port, "/v1/chat/completions", &[("x-api-key", "carol")]).await;
    assert_eq!(status, 200);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(total(), 120_500, "{}", envoy.log());
    let _ = std::fs::remove_dir_all(&dir);
}
