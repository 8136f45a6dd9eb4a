//! What outlives a reload: state kept by a stable identity (a name, or a server's service and
//! address). Each compile starts from the previous compile's table, takes the entries whose
//! key is still there and makes the others, so counters, pools, health and in-flight counts
//! carry over while what the new file dropped goes away with the old snapshot.

use std::collections::HashMap;
use std::sync::Arc;

/// Shared state of type `T` by key.
pub struct Kept<T: ?Sized> {
    previous: HashMap<String, Arc<T>>,
    current: HashMap<String, Arc<T>>,
}

impl<T: ?Sized> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            previous: HashMap::new(),
            current: HashMap::new(),
        }
    }
}

impl<T: ?Sized> Kept<T> {
    /// Starts a compile that carries the entries of `previous` (the last compile's table).
    pub fn carrying(previous: Option<&Kept<T>>) -> Kept<T> {
        Kept {
            previous: previous.map(|p| p.current.clone()).unwrap_or_default(),
            current: HashMap::new(),
        }
    }

    /// The entry for `key`: the previous compile's, else a new one from `make`.
    pub fn get(&mut self, key: String, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let Ok(entry) = self.try_get::<std::convert::Infallible>(key, || Ok(make()));
        entry
    }

    /// `get` with a `make` that may fail (opening a folder, say).
    pub fn try_get<E>(
        &mut self,
        key: String,
        make: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<Arc<T>, E> {
        let entry = match self.previous.get(&key) {
            Some(kept) => kept.clone(),
            None => make()?,
        };
        Ok(self.current.entry(key).or_insert(entry).clone())
    }

    /// Forgets the previous compile's entries once the compile is done.
    pub fn finish(mut self) -> Kept<T> {
        self.previous = HashMap::new();
        self
    }
}
