//! What a limit counts by: the request's key.

use std::net::IpAddr;
use std::sync::Arc;

use http::{Extensions, HeaderMap, HeaderName, Method, Uri};

/// The parts of a request a key is taken from.
pub struct RequestParts<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub extensions: &'a Extensions,
    /// The route template (axum's `MatchedPath`, such as `/users/{id}`), or the path when the
    /// request carries none.
    pub route: &'a str,
}

/// The authenticated subject of a request: an authentication layer in front of the rate limit
/// inserts it into the request's extensions (`request.extensions_mut().insert(Subject(..))`),
/// and [`Key::subject`] counts by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subject(pub String);

type KeyFn = dyn Fn(&RequestParts<'_>) -> Option<String> + Send + Sync;

/// Where a limit's key comes from. A request whose key cannot be found (no such header or an
/// empty one, too few `X-Forwarded-For` entries or a trusted entry that is not an address, no
/// [`Subject`], the closure answered `None`) follows the layer's [`MissingKey`](super::MissingKey)
/// rule. Nothing else makes a request keyless: bytes a client sends (not ASCII, malformed)
/// either are its key or are never read.
#[derive(Clone)]
pub struct Key(pub(crate) KeyKind);

#[derive(Clone)]
pub(crate) enum KeyKind {
    #[cfg(feature = "axum")]
    PeerIp,
    ForwardedFor(usize),
    Header(HeaderName),
    Subject,
    Route,
    Fn(Arc<KeyFn>),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            #[cfg(feature = "axum")]
            KeyKind::PeerIp => write!(f, "Key::peer_ip()"),
            KeyKind::ForwardedFor(n) => write!(f, "Key::forwarded_for({n})"),
            KeyKind::Header(h) => write!(f, "Key::header({h:?})"),
            KeyKind::Subject => write!(f, "Key::subject()"),
            KeyKind::Route => write!(f, "Key::route()"),
            KeyKind::Fn(_) => write!(f, "Key::from_fn(..)"),
        }
    }
}

/// Why a key could not be read at all (a configuration error, not a request without a key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyError {
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    NoConnectInfo,
}

impl Key {
    /// The TCP peer's IP address, from axum's `ConnectInfo<SocketAddr>` (feature `axum`). The
    /// layer refuses to be built with this key unless the service is served with connect info
    /// (see [`RateLimit::into_make_service`](super::RateLimit::into_make_service)).
    #[cfg(feature = "axum")]
    pub fn peer_ip() -> Key {
        Key(KeyKind::PeerIp)
    }

    /// The client's IP behind `trusted_proxies` proxies of your own, each appending the address
    /// it received the request from to `X-Forwarded-For`: the `trusted_proxies`-th entry from
    /// the right (over every `X-Forwarded-For` line, in order), the one your outermost proxy
    /// wrote. Only those `trusted_proxies` entries are read, as bytes: entries to their left were
    /// written by the client (or by proxies you do not run), so nothing in them (a forged
    /// address, bytes that are not ASCII, a malformed list) can change the key. Fewer entries
    /// than `trusted_proxies`, or a trusted entry that is not an IP address: no key. An
    /// IPv4-mapped IPv6 address counts as its IPv4 address.
    pub fn forwarded_for(trusted_proxies: usize) -> Key {
        Key(KeyKind::ForwardedFor(trusted_proxies))
    }

    /// A request header's value (an API key, a tenant id): its first line, as bytes (a value
    /// with bytes that are not ASCII is a key of its own), without surrounding spaces and tabs.
    /// No such header, or an empty value: no key.
    pub fn header(name: HeaderName) -> Key {
        Key(KeyKind::Header(name))
    }

    /// The authenticated [`Subject`] in the request's extensions.
    pub fn subject() -> Key {
        Key(KeyKind::Subject)
    }

    /// The route template: one limit shared by every caller of a route.
    pub fn route() -> Key {
        Key(KeyKind::Route)
    }

