//! The rate limit configuration in force: from files (`RUNTIME_*`, reloaded on every change) or
//! from an xDS server (`CONFIG_TYPE=GRPC_XDS_SOTW`, applied as each version arrives). Either way
//! the documents pass the one validator ([`config::build`]); one that fails keeps the
//! configuration in force. A request reads the configuration once, so it is decided wholly by
//! the old one or wholly by the new.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Health;
use crate::config::{self, ConfigError, RateLimitConfig};
use crate::service::Service;
use crate::settings::ConfigSettings;
use crate::source::FileSource;

/// Loads the configuration and follows its changes in the background. From files the first
/// load is done at once; from xDS, unless `FORCE_START_WITHOUT_INITIAL_CONFIG`, this waits for
/// the server's first response (loaded or not), as upstream waits before it listens.
pub async fn start(s: &ConfigSettings, service: &Arc<Service>, health: &Arc<Health>) {
    match &s.xds {
        None => start_files(s, service, health),
        Some(x) => {
            let (first_tx, first_rx) = tokio::sync::oneshot::channel();
            let mut first = Some(first_tx);
            let (service, health, merge) = (service.clone(), health.clone(), s.merge_domain_config);
            tokio::spawn(crate::xds::run(x.clone(), move |docs: Vec<(String, serde_norway::Value)>| {
                let loaded = config::build(docs.into_iter().map(Ok), &service.stats, merge);
                let outcome = apply(&service, &health, loaded);
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
                outcome
            }));
            if s.force_start_without_initial_config {
                return;
            }
            tracing::info!("Waiting for initial ratelimit config update event");
            let _ = first_rx.await;
            tracing::info!("Successfully loaded the initial ratelimit configs");
        }
    }
}

fn start_files(s: &ConfigSettings, service: &Arc<Service>, health: &Arc<Health>) {
    let source = FileSource {
        root: s.runtime_root.clone().into(),
        subdirectory: s.runtime_subdirectory.clone(),
        app_directory: s.runtime_appdirectory.clone(),
        ignore_dot_files: s.runtime_ignore_dot_files,
        watch_root: s.runtime_watch_root,
    };
    let merge = s.merge_domain_config;
    let load = move |service: &Service, docs: std::io::Result<crate::source::Documents>| {
        docs.map_err(|e| ConfigError(format!("cannot read the configuration: {e}")))
            .and_then(|docs| config::load(&docs, &service.stats, merge))
    };
    let _ = apply(service, health, load(service, source.read()));
    let (service, health) = (service.clone(), health.clone());
    let mut first = true;
    tokio::spawn(source.watch(Duration::from_millis(250), move |docs| {
        if std::mem::take(&mut first) {
            return; // loaded above
        }
        let _ = apply(&service, &health, load(&service, docs));
    }));
}

/// Puts a loaded configuration in force, or counts and logs why it did not load (the one in
/// force stays); the error text is what an xDS NACK carries.
fn apply(service: &Service, health: &Health, loaded: Result<RateLimitConfig, ConfigError>) -> Result<(), String> {
    match loaded {
        Ok(c) => {
            health.config_loaded.store(!c.is_empty(), Ordering::Relaxed);
            service.set_config(c);
            service.stats.counter("ratelimit.service.config_load_success").inc(1);
            tracing::info!("Successfully loaded new configuration");
            Ok(())
        }
        Err(e) => {
            service.stats.counter("ratelimit.service.config_load_error").inc(1);
            tracing::error!("Error loading new configuration: {e}");
            Err(e.to_string())
        }
    }
}
