//! deadlines
