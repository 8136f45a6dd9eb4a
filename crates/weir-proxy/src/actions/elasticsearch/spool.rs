//! The write spool of an Elasticsearch service (`elasticsearch.spool`): a durable queue of
//! `_bulk` requests the cluster could not take. A worker hands a request to the spool's writer
//! thread and answers its client only once the writer reports it on disk; the writes that
//! arrive meanwhile are synced together (`fsync: batch`). The control thread replays the queue
//! in order (`replay.rs`) and commits each request once the cluster has answered for every
//! item of it.
//!
//! On disk, in the spool's folder:
//! - `SEQ.seg` segment files, named by the sequence number of their first record, each a run of
//!   records: `WSPL`, the sequence number (u64), the payload's length (u32) and a CRC-32 of
//!   sequence number and payload (u32), all little-endian, then the payload: a JSON line with
//!   the request's target, then its NDJSON body. A record torn by a crash (it was never
//!   acknowledged) fails its check and is cut off at the next start.
//! - `done`: the sequence number of the last request applied (written whole, then renamed).
//! - `dead-letter.ndjson`: items the cluster refused for good on replay, each with its reason.
//! - `replay.json`: the oldest request's replay state when it has conditional items: the pins
//!   of its updates, its items settled, and whether a try is in doubt (`pins.rs`).
//! - `lock`: held (`flock`) by the one weir process that owns the spool. Another (a `weir
//!   check`, or the new process of a binary upgrade while the old one drains) leaves the files
//!   alone; the control thread takes the spool over once the lock is free.

use crate::io::watch::{Clock, ConnWatch, Waiting};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8; 4] = b"WSPL";
const HEADER: usize = 20;
/// A segment takes no new record once it is this large.
const SEGMENT_MAX: u64 = 64 << 20;

/// One service's spool, shared by the workers and the control thread, kept across reloads.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_size: u64,
    fsync: bool,
    state: Mutex<State>,
    /// Requests waiting, readable without the lock (a worker checks it on every bulk).
    depth: AtomicUsize,
    /// Bytes waiting (records and headers).
    bytes: AtomicU64,
    /// Requests appended, applied by replay, and items dead-lettered, since this process
    /// opened the spool (for `/metrics`).
    pub appended: AtomicU64,
    pub replayed: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// The writer thread's inbox, started on first use.
    writer: OnceLock<Mutex<Sender<Append>>>,
    /// A replay is under way (the control thread runs one at a time).
    pub replaying: AtomicBool,
    /// The replay's last try failed (the cluster is still away): a new bulk joins the queue
    /// at once, instead of waiting for the queue to empty.
    failing: AtomicBool,
    /// Woken when the queue empties or a replay try fails.
    changed: tokio::sync::Notify,
    /// The `lock` file, once this process holds it (and has read what waits).
    owner: Mutex<Option<File>>,
}

#[derive(Debug, Default)]
struct State {
    waiting: VecDeque<Record>,
    /// The last request applied.
    done: u64,
    next_seq: u64,
    /// The segment the writer appends to (its first sequence number), never removed.
    current: Option<u64>,
    /// Every segment file, by first sequence number, oldest first.
    segments: Vec<u64>,
}

/// Where one waiting request is.
#[derive(Debug, Clone)]
pub struct Record {
    pub seq: u64,
    segment: u64,
    /// Of the payload, in the segment file.
    offset: u64,
    len: u32,
    /// When it was spooled (Unix milliseconds).
    pub at_ms: u64,
}

/// A request read back from the spool.
pub struct Spooled {
    pub target: String,
    pub body: Vec<u8>,
}

struct Append {
    payload: Vec<u8>,
    answer: tokio::sync::oneshot::Sender<Result<u64, String>>,
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(payload);
    crc.finalize()
}

