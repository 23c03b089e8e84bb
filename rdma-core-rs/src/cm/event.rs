//! Event channels and events (`rdma_event_channel`, `rdma_cm_event`).

use super::objects::{ChannelShared, CmDevice, CmEvent, CmId, EventType, IdShared, PortSpace};
use super::{CmError, Result};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

impl EventType {
    /// `rdma_event_str`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            EventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            EventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            EventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            EventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            EventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            EventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            EventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            EventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            EventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            EventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            EventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            EventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CmEvent {
    /// `rdma_ack_cm_event`: nothing to release here beyond the value.
    pub fn ack(self) {}
}

impl ChannelShared {
    pub(crate) fn push(&self, e: CmEvent) {
        tracing::debug!(event = %e.event, status = e.status, "CM event");
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(e);
        if let Some(fd) = &self.fd {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one` to an eventfd we own.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        drop(q);
        self.ready.notify_all();
        // A reader may be driving one of the channel's devices in
        // `get_cm_event`: an event pushed by a call on another thread (as
        // rdma_resolve_route's) would otherwise wait out the wait's slice.
        for dev in self.devices() {
            dev.ctx.inner.wake_waiters();
        }
    }

    fn pop(&self) -> Option<CmEvent> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let e = q.pop_front();
        if let (Some(_), Some(fd)) = (&e, &self.fd) {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into `v`. The count is at least one (one
            // per queued event, under this lock), so it does not block.
            unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
        e
    }

    /// Removes and returns the queued events of `id`, in order: those
    /// about it, and the connection requests made to it as a listener.
    pub(crate) fn take_events_of(&self, id: &Arc<IdShared>) -> Vec<CmEvent> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let ours = |e: &CmEvent| match (&e.event, &e.listen_id) {
            (EventType::ConnectRequest, Some(l)) => Arc::ptr_eq(&l.shared, id),
            _ => Arc::ptr_eq(&e.id.shared, id),
        };
        let (taken, kept): (VecDeque<CmEvent>, VecDeque<CmEvent>) = q.drain(..).partition(ours);
        *q = kept;
        if let Some(fd) = &self.fd {
            for _ in 0..taken.len() {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into `v`; the count is at least the
                // queue's length (one per queued event, under this lock).
                unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            }
        }
        taken.into()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn is_empty(&self) -> bool {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    pub(crate) fn add_device(&self, dev: &Arc<CmDevice>) {
        let mut d = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        d.retain(|w| w.strong_count() > 0);
        if !d.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(dev))) {
            d.push(Arc::downgrade(dev));
        }
    }

    fn devices(&self) -> Vec<Arc<CmDevice>> {
        self.devices.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(Weak::upgrade).collect()
    }
}

/// An event channel (`rdma_event_channel`): where the events of the IDs
/// made on it arrive, in order. Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) shared: Arc<ChannelShared>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").finish_non_exhaustive()
    }
}

impl Default for EventChannel {
    fn default() -> EventChannel {
        EventChannel::new()
    }
}

/// How long one round of waiting drives one device before looking at the
/// channel's other devices.
const SLICE: Duration = Duration::from_millis(20);

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> EventChannel {
        EventChannel::make(None)
    }

    /// `rdma_create_event_channel` with its `fd`: a file descriptor that
    /// `poll`/`select`/`epoll` see readable while events wait (an eventfd
    /// counting them). The CM's service thread queues events while the
    /// application sleeps in `poll`, so the fd wakes it without any call
    /// into this library.
    pub fn with_fd() -> std::io::Result<EventChannel> {
        // SAFETY: plain syscall; the fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(EventChannel::make(Some(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    fn make(fd: Option<OwnedFd>) -> EventChannel {
        EventChannel {
            shared: Arc::new(ChannelShared {
                queue: Mutex::new(VecDeque::new()),
                fd,
                ready: Condvar::new(),
                devices: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The fd of a channel made with [`EventChannel::with_fd`].
    pub fn fd(&self) -> Option<RawFd> {
        self.shared.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// `rdma_create_id` on this channel.
    pub fn create_id(&self, ps: PortSpace) -> CmId {
        CmId::new(self.shared.clone(), ps)
    }

    /// `rdma_get_cm_event`: the next event, waiting up to `timeout`
    /// (`None`: as long as it takes). While it waits it drives the devices
    /// of the channel's IDs, so the CM answers peers meanwhile.
    pub fn get_cm_event(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        let start = Instant::now();
        let mut turn = 0usize;
        loop {
            if let Some(e) = self.shared.pop() {
                return Ok(e);
            }
            let left = match timeout {
                Some(t) => match t.checked_sub(start.elapsed()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return Err(CmError::Timeout(t)),
                },
                None => SLICE,
            };
            let slice = left.min(SLICE);
            let devs = self.shared.devices();
            if devs.is_empty() {
                let q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                if q.is_empty() {
                    let _ = self.shared.ready.wait_timeout(q, slice);
                }
                continue;
            }
            turn = turn.wrapping_add(1);
            let dev = &devs[turn % devs.len()];
            dev.wait(slice, || !self.shared.is_empty())?;
        }
    }

    /// The async variant of [`EventChannel::get_cm_event`] for tokio
    /// applications: the wait runs on tokio's blocking pool.
    #[cfg(feature = "tokio")]
    pub async fn get_cm_event_async(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        let ch = self.clone();
        match tokio::task::spawn_blocking(move || ch.get_cm_event(timeout)).await {
            Ok(r) => r,
            Err(e) => Err(CmError::Cm { call: "get_cm_event_async", detail: e.to_string() }),
        }
    }
}
