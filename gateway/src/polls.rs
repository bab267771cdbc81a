//! Pacing of early `tasks/get` polls, for `--poll-limit hold` (the default).
//!
//! A poll is *early* when it comes sooner than `tolerance × pollIntervalMs` after the same
//! principal's previous poll of the same task. Refusing it (429) fails every client that does
//! not retry, and most do not. Holding it instead turns a tight polling loop into a cheap long
//! poll: the request is answered at the first of
//! - the task changing (the event hub's wake-up, as for listen streams), or
//! - the poll interval since that previous poll elapsing,
//!
//! with the state read at that moment. On one replica that costs one Redis read per interval
//! per task however fast the client loops, because this replica remembers when it last
//! answered each (principal, task) and holds a repeat without asking Redis. Across replicas
//! the fleet-wide marker the `poll_task` script keeps (refused there as "too soon") says the
//! same, and the poll is held for the rest of the interval. No poll is held longer than
//! [`MAX_HOLD`] in all, whatever the interval.
//!
//! A task that changed since its last answer is never held: the event hub, which hears every
//! change, makes the pacer forget the task, so the next poll reads at once. A change heard
//! while a poll of the task is still reading Redis keeps that poll's answer from being
//! remembered (its read may predate the change), so the next poll reads too.
//!
//! Held requests are bounded per principal and per replica; beyond the bound a poll is refused
//! as with `--poll-limit refuse`.
//!
//! Early `events/poll`s are paced here too (docs/events.md, 2.6), keyed by the owner digest in
//! place of a task id and by the subscription (name and arguments) in place of the principal:
//! the event hub tells the pacer of every change by its owner word as well as its task id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use taskgate_shared::task::TaskId;
use tokio::time::Instant;

/// Remembered answers beyond which expired ones are dropped (and, if that is not enough, all:
/// a forgotten entry only sends the next poll to Redis).
const MAX_REMEMBERED: usize = 100_000;

/// Names remembered under one key (a task's pollers, or an owner's `events/poll`
/// subscriptions) at most.
const MAX_PER_KEY: usize = 16;

/// The longest a poll is ever held, whatever a tool's `pollIntervalMs`: below the idle
/// timeouts of common proxies and client libraries (often 30–60 s).
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(20);

/// When this replica last answered a principal's poll of a task, and its interval.
#[derive(Debug, Clone, Copy)]
struct Answered {
    at: Instant,
    interval: Duration,
}

/// Per-replica pacing state.
#[derive(Debug)]
pub(crate) struct PollPacer {
    answers: Mutex<Answers>,
    held: Mutex<Held>,
    max_held: usize,
    max_held_per_principal: usize,
}

#[derive(Debug, Default)]
struct Answers {
    /// By task id, then by principal.
    answered: HashMap<String, HashMap<String, Answered>>,
    /// Tasks with polls reading Redis now: how many, and how many changes were heard.
    reading: HashMap<String, Reading>,
}

#[derive(Debug, Default)]
struct Reading {
    readers: usize,
    changes: u64,
}

/// A poll's read of a task in flight; [`PollPacer::answered`] takes it back.
pub(crate) struct ReadTicket {
    pacer: Arc<PollPacer>,
    task: String,
    changes_at_start: u64,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    per_principal: HashMap<String, usize>,
}

/// One held poll; dropping it frees its place.
pub(crate) struct HeldSlot {
    pacer: Arc<PollPacer>,
    principal: String,
}

impl PollPacer {
    pub(crate) fn new(max_held: usize, max_held_per_principal: usize) -> Self {
        Self { answers: Mutex::default(), held: Mutex::default(), max_held, max_held_per_principal }
    }

    /// When this replica answered `principal`'s last poll of `task` less than `tolerance` of
    /// its interval ago: until when to hold the next one (the whole interval since).
    pub(crate) fn early(&self, principal: &str, task: &TaskId, tolerance: f64) -> Option<Instant> {
        self.early_for(principal, task.as_str(), tolerance)
    }

    /// [`early`](Self::early) for any key that [`changed`](Self::changed) is told of: a task
    /// id, or an owner digest (`events/poll`, where `principal` names the subscription).
    pub(crate) fn early_for(&self, principal: &str, task: &str, tolerance: f64) -> Option<Instant> {
        let answered = *lock(&self.answers).answered.get(task)?.get(principal)?;
        let now = Instant::now();
        (now < answered.at + answered.interval.mul_f64(tolerance)).then_some(answered.at + answered.interval)
    }

    /// A poll is about to read `task` from Redis.
    pub(crate) fn reading(self: &Arc<Self>, task: &TaskId) -> ReadTicket {
        self.reading_for(task.as_str())
    }

