//! Completion queues (`ibv_cq`) and completion channels (`ibv_comp_channel`).

use crate::completions::ChannelState;
use crate::context::Context;
use crate::error::Result;
use rdma_transport::{CqId, WorkCompletion};
use std::time::Duration;

/// A completion queue.
#[derive(Debug, Clone)]
pub struct CompletionQueue {
    pub(crate) ctx: Context,
    pub(crate) id: CqId,
    channel: Option<usize>,
}

impl Context {
    /// `ibv_create_cq` with room for `depth` completions, reporting to
    /// `channel` when armed with [`CompletionQueue::req_notify`].
    pub fn create_cq(&self, depth: usize, channel: Option<&CompChannel>) -> Result<CompletionQueue> {
        if let Some(ch) = channel {
            if !std::sync::Arc::ptr_eq(&ch.ctx.inner, &self.inner) {
                return Err(crate::Error::WrongDevice("the completion channel"));
            }
        }
        let id = self.inner.create_cq(depth);
        Ok(CompletionQueue { ctx: self.clone(), id, channel: channel.map(|c| c.index) })
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let mut hub = self.inner.hub();
        hub.channels.push(ChannelState::default());
        Ok(CompChannel { ctx: self.clone(), index: hub.channels.len() - 1 })
    }
}

impl CompletionQueue {
    /// A number naming this CQ, as [`CompChannel::get_cq_event`] returns it.
    pub fn id(&self) -> usize {
        self.id.0
    }

    /// How many completions it holds (what it was made or last resized with).
    pub fn depth(&self) -> usize {
        self.ctx.inner.hub().cqs.depth(self.id)
    }

    /// `ibv_resize_cq`: room for `depth` completions from now on. Refused
    /// (an error, the CQ unchanged) when more than `at_least` completions
    /// wait in it: pass the size the application asked for, before any
    /// rounding up, as rxe compares that one with the count.
    pub fn resize(&self, depth: usize, at_least: usize) -> Result<()> {
        // Counted with what the engines hold and have not moved yet.
        let inner = &self.ctx.inner;
        let mut engines = inner.lock_all();
        for st in engines.iter_mut() {
            inner.announce_completions(st);
        }
        let resized = inner.hub().cqs.resize(self.id, depth, at_least);
        Ok(resized?)
    }

