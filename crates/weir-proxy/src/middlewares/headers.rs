//! `headers`: header edits on the request going upstream and on the answer going back (remove,
//! then set, then add).

use crate::http::codec::Head;
use weir_config::HeaderOps;

pub(super) fn apply(head: &mut Head, ops: &HeaderOps) {
    for name in &ops.remove {
        head.remove(name);
    }
    for (name, value) in &ops.set {
        head.set(name, value.as_bytes());
    }
    for (name, value) in &ops.add {
        head.append(name, value.as_bytes());
    }
}
