//! Shared end-to-end harness: starts the real `weir` binary on port 0 with a config file,
//! runs in-process upstreams (hyper) and nginx, and speaks HTTP/1.1 over raw sockets.
// Each test crate uses a part of this module: the rest is neither dead nor an unused import there.
#![allow(dead_code, unused_imports)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod auth;
mod certs;
mod client;
mod etcd;
mod grpc;
mod load;
mod lua;
mod nginx;
mod pebble;
mod redis;
mod tools;
mod upstream;
mod weir;

pub use auth::*;
pub use certs::*;
pub use client::*;
pub use etcd::*;
pub use grpc::*;
pub use load::*;
pub use lua::*;
pub use nginx::*;
pub use pebble::*;
pub use redis::*;
pub use tools::*;
pub use upstream::*;
pub use weir::*;