    /// Any key computed from the request.
    pub fn from_fn(f: impl Fn(&RequestParts<'_>) -> Option<String> + Send + Sync + 'static) -> Key {
        Key(KeyKind::Fn(Arc::new(f)))
    }

    pub(crate) fn needs_peer(&self) -> bool {
        #[cfg(feature = "axum")]
        return matches!(self.0, KeyKind::PeerIp);
        #[cfg(not(feature = "axum"))]
        false
    }

    /// The request's key as bytes (`None`: the request has no key for this limit).
    pub(crate) fn extract(&self, req: &RequestParts<'_>) -> Result<Option<Vec<u8>>, KeyError> {
        Ok(match &self.0 {
            #[cfg(feature = "axum")]
            KeyKind::PeerIp => Some(peer_ip(req.extensions).ok_or(KeyError::NoConnectInfo)?.to_string().into_bytes()),
            KeyKind::ForwardedFor(n) => forwarded_for(req.headers, *n).map(|ip| ip.to_string().into_bytes()),
            KeyKind::Header(name) => {
                req.headers.get(name).map(|v| v.as_bytes().trim_ascii()).filter(|v| !v.is_empty()).map(<[u8]>::to_vec)
            }
            KeyKind::Subject => req.extensions.get::<Subject>().map(|s| s.0.clone().into_bytes()),
            KeyKind::Route => Some(req.route.as_bytes().to_vec()),
            KeyKind::Fn(f) => f(req).map(String::into_bytes),
        })
    }
}

#[cfg(feature = "axum")]
fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
    extensions.get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip().to_canonical())
}

/// The `trusted`-th `X-Forwarded-For` entry from the right, over every field line in order.
/// Only the `trusted` rightmost entries are read, and as bytes: what the client wrote to their
/// left (bytes that are not ASCII, anything else) is never looked at.
pub(crate) fn forwarded_for(headers: &HeaderMap, trusted: usize) -> Option<IpAddr> {
    let skip = trusted.checked_sub(1)?;
    let entry = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','))
        .nth(skip)?;
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    // `1.2.3.4:5678` and `[::1]:5678` carry a port some proxies add.
    let ip: IpAddr = entry.parse().ok().or_else(|| entry.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", l.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_rightmost_untrusted_entry_is_the_client() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(forwarded_for(&xff(&["6.6.6.6, 1.2.3.4"]), 1), ip("1.2.3.4"));
        assert_eq!(forwarded_for(&xff(&["6.6.6.6", "1.2.3.4, 10.0.0.2"]), 2), ip("1.2.3.4"));
        assert_eq!(forwarded_for(&xff(&["1.2.3.4"]), 2), None, "fewer entries than trusted proxies");
        assert_eq!(forwarded_for(&xff(&["1.2.3.4, garbage"]), 1), None);
        assert_eq!(forwarded_for(&xff(&["[2001:db8::1]:443"]), 1), ip("2001:db8::1"));
        assert_eq!(forwarded_for(&HeaderMap::new(), 1), None);
        assert_eq!(forwarded_for(&xff(&["::ffff:1.2.3.4"]), 1), ip("1.2.3.4"));
    }

    #[test]
    fn bytes_the_client_wrote_left_of_the_trusted_entries_are_never_read() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let lines = |lines: &[&[u8]]| {
            let mut h = HeaderMap::new();
            for l in lines {
                h.append("x-forwarded-for", http::HeaderValue::from_bytes(l).unwrap());
            }
            h
        };
        assert_eq!(forwarded_for(&lines(&[b"\xc3\xa9vil, 9.9.9.9"]), 1), ip("9.9.9.9"));
        assert_eq!(forwarded_for(&lines(&[b"\xff\xfe", b"1.2.3.4, 10.0.0.2"]), 2), ip("1.2.3.4"));
        assert_eq!(forwarded_for(&lines(&[b"\xc3\xa9vil,,;\"", b"9.9.9.9"]), 1), ip("9.9.9.9"));
        // A trusted entry that is not an address is no key (it never comes from the client).
        assert_eq!(forwarded_for(&lines(&[b"1.2.3.4, \xc3\xa9"]), 1), None);
    }
}