    /// [`reading`](Self::reading) for any key, as [`early_for`](Self::early_for).
    pub(crate) fn reading_for(self: &Arc<Self>, task: &str) -> ReadTicket {
        let mut answers = lock(&self.answers);
        let reading = answers.reading.entry(task.to_owned()).or_default();
        reading.readers += 1;
        ReadTicket { pacer: self.clone(), task: task.to_owned(), changes_at_start: reading.changes }
    }

    /// A poll by `principal` was answered now from the read `ticket` stands for. Not
    /// remembered if the task changed while that read was in flight.
    pub(crate) fn answered(&self, principal: &str, ticket: ReadTicket, interval: Duration) {
        let now = Instant::now();
        let interval = interval.min(MAX_HOLD);
        let mut answers = lock(&self.answers);
        let unchanged = answers.reading.get(&ticket.task).is_some_and(|r| r.changes == ticket.changes_at_start);
        if !unchanged {
            return;
        }
        let answered = &mut answers.answered;
        if answered.len() >= MAX_REMEMBERED {
            answered.retain(|_, by| {
                by.retain(|_, a| a.at + a.interval > now);
                !by.is_empty()
            });
            // Still full of live entries: drop a tenth, so the scan does not repeat on every
            // insert (a forgotten entry only sends that task's next poll to Redis).
            if answered.len() >= MAX_REMEMBERED {
                let drop: Vec<String> = answered.keys().take(MAX_REMEMBERED / 10).cloned().collect();
                for task in drop {
                    answered.remove(&task);
                }
            }
        }
        let by = answered.entry(ticket.task.clone()).or_default();
        if by.len() >= MAX_PER_KEY {
            // One key's names are the principals polling a task (one, in practice) or an owner's
            // `events/poll` subscriptions: bounded, so that a caller varying its arguments
            // cannot grow them. Expired first, then all (only costs reads).
            by.retain(|_, a| a.at + a.interval > now);
            if by.len() >= MAX_PER_KEY {
                by.clear();
            }
        }
        by.insert(principal.to_owned(), Answered { at: now, interval });
    }

    /// [`answered`](Self::answered), dropping first what was remembered for this key under
    /// names starting with `family` (an `events/poll` subscription's earlier cursors): one
    /// entry per subscription, whatever the cursors.
    pub(crate) fn answered_replacing(&self, principal: &str, family: &str, ticket: ReadTicket, interval: Duration) {
        if let Some(by) = lock(&self.answers).answered.get_mut(&ticket.task) {
            by.retain(|name, _| !name.starts_with(family));
        }
        self.answered(principal, ticket, interval);
    }

    /// The task changed: its next poll, by anyone, is read at once.
    pub(crate) fn changed(&self, task: &str) {
        let mut answers = lock(&self.answers);
        answers.answered.remove(task);
        if let Some(reading) = answers.reading.get_mut(task) {
            reading.changes += 1;
        }
    }

    /// Changes may have been missed (the event subscription was re-established).
    pub(crate) fn forget_all(&self) {
        let mut answers = lock(&self.answers);
        answers.answered.clear();
        for reading in answers.reading.values_mut() {
            reading.changes += 1;
        }
    }

    /// A place for one more held poll of `principal`, unless the bounds are reached.
    pub(crate) fn hold(self: &Arc<Self>, principal: &str) -> Option<HeldSlot> {
        let mut held = lock(&self.held);
        let mine = held.per_principal.get(principal).copied().unwrap_or(0);
        if held.total >= self.max_held || mine >= self.max_held_per_principal {
            return None;
        }
        held.total += 1;
        held.per_principal.insert(principal.to_owned(), mine + 1);
        Some(HeldSlot { pacer: self.clone(), principal: principal.to_owned() })
    }

    /// Polls held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        lock(&self.held).total
    }
}

impl Drop for ReadTicket {
    fn drop(&mut self) {
        let mut answers = lock(&self.pacer.answers);
        if let Some(reading) = answers.reading.get_mut(&self.task) {
            reading.readers -= 1;
            if reading.readers == 0 {
                answers.reading.remove(&self.task);
            }
        }
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        let mut held = lock(&self.pacer.held);
        held.total -= 1;
        if let Some(mine) = held.per_principal.get_mut(&self.principal) {
            *mine -= 1;
            if *mine == 0 {
                held.per_principal.remove(&self.principal);
            }
        }
    }
}

