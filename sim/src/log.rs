//! The kernel log: where the kmd's and the firmware's messages go.
//!
//! On a real system the driver's refusals, GPU faults, timeouts and
//! firmware crashes land in the kernel log (`dmesg`). Here they are
//! `tracing` events, and [`install`] gives every program built on the
//! simulated machine (the tools, the LD_PRELOAD shim) the same sink,
//! configured from the environment by [`LogConfig::from_env`]:
//!
//! - `AGX_LOG` (or, if unset, `RUST_LOG`) is the filter, in
//!   `tracing-subscriber`'s `EnvFilter` syntax (`warn`,
//!   `agx_kmd=debug`, ...). The default is `warn`: faults, timeouts and
//!   crashes, as dmesg shows them, and nothing on a run that goes well.
//! - `AGX_LOG_FILE` names a file to append to instead of standard error.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

/// The filter used when neither `AGX_LOG` nor `RUST_LOG` is set.
pub const DEFAULT_FILTER: &str = "warn";

/// Why the log could not be installed as asked.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The filter does not parse.
    #[error("bad log filter {filter:?}: {reason}")]
    BadFilter {
        /// The filter as given.
        filter: String,
        /// What the parser said.
        reason: String,
    },
    /// `AGX_LOG_FILE` cannot be opened for appending.
    #[error("cannot open the log file {path}: {source}")]
    File {
        /// The path as given.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Another subscriber is already installed in this process.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Where the log goes and what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// An `EnvFilter` directive string.
    pub filter: String,
    /// A file to append to; standard error if `None`.
    pub file: Option<PathBuf>,
}

impl LogConfig {
    /// What the environment asks for: the filter from `AGX_LOG`, else
    /// `RUST_LOG`, else [`DEFAULT_FILTER`]; the file from
    /// `AGX_LOG_FILE`.
    pub fn from_env() -> LogConfig {
        LogConfig {
            filter: std::env::var("AGX_LOG")
                .or_else(|_| std::env::var("RUST_LOG"))
                .unwrap_or_else(|_| DEFAULT_FILTER.to_string()),
            file: std::env::var_os("AGX_LOG_FILE").map(PathBuf::from),
        }
    }
}

/// Installs the kernel log for this process as `config` says. On an
/// error nothing is installed; the caller reports it (the log itself
/// cannot).
pub fn install(config: &LogConfig) -> Result<(), LogError> {
    let env_filter = EnvFilter::try_new(&config.filter).map_err(|e| LogError::BadFilter {
        filter: config.filter.clone(),
        reason: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_target(true);
    let installed = match &config.file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| LogError::File {
                    path: path.display().to_string(),
                    source,
                })?;
            builder.with_writer(Mutex::new(file)).try_init()
        }
        None => builder.with_writer(std::io::stderr).try_init(),
    };
    installed.map_err(|_| LogError::AlreadyInstalled)
}
