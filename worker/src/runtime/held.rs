//! The tasks this worker holds leases on, with the signals that stop their tools.

use std::collections::HashMap;
use std::sync::Mutex;

use taskgate_shared::task::TaskId;
use tokio_util::sync::CancellationToken;

/// One held task.
#[derive(Debug, Clone)]
pub(crate) struct HeldTask {
    pub(crate) fence: u64,
    /// A cancel was requested for the task.
    pub(crate) cancel: CancellationToken,
    /// This worker's lease is gone: stop at once and write nothing.
    pub(crate) lost: CancellationToken,
    /// The run is over and its outcome is being written: a renewal refused from now on means
    /// the write (finish, park, release) ended the lease, not that it was lost.
    pub(crate) ending: CancellationToken,
}

#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<HashMap<TaskId, HeldTask>>);

impl Held {
    pub(crate) fn insert(&self, id: TaskId, fence: u64) -> HeldTask {
        let task = HeldTask {
            fence,
            cancel: CancellationToken::new(),
            lost: CancellationToken::new(),
            ending: CancellationToken::new(),
        };
        if let Ok(mut map) = self.0.lock() {
            map.insert(id, task.clone());
        }
        task
    }

    pub(crate) fn remove(&self, id: &TaskId) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(id);
        }
    }

    pub(crate) fn get(&self, id: &TaskId) -> Option<HeldTask> {
        self.0.lock().ok()?.get(id).cloned()
    }

    pub(crate) fn snapshot(&self) -> Vec<(TaskId, HeldTask)> {
        self.0.lock().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }
}
