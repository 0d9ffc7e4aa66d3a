//! Requests through a real Envoy ([`super::EnvoyProcess`]): one HTTP/1.1 request at a time, its
//! status, headers and body.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request through Envoy on `port`: the status and the response's headers (lowercase names).
pub async fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>) {
    let (status, headers, _) = fetch(port, path, headers).await;
    (status, headers)
}

/// One request through Envoy on `port`: the status, the headers (lowercase names) and the body.
pub async fn fetch(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, HashMap<String, String>, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}