/// No code that can panic runs under these locks.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect("the poll pacer's lock is never poisoned")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `principal`'s poll of `task` as a read started and finished now would.
    fn answer(pacer: &Arc<PollPacer>, principal: &str, task: &TaskId, interval: Duration) {
        let ticket = pacer.reading(task);
        pacer.answered(principal, ticket, interval);
    }

    #[test]
    fn a_change_during_the_read_is_not_slept_through() {
        let pacer = Arc::new(PollPacer::new(10, 10));
        let task = TaskId::generate(1);
        let ticket = pacer.reading(&task);
        pacer.changed(task.as_str());
        pacer.answered("p", ticket, Duration::from_secs(10));
        assert_eq!(pacer.early("p", &task, 0.5), None, "the answer may predate the change");
        answer(&pacer, "p", &task, Duration::from_secs(10));
        assert!(pacer.early("p", &task, 0.5).is_some(), "a read after the change is remembered");
        assert!(lock(&pacer.answers).reading.is_empty(), "tickets are given back");
    }

    #[test]
    fn an_owners_event_polls_keep_one_entry_per_subscription_and_forget_on_a_change() {
        let pacer = Arc::new(PollPacer::new(10, 10));
        let owner = "0123456789abcdef0123456789abcdef";
        for cursor in ["c1.a", "c1.b", "c1.c"] {
            let ticket = pacer.reading_for(owner);
            pacer.answered_replacing(&format!("events\nx\n{cursor}"), "events\nx\n", ticket, Duration::from_secs(10));
        }
        let ticket = pacer.reading_for(owner);
        pacer.answered_replacing("events\ny\nc1.a", "events\ny\n", ticket, Duration::from_secs(10));
        assert_eq!(lock(&pacer.answers).answered[owner].len(), 2, "the last cursor of each subscription");
        assert!(pacer.early_for("events\nx\nc1.c", owner, 0.5).is_some(), "from the cursor last returned");
        assert_eq!(pacer.early_for("events\nx\nc1.a", owner, 0.5), None, "an older cursor reads at once");
        pacer.changed(owner);
        assert_eq!(pacer.early_for("events\nx\nc1.c", owner, 0.5), None, "a change of the owner's tasks");
    }

    #[test]
    fn one_owners_subscriptions_are_bounded_however_many_it_sends() {
        let pacer = Arc::new(PollPacer::new(10, 10));
        let owner = "0123456789abcdef0123456789abcdef";
        for family in 0..1_000 {
            let ticket = pacer.reading_for(owner);
            let family = format!("events:{family}:");
            pacer.answered_replacing(&format!("{family}c1.a"), &family, ticket, Duration::from_secs(10));
        }
        let remembered = lock(&pacer.answers).answered[owner].len();
        assert!((1..=MAX_PER_KEY).contains(&remembered), "{remembered} remembered for one owner");
        assert!(pacer.early_for("events:999:c1.a", owner, 0.5).is_some(), "the latest is kept");
    }

    #[test]
    fn a_repeat_within_the_tolerance_is_held_to_the_end_of_the_interval() {
        let pacer = Arc::new(PollPacer::new(10, 10));
        let task = TaskId::generate(1);
        assert_eq!(pacer.early("p", &task, 0.5), None, "nothing answered yet");
        let before = Instant::now();
        answer(&pacer, "p", &task, Duration::from_secs(10));
        let until = pacer.early("p", &task, 0.5).expect("early");
        assert!(until >= before + Duration::from_secs(10) && until <= Instant::now() + Duration::from_secs(10));
        // However long a tool's interval, a poll is never held past the cap.
        answer(&pacer, "p", &task, Duration::from_secs(3_600));
        assert!(pacer.early("p", &task, 0.5).expect("early") <= Instant::now() + MAX_HOLD);
        assert_eq!(pacer.early("q", &task, 0.5), None, "per principal");
        pacer.changed(task.as_str());
        assert_eq!(pacer.early("p", &task, 0.5), None, "changed since: read at once");
        answer(&pacer, "p", &task, Duration::ZERO);
        assert_eq!(pacer.early("p", &task, 0.5), None, "past the tolerance: not early");
    }

    #[test]
    fn held_polls_are_bounded_per_principal_and_in_all() {
        let pacer = Arc::new(PollPacer::new(3, 2));
        let a1 = pacer.hold("a").expect("first");
        let _a2 = pacer.hold("a").expect("second");
        assert!(pacer.hold("a").is_none(), "per principal");
        let _b1 = pacer.hold("b").expect("another principal");
        assert!(pacer.hold("c").is_none(), "per replica");
        drop(a1);
        let _c = pacer.hold("c").expect("a freed place");
        assert_eq!(pacer.held(), 3);
    }
}
