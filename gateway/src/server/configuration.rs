//! The rate limit configuration in force: read from its source at start, then reloaded on
//! every change; a configuration that fails to load keeps the one in force.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Health;
use crate::config;
use crate::service::Service;
use crate::settings::ConfigSettings;
use crate::source::{Documents, FileSource};

/// Loads the configuration now, then follows its changes in the background.
pub fn start(s: &ConfigSettings, service: &Arc<Service>, health: &Arc<Health>) {
    let source = FileSource {
        root: s.runtime_root.clone().into(),
        subdirectory: s.runtime_subdirectory.clone(),
        app_directory: s.runtime_appdirectory.clone(),
        ignore_dot_files: s.runtime_ignore_dot_files,
        watch_root: s.runtime_watch_root,
    };
    apply(service, health, s.merge_domain_config, source.read());
    let (service, health, merge) = (service.clone(), health.clone(), s.merge_domain_config);
    let mut first = true;
    tokio::spawn(source.watch(Duration::from_millis(250), move |docs| {
        if std::mem::take(&mut first) {
            return; // loaded above
        }
        apply(&service, &health, merge, docs);
    }));
}

/// Loads the documents into the service: a bad configuration keeps the one in force.
fn apply(service: &Service, health: &Health, merge: bool, docs: std::io::Result<Documents>) {
    let loaded = docs
        .map_err(|e| config::ConfigError(format!("cannot read the configuration: {e}")))
        .and_then(|docs| config::load(&docs, &service.stats, merge));
    match loaded {
        Ok(c) => {
            health.config_loaded.store(!c.is_empty(), Ordering::Relaxed);
            service.set_config(c);
            service.stats.counter("ratelimit.service.config_load_success").inc(1);
            tracing::info!("Successfully loaded new configuration");
        }
        Err(e) => {
            service.stats.counter("ratelimit.service.config_load_error").inc(1);
            tracing::error!("Error loading new configuration: {e}");
        }
    }
}
