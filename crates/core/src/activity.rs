//! Long host work in progress (reading a checkpoint), so a front end can show how far a guest's
//! call has got while the guest waits on it.
//!
//! The work registers an [`Activity`] and advances it; whoever watches the run reads
//! [`Activities::current`]. Ranks of an SPMD run that load at the same time add up: the
//! watcher sees one figure for the whole run.

use std::sync::{Arc, Mutex, MutexGuard};

/// The activities under way on one runtime.
#[derive(Debug, Default)]
pub struct Activities {
    under_way: Mutex<Vec<Entry>>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    what: String,
    done: u64,
    total: u64,
}

/// What is under way, summed over every activity running now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityReport {
    /// What the first activity is doing (`loading model.safetensors`), and how many more run
    /// beside it when there are others.
    pub what: String,
    /// Bytes done, over all of them.
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
}

impl Activities {
    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        // An activity's counters stay meaningful even if a thread panicked holding the lock.
        self.under_way.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts an activity of `total` bytes described by `what`; it ends when the returned
    /// guard drops.
    pub fn begin(self: &Arc<Self>, what: impl Into<String>, total: u64) -> Activity {
        let mut entries = self.entries();
        let id = entries.iter().map(|e| e.id + 1).max().unwrap_or(0);
        entries.push(Entry {
            id,
            what: what.into(),
            done: 0,
            total,
        });
        Activity {
            activities: self.clone(),
            id,
        }
    }

    /// The work under way now, if any.
    pub fn current(&self) -> Option<ActivityReport> {
        let entries = self.entries();
        let first = entries.first()?;
        let what = match entries.len() {
            1 => first.what.clone(),
            n => format!("{} and {} more like it", first.what, n - 1),
        };
        Some(ActivityReport {
            what,
            done: entries.iter().map(|e| e.done).sum(),
            total: entries.iter().map(|e| e.total).sum(),
        })
    }
}

/// One activity under way; dropping it ends it.
#[derive(Debug)]
pub struct Activity {
    activities: Arc<Activities>,
    id: u64,
}

impl Activity {
    /// Records `bytes` more done.
    pub fn advance(&self, bytes: u64) {
        let mut entries = self.activities.entries();
        if let Some(e) = entries.iter_mut().find(|e| e.id == self.id) {
            e.done = (e.done + bytes).min(e.total);
        }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        self.activities.entries().retain(|e| e.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activities_add_up_and_end_when_dropped() {
        let activities = Arc::new(Activities::default());
        assert_eq!(activities.current(), None);
        let a = activities.begin("loading a.safetensors", 100);
        a.advance(30);
        let b = activities.begin("loading b.safetensors", 50);
        b.advance(80);
        assert_eq!(
            activities.current(),
            Some(ActivityReport {
                what: "loading a.safetensors and 1 more like it".into(),
                done: 80,
                total: 150,
            })
        );
        drop(a);
        let now = activities.current().expect("b is under way");
        assert_eq!(
            (now.what.as_str(), now.done, now.total),
            ("loading b.safetensors", 50, 50)
        );
        drop(b);
        assert_eq!(activities.current(), None);
    }
}