    /// `ibv_poll_cq`: makes progress, then appends up to `max` completions
    /// to `out`, oldest first, without blocking. Returns how many. (On a
    /// device of several engines their threads make the progress, and a
    /// poll takes; one that finds the CQ empty also makes a round on each
    /// engine with QPs on the CQ that no thread holds.) An error of the
    /// socket layer in a round comes back, as a device's fatal error.
    ///
    /// A poll that the CQ's queued completions satisfy (it holds at least
    /// `max`) takes them without a round of progress, up to
    /// [`SATISFIED_POLLS`](crate::SATISFIED_POLLS) polls in a row
    /// (of any CQ of the device): it would return the same completions
    /// after one, and a round costs a receive system call. A UD send's
    /// completion is queued by its post, and a round often queues several
    /// completions that a caller polling one at a time (libfabric's verbs
    /// provider) takes one by one.
    ///
    /// Such a caller ends with a poll that finds the CQ empty. Right after
    /// a poll that emptied it from the queue, that one answers "empty"
    /// without a round too (once; the next poll makes the round): it ends
    /// a drain of what was queued, and its receive call would sit between
    /// the two sends of `ofi_rxd`'s critical path (its ACK, the send
    /// completion taken, the empty poll, the application's reply). A
    /// packet that came in the meantime is taken one poll later.
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        let inner = &self.ctx.inner;
        if inner.engines() > 1 {
            // The engines' threads make progress and move completions
            // here. A busy poll that finds none makes the rounds itself
            // rather than wait for a thread to wake for each packet.
            let n = inner.hub().cqs.take(self.id, max, out);
            if n > 0 || max == 0 || !inner.progress_engines_of(self.id)? {
                return Ok(n);
            }
            return Ok(inner.hub().cqs.take(self.id, max, out));
        }
        let mut st = inner.lock();
        let mut was_empty = false;
        if max > 0 && st.polls_without_progress < crate::SATISFIED_POLLS {
            let mut hub = inner.hub();
            let queued = hub.cqs.len(self.id);
            if queued >= max {
                st.polls_without_progress += 1;
                let n = hub.cqs.take(self.id, max, out);
                st.drained_without_progress = (queued == n).then_some(self.id);
                return Ok(n);
            }
            if queued == 0 && st.drained_without_progress.take() == Some(self.id) {
                st.polls_without_progress += 1;
                return Ok(0);
            }
            was_empty = queued == 0;
        }
        inner.progress_locked(&mut st)?;
        if was_empty && !st.completions_moved() {
            // Only this engine adds to the CQ, under the lock held since it
            // was found empty: still empty (a busy poll's usual answer,
            // without a second look at the CQs).
            return Ok(0);
        }
        Ok(inner.hub().cqs.take(self.id, max, out))
    }

    /// Blocks until at least one completion is there or `timeout` passes
    /// (`None`: as long as it takes), then takes up to `max` like
    /// [`CompletionQueue::poll`]. Sleeps on the socket, never spins (beyond
    /// the device's `spin` setting).
    pub fn wait(&self, out: &mut Vec<WorkCompletion>, max: usize, timeout: Option<Duration>) -> Result<usize> {
        let inner = &self.ctx.inner;
        let got = inner.wait_until(timeout, |_| {
            let n = inner.hub().cqs.take(self.id, max, out);
            (n > 0).then_some(n)
        })?;
        Ok(got.unwrap_or(0))
    }

    /// `ibv_req_notify_cq`: the next completion added to this CQ raises one
    /// event on its channel; completions it holds already raise none, nor
    /// do other CQs' (libibverbs' rule, which perftest's `-e` loops count
    /// on: one event per completion). With `solicited_only` only a
    /// receive whose sender set the solicited-event bit, or a completion in
    /// error, raises it (IBTA 11.4.2.2, as rxe).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let Some(ch) = self.channel else {
            return Err(crate::Error::InvalidArgument(format!(
                "CQ {} was created without a completion channel",
                self.id.0
            )));
        };
        self.ctx.inner.hub().arm(self.id, ch, solicited_only);
        Ok(())
    }

    /// Waits, without blocking the thread, until a completion is there
    /// (tokio). Progress is made in this task; the task sleeps on the
    /// device's socket and timers in between.
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        use std::os::fd::{FromRawFd, OwnedFd};
        use tokio::io::unix::AsyncFd;
        let inner = &self.ctx.inner;
        let fd = {
            let st = inner.lock();
            // SAFETY: dup of our socket; the AsyncFd owns the copy.
            let d = unsafe { libc::dup(st.io.rx_fd()) };
            if d < 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            unsafe { OwnedFd::from_raw_fd(d) }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(crate::Error::InvalidArgument("wait_async needs a tokio runtime with I/O enabled".into()));
        }
        // SAFETY: `fd` is owned by the AsyncFd and stays open as long as it.
        let afd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        loop {
            let notified = inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let sleep = {
                let mut st = inner.lock();
                inner.progress_locked(&mut st)?;
                let n = inner.hub().cqs.take(self.id, max, out);
                if n > 0 {
                    return Ok(n);
                }
                if st.io.has_pending() {
                    Duration::ZERO
                } else {
                    st.ep.poll_timeout().map(|t| t.saturating_since(inner.now())).unwrap_or(Duration::from_millis(100))
                }
            };
            tokio::select! {
                r = afd.readable() => { r?.clear_ready(); }
                _ = &mut notified => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

/// A completion channel: where armed CQs report that they have completions.
#[derive(Debug, Clone)]
pub struct CompChannel {
    ctx: Context,
    index: usize,
}

impl CompChannel {
    /// `ibv_get_cq_event`: waits up to `timeout` for an armed CQ to get a
    /// completion and returns its [`CompletionQueue::id`]. Re-arm with
    /// `req_notify` before polling, as with libibverbs.
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Option<usize>> {
        let inner = &self.ctx.inner;
        let got = inner.wait_until(timeout, |_| inner.hub().channels[self.index].events.pop_front())?;
        Ok(got.map(|cq| cq.0))
    }

    /// Adds 1 to the eventfd `fd` with every event of this channel, from
    /// whichever thread makes the progress that raises it, so that a caller
    /// can sleep on a file descriptor (`poll`, `epoll`, a blocking read)
    /// and take the event with `get_cq_event(Some(Duration::ZERO))` when it
    /// is readable. `None` stops it. The caller keeps `fd` open meanwhile.
    pub fn set_notify_fd(&self, fd: Option<std::os::fd::RawFd>) {
        self.ctx.inner.hub().channels[self.index].notify = fd;
    }

    /// `ibv_ack_cq_events`: nothing to release here, kept for familiarity.
    pub fn ack_cq_events(&self, _cq: &CompletionQueue, _n: u32) {}
}
