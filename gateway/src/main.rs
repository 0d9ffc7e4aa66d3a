//! `redis-throttle-rls`: reads upstream's environment, then serves until SIGTERM or SIGINT.

use redis_throttle_rls::settings::Settings;

fn main() {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redis-throttle-rls: {e}");
            std::process::exit(1);
        }
    };
    let level = match settings.log_level.to_ascii_lowercase().as_str() {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        "warn" | "warning" => tracing::Level::WARN,
        _ => tracing::Level::ERROR,
    };
    let builder = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).with_ansi(false);
    if settings.log_json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    for notice in &settings.notices {
        tracing::warn!("{notice}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("redis-throttle-rls: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(redis_throttle_rls::server::run(settings, std::future::pending())) {
        tracing::error!("{e}");
        eprintln!("redis-throttle-rls: {e}");
        std::process::exit(1);
    }
}