impl Spool {
    /// The spool in `dir` (made if missing), taken over at once when no other process holds it.
    pub fn open(dir: &Path, max_size: u64, fsync: bool) -> Result<Spool, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("spool {}: cannot make the folder: {e}", dir.display()))?;
        let spool = Spool {
            dir: dir.to_path_buf(),
            max_size,
            fsync,
            depth: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            changed: tokio::sync::Notify::new(),
            state: Mutex::new(State::default()),
            writer: OnceLock::new(),
            replaying: AtomicBool::new(false),
            owner: Mutex::new(None),
        };
        spool.take_over()?;
        Ok(spool)
    }

    /// Whether this process owns the spool: takes its lock if it is free, then reads what
    /// waits. `Ok(false)` while another process holds it.
    pub fn take_over(&self) -> Result<bool, String> {
        let mut owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if owner.is_some() {
            return Ok(true);
        }
        let fail =
            |what: &str, e: std::io::Error| format!("spool {}: {what}: {e}", self.dir.display());
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("lock"))
            .map_err(|e| fail("cannot open `lock`", e))?;
        use rustix::fs::{flock, FlockOperation};
        if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(false);
        }
        self.recover()?;
        *owner = Some(lock);
        Ok(true)
    }

    /// Reads what waits: cuts off a torn last record, removes segments already applied.
    fn recover(&self) -> Result<(), String> {
        let dir = &self.dir;
        let fail = |what: &str, e: std::io::Error| format!("spool {}: {what}: {e}", dir.display());
        let done = match std::fs::read_to_string(dir.join("done")) {
            Ok(text) => text.trim().parse().unwrap_or(0),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(fail("cannot read `done`", e)),
        };
        let mut segments: Vec<u64> = std::fs::read_dir(dir)
            .map_err(|e| fail("cannot list the folder", e))?
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".seg")?.parse().ok()
            })
            .collect();
        segments.sort_unstable();
        let mut waiting = VecDeque::new();
        let mut last_seq = done;
        let mut bytes = 0;
        let last_segment = segments.last().copied();
        for &first in &segments {
            let path = segment_path(dir, first);
            let (records, good_len, file_len) =
                scan(&path).map_err(|e| fail(&format!("cannot read {}", path.display()), e))?;
            if good_len < file_len {
                if Some(first) == last_segment {
                    crate::log_warn!(
                        "spool {}: a torn record at the end of {} (never acknowledged) was cut off",
                        dir.display(),
                        path.display()
                    );
                    let file = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| fail("cannot cut a torn record", e))?;
                    file.set_len(good_len)
                        .and_then(|()| file.sync_all())
                        .map_err(|e| fail("cannot cut a torn record", e))?;
                } else {
                    crate::log_error!(
                        "spool {}: {} is damaged after byte {good_len}; the records after it are skipped",
                        dir.display(),
                        path.display()
                    );
                }
            }
            for record in records {
                last_seq = last_seq.max(record.seq);
                if record.seq > done {
                    bytes += HEADER as u64 + record.len as u64;
                    waiting.push_back(record);
                }
            }
        }
        if !waiting.is_empty() {
            crate::log_info!(
                "spool {}: {} request(s) wait to be replayed",
                dir.display(),
                waiting.len()
            );
        }
        let mut state = self.lock();
        self.depth.store(waiting.len(), Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        *state = State {
            waiting,
            done,
            next_seq: last_seq + 1,
            current: None,
            segments,
        };
        self.remove_applied_segments(&mut state);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests waiting.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The oldest request waiting.
    pub fn front(&self) -> Option<Record> {
        self.lock().waiting.front().cloned()
    }

    /// Records how the replay's last try went: applied, or failed (waiters then hear it).
    pub fn replay_went(&self, applied: bool) {
        let was_failing = self.failing.swap(!applied, Ordering::AcqRel);
        if !applied && !was_failing {
            self.changed.notify_waiters();
        }
    }

    /// Waits, at most `limit` (under the client's `watch`), for the queue to empty: true once
    /// it is empty. False at once while the replay's last try failed (the cluster is still
    /// away), or when `limit` passes first. While the replay has not tried yet, or is applying
    /// the queue, a bulk waits rather than joins the queue, so a steady load after a short
    /// failure goes back to the cluster instead of queueing for good.
    pub async fn caught_up(&self, watch: &ConnWatch, clock: &Clock, limit: Duration) -> bool {
        let deadline = clock.now() + limit;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the checks, so a wake between them is not missed.
            notified.as_mut().enable();
            if self.depth() == 0 {
                return true;
            }
            let left = deadline.saturating_duration_since(clock.now());
            if self.failing.load(Ordering::Acquire) || left.is_zero() {
                return false;
            }
            if watch
                .within(clock, Waiting::ResponseHead, left, notified)
                .await
                .is_err()
            {
                return self.depth() == 0;
            }
        }
    }

    /// How long the oldest request has waited, in seconds (0 when none waits).
    pub fn lag_secs(&self) -> f64 {
        self.front()
            .map(|r| unix_ms().saturating_sub(r.at_ms) as f64 / 1000.0)
            .unwrap_or(0.0)
    }

    /// Appends a request (its target and NDJSON body); its sequence number once it is on
    /// disk (synced, with `fsync: batch`).
    pub async fn append(self: &Arc<Self>, target: &str, body: &[u8]) -> Result<u64, String> {
        if !self.take_over()? {
            return Err(format!(
                "the spool {} is held by another weir process",
                self.dir.display()
            ));
        }
        let head = serde_json::json!({ "target": target, "at": unix_ms() }).to_string();
        let mut payload = Vec::with_capacity(head.len() + 1 + body.len());
        payload.extend_from_slice(head.as_bytes());
        payload.push(b'\n');
        payload.extend_from_slice(body);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let sent = self
            .writer()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Append { payload, answer });
        if sent.is_err() {
            return Err("the spool's writer has stopped".into());
        }
        answered
            .await
            .unwrap_or_else(|_| Err("the spool's writer has stopped".into()))
    }

    fn writer(self: &Arc<Self>) -> &Mutex<Sender<Append>> {
        self.writer.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            // Weak: the thread ends once the spool is dropped (its inbox closes with it).
            let spool = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("weir-spool".into())
                .spawn(move || Spool::write_loop(&spool, rx));
            if let Err(e) = started {
                crate::log_error!("spool {}: cannot start its writer: {e}", self.dir.display());
            }
            Mutex::new(tx)
        })
    }

    /// The writer thread: takes every append waiting, writes them, syncs once, answers each.
    fn write_loop(spool: &Weak<Spool>, inbox: Receiver<Append>) {
        let mut file: Option<(u64, File, u64)> = None;
        while let Ok(first) = inbox.recv() {
            let mut batch = vec![first];
            batch.extend(inbox.try_iter());
            let answers = match spool.upgrade() {
                Some(this) => this.write_batch(&mut file, batch),
                None => return,
            };
            // Answered once the spool is let go: a test (or a reload) that drops it after its
            // answer finds it dropped.
            for (answer, result) in answers {
                let _ = answer.send(result);
            }
        }
    }

    /// Writes a batch of appends, syncs once, and publishes them: each one's answer.
    #[allow(clippy::type_complexity)]
    fn write_batch(
        &self,
        file: &mut Option<(u64, File, u64)>,
        batch: Vec<Append>,
    ) -> Vec<(
        tokio::sync::oneshot::Sender<Result<u64, String>>,
        Result<u64, String>,
    )> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut written = Vec::with_capacity(batch.len());
        let mut failure = None;
        let mut waiting_bytes = self.bytes();
        let mut seq = self.lock().next_seq;
        for append in batch {
            let size = (HEADER + append.payload.len()) as u64;
            if waiting_bytes + size > self.max_size {
                let full = format!(
                    "the spool is full ({waiting_bytes} bytes waiting, max_size {})",
                    self.max_size
                );
                answers.push((append.answer, Err(full)));
                continue;
            }
            match self.write_record(file, seq, &append.payload) {
                Ok(record) => {
                    waiting_bytes += size;
                    seq += 1;
                    written.push((record, append.answer));
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    answers.push((append.answer, Err(format!("spool write failed: {e}"))));
                }
            }
        }
        if let (true, Some((_, segment, _))) = (self.fsync, file.as_ref()) {
            if let Err(e) = segment.sync_data() {
                failure = Some(e.to_string());
            }
        }
        let mut state = self.lock();
        // The numbers written stay taken, whatever happens: a record may be on disk.
        state.next_seq = seq;
        if let Some(e) = failure {
            crate::log_error!("spool {}: {e}", self.dir.display());
            // Written but maybe not durable: never acknowledged, and not replayed from memory
            // either (the next start reads what the disk really holds).
            for (_, answer) in written {
                answers.push((answer, Err(format!("spool sync failed: {e}"))));
            }
            *file = None;
            state.current = None;
            return answers;
        }
        state.current = file.as_ref().map(|(first, _, _)| *first);
        for (record, answer) in written {
            self.bytes
                .fetch_add(HEADER as u64 + record.len as u64, Ordering::Relaxed);
            let seq = record.seq;
            state.waiting.push_back(record);
            answers.push((answer, Ok(seq)));
            self.appended.fetch_add(1, Ordering::Relaxed);
        }
        self.depth.store(state.waiting.len(), Ordering::Relaxed);
        answers
    }

    /// Writes one record to the open segment, or a new one when there is none or it is full.
    fn write_record(
        &self,
        file: &mut Option<(u64, File, u64)>,
        seq: u64,
        payload: &[u8],
    ) -> std::io::Result<Record> {
        if file.as_ref().is_none_or(|(_, _, len)| *len >= SEGMENT_MAX) {
            let path = segment_path(&self.dir, seq);
            let segment = OpenOptions::new().create(true).append(true).open(&path)?;
            let len = segment.metadata()?.len();
            if self.fsync {
                File::open(&self.dir)?.sync_all()?;
            }
            self.lock().segments.push(seq);
            *file = Some((seq, segment, len));
        }
        let Some((first, segment, len)) = file.as_mut() else {
            return Err(std::io::Error::other("no segment open"));
        };
        let mut record = Vec::with_capacity(HEADER + payload.len());
        record.extend_from_slice(MAGIC);
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&checksum(seq, payload).to_le_bytes());
        record.extend_from_slice(payload);
        segment.write_all(&record)?;
        let offset = *len + HEADER as u64;
        *len += record.len() as u64;
        Ok(Record {
            seq,
            segment: *first,
            offset,
            len: payload.len() as u32,
            at_ms: unix_ms(),
        })
    }

    /// Reads a waiting request back (a blocking read).
    pub fn read(&self, record: &Record) -> std::io::Result<Spooled> {
        let mut file = File::open(segment_path(&self.dir, record.segment))?;
        file.seek(SeekFrom::Start(record.offset))?;
        let mut payload = vec![0; record.len as usize];
        file.read_exact(&mut payload)?;
        let split = payload
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| std::io::Error::other("a record without its head line"))?;
        let head: serde_json::Value = serde_json::from_slice(&payload[..split])
            .map_err(|e| std::io::Error::other(format!("a record's head: {e}")))?;
        let target = head["target"].as_str().unwrap_or("/_bulk").to_string();
        payload.drain(..=split);
        Ok(Spooled {
            target,
            body: payload,
        })
    }

    /// Marks the oldest request applied (a blocking write): `done` moves to it, and segments
    /// wholly applied are removed.
    pub fn commit(&self, seq: u64) -> std::io::Result<()> {
        write_durably(&self.dir, "done", seq.to_string().as_bytes())?;
        let mut state = self.lock();
        state.done = seq;
        while state.waiting.front().is_some_and(|r| r.seq <= seq) {
            if let Some(record) = state.waiting.pop_front() {
                self.bytes
                    .fetch_sub(HEADER as u64 + record.len as u64, Ordering::Relaxed);
                self.replayed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.depth.store(state.waiting.len(), Ordering::Relaxed);
        self.remove_applied_segments(&mut state);
        if state.waiting.is_empty() {
            self.changed.notify_waiters();
        }
        Ok(())
    }

    /// Removes the segments whose every record is applied, but never the writer's.
    fn remove_applied_segments(&self, state: &mut State) {
        let oldest_waiting = state.waiting.front().map(|r| r.segment);
        let current = state.current;
        let dir = &self.dir;
        state.segments.retain(|&first| {
            let applied = oldest_waiting.is_none_or(|oldest| first < oldest);
            if applied && Some(first) != current && first <= state.done {
                let _ = std::fs::remove_file(segment_path(dir, first));
                return false;
            }
            true
        });
    }

    /// Appends lines to `dead-letter.ndjson` and syncs it (a blocking write).
    pub fn dead_letter(&self, lines: &[String]) -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dead-letter.ndjson"))?;
        let mut text = String::new();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        self.dead_lettered
            .fetch_add(lines.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Writes `dir/name` whole or not at all (a blocking write): a temporary file, synced, renamed
/// over it, and the folder synced.
pub(super) fn write_durably(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<()> {
    let temporary = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// The records of one segment file, the length up to the last good one, and the file's length.
fn scan(path: &Path) -> std::io::Result<(Vec<Record>, u64, u64)> {
    let data = std::fs::read(path)?;
    let first: u64 = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut records = Vec::new();
    let mut at = 0usize;
    while at + HEADER <= data.len() {
        let header = &data[at..at + HEADER];
        let seq = u64::from_le_bytes(header[4..12].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(header[16..20].try_into().unwrap_or_default());
        let end = at + HEADER + len as usize;
        if &header[..4] != MAGIC || end > data.len() {
            break;
        }
        let payload = &data[at + HEADER..end];
        if checksum(seq, payload) != crc {
            break;
        }
        let at_ms = payload
            .iter()
            .position(|&b| b == b'\n')
            .and_then(|split| serde_json::from_slice::<serde_json::Value>(&payload[..split]).ok())
            .and_then(|head| head["at"].as_u64())
            .unwrap_or(0);
        records.push(Record {
            seq,
            segment: first,
            offset: (at + HEADER) as u64,
            len,
            at_ms,
        });
        at = end;
    }
    Ok((records, at as u64, data.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-spool-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn appended_requests_wait_across_a_restart_until_committed() {
        let dir = folder("restart");
        let spool = Arc::new(Spool::open(&dir, 1 << 20, true).unwrap());
        let rt = runtime();
        let one = rt.block_on(spool.append("/a/_bulk?refresh=true", b"{\"index\":{}}\n{}\n"));
        let two = rt.block_on(spool.append("/_bulk", b"{\"delete\":{\"_id\":\"1\"}}\n"));
        assert_eq!((one, two), (Ok(1), Ok(2)));
        assert_eq!(spool.depth(), 2);
        drop(spool);
        // Reopened, as after kill -9: both wait, in order, bodies whole.
        let spool = Arc::new(Spool::open(&dir, 1 << 20, true).unwrap());
        assert_eq!(spool.depth(), 2);
        let first = spool.front().unwrap();
        let read = spool.read(&first).unwrap();
        assert_eq!(read.target, "/a/_bulk?refresh=true");
        assert_eq!(read.body, b"{\"index\":{}}\n{}\n");
        spool.commit(first.seq).unwrap();
        assert_eq!(spool.depth(), 1);
        // Only one owner at a time: a second open waits for the first to let go.
        let second = Spool::open(&dir, 1 << 20, true).unwrap();
        assert_eq!((second.take_over(), second.depth()), (Ok(false), 0));
        drop(spool);
        assert_eq!(second.take_over(), Ok(true));
        drop(second);
        let spool = Arc::new(Spool::open(&dir, 1 << 20, true).unwrap());
        assert_eq!(spool.front().unwrap().seq, 2);
        // New appends go on from the last number.
        assert_eq!(rt.block_on(spool.append("/_bulk", b"x\n")), Ok(3));
        spool.commit(3).unwrap();
        assert_eq!(spool.depth(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_torn_record_is_cut_off_and_a_full_spool_refuses() {
        let dir = folder("torn");
        let spool = Arc::new(Spool::open(&dir, 200, true).unwrap());
        let rt = runtime();
        assert_eq!(rt.block_on(spool.append("/_bulk", b"one\n")), Ok(1));
        let refused = rt.block_on(spool.append("/_bulk", &[b'x'; 300]));
        assert!(refused.unwrap_err().contains("the spool is full"));
        drop(spool);
        // Half a record, as a crash mid-write leaves it.
        let segment = segment_path(&dir, 1);
        let mut file = OpenOptions::new().append(true).open(&segment).unwrap();
        file.write_all(b"WSPL\x02\x00\x00\x00\x00\x00\x00\x00\x40\x00")
            .unwrap();
        drop(file);
        let spool = Spool::open(&dir, 200, true).unwrap();
        assert_eq!(spool.depth(), 1);
        let (records, good, len) = scan(&segment).unwrap();
        assert_eq!((records.len(), good), (1, len));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
