//! Open streams by id: the ids in a compact array of their own beside the streams' states, so
//! finding a frame's stream reads a few cache lines of ids rather than every stream's state.
//! A connection carries up to its stream limit (100 by default), and a multiplexed upstream
//! connection looks a stream up for every DATA frame.

use std::ops::{Index, IndexMut};

/// Items by stream id, in no particular order (removal swaps the last item in).
#[derive(Debug)]
pub struct StreamTable<T> {
    ids: Vec<u32>,
    items: Vec<T>,
}

impl<T> Default for StreamTable<T> {
    fn default() -> Self {
        StreamTable {
            ids: Vec::new(),
            items: Vec::new(),
        }
    }
}

impl<T> StreamTable<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where stream `id`'s item is.
    pub fn position(&self, id: u32) -> Option<usize> {
        self.ids.iter().position(|&known| known == id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let i = self.position(id)?;
        Some(&mut self.items[i])
    }

    pub fn push(&mut self, id: u32, item: T) {
        self.ids.push(id);
        self.items.push(item);
    }

    /// Removes the item at `i`; the last one takes its place.
    pub fn swap_remove(&mut self, i: usize) -> T {
        self.ids.swap_remove(i);
        self.items.swap_remove(i)
    }

    pub fn clear(&mut self) {
        self.ids.clear();
        self.items.clear();
    }

    /// Gives the memory back (an idle connection keeps no room for streams).
    pub fn release(&mut self) {
        self.ids = Vec::new();
        self.items = Vec::new();
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The bytes held for streams (both arrays' capacity).
    pub fn allocated_bytes(&self) -> usize {
        self.ids.capacity() * std::mem::size_of::<u32>()
            + self.items.capacity() * std::mem::size_of::<T>()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }
}

impl<T> Index<usize> for StreamTable<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.items[i]
    }
}

impl<T> IndexMut<usize> for StreamTable<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.items[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_items_by_id_across_removals() {
        let mut table = StreamTable::new();
        for id in [1u32, 3, 5, 7] {
            table.push(id, id * 10);
        }
        assert_eq!(table.position(5), Some(2));
        assert_eq!(table.swap_remove(0), 10);
        // 7 took 1's place, and the ids moved with their items.
        assert_eq!(table.position(7), Some(0));
        assert_eq!(table.get_mut(3).copied(), Some(30));
        assert_eq!(table.position(1), None);
        *table.get_mut(5).unwrap() += 1;
        assert_eq!(table[table.position(5).unwrap()], 51);
        assert_eq!(table.len(), 3);
        table.clear();
        assert!(table.is_empty() && table.position(7).is_none());
    }
}
