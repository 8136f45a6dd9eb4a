//! retries
