//! `rt.on(event, listener)`: keeper events delivered on the JavaScript thread.
//!
//! Each listener is a weak (unref'd) threadsafe function, so a listener never keeps the process
//! alive. The keeper calls them without blocking; `close()` drops them once the slot is
//! released (the `slot_released` event is already queued by then and is still delivered).

use cosid_core::Event;
use napi::bindgen_prelude::Function;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use std::sync::Mutex;

/// The events a listener can subscribe to; `*` is every event.
pub(crate) const NAMES: [&str; 9] = [
    "slot_acquired",
    "slot_lost",
    "duplicate_owner_key",
    "clock_skew",
    "renewal_failed",
    "store_reset",
    "acquire_failed",
    "slot_released",
    "*",
];

/// What a listener receives. `type` names the event; the other fields are set for the events
/// that have them.
#[napi(object, object_from_js = false)]
pub struct RuntimeEvent {
    /// `slot_acquired`, `slot_lost`, `duplicate_owner_key`, `clock_skew`, `renewal_failed`,
    /// `store_reset`, `acquire_failed` or `slot_released`.
    #[napi(
        js_name = "type",
        ts_type = "'slot_acquired' | 'slot_lost' | 'duplicate_owner_key' | 'clock_skew' | 'renewal_failed' | 'store_reset' | 'acquire_failed' | 'slot_released'"
    )]
    pub kind: String,
    /// A readable one-line description.
    pub message: String,
    /// The slot concerned (all but `clock_skew` and `acquire_failed`).
    pub slot: Option<u32>,
    /// `slot_acquired`: the fence of this ownership.
    pub fence: Option<f64>,
    /// `slot_acquired`: the window's excluded lower bound, ms since the Unix epoch.
    pub floor: Option<f64>,
    /// `slot_acquired`: the window's included upper bound, ms since the Unix epoch.
    pub ceiling: Option<f64>,
    /// `slot_released`: the floor handed to the next holder, ms since the Unix epoch.
    pub next_floor: Option<f64>,
    /// `clock_skew`: local clock minus store clock, ms.
    pub skew_ms: Option<f64>,
    /// `renewal_failed`: consecutive failures so far.
    pub attempt: Option<u32>,
    /// `slot_lost`: why; `renewal_failed`, `acquire_failed`: the store's error.
    pub reason: Option<String>,
    /// `duplicate_owner_key`: the owner key held twice.
    pub key: Option<String>,
}

impl RuntimeEvent {
    fn from_core(e: &Event) -> Self {
        let mut out = RuntimeEvent {
            kind: e.name().to_string(),
            message: e.to_string(),
            slot: None,
            fence: None,
            floor: None,
            ceiling: None,
            next_floor: None,
            skew_ms: None,
            attempt: None,
            reason: None,
            key: None,
        };
        match e {
            Event::SlotAcquired {
                slot,
                fence,
                floor,
                ceiling,
            } => {
                out.slot = Some(*slot);
                out.fence = Some(*fence as f64);
                out.floor = Some(*floor as f64);
                out.ceiling = Some(*ceiling as f64);
            }
            Event::SlotLost { slot, reason } => {
                out.slot = Some(*slot);
                out.reason = Some(reason.clone());
            }
            Event::DuplicateOwnerKey { slot, key } => {
                out.slot = Some(*slot);
                out.key = Some(key.clone());
            }
            Event::ClockSkew { skew_ms } => out.skew_ms = Some(*skew_ms as f64),
            Event::RenewalFailed {
                slot,
                attempt,
                error,
            } => {
                out.slot = Some(*slot);
                out.attempt = Some(*attempt);
                out.reason = Some(error.clone());
            }
            Event::StoreReset { slot } => out.slot = Some(*slot),
            Event::AcquireFailed { error } => out.reason = Some(error.clone()),
            Event::SlotReleased { slot, next_floor } => {
                out.slot = Some(*slot);
                out.next_floor = Some(*next_floor as f64);
            }
            _ => {}
        }
        out
    }
}

type Listener = ThreadsafeFunction<Event, (), RuntimeEvent, Status, false, true>;
/// A listener and the one event it wants (`None`: every event).
type Subscription = (Option<&'static str>, Listener);

/// The listeners of one runtime.
#[derive(Default)]
pub(crate) struct Listeners {
    list: Mutex<Option<Vec<Subscription>>>,
}

impl Listeners {
    pub(crate) fn new() -> Self {
        Listeners {
            list: Mutex::new(Some(Vec::new())),
        }
    }

    /// Adds `listener` for `event` (a name from [`NAMES`]). False once the runtime is closed.
    pub(crate) fn add(
        &self,
        event: &'static str,
        listener: Function<'_, RuntimeEvent, ()>,
    ) -> napi::Result<bool> {
        let tsfn: Listener = listener
            .build_threadsafe_function::<Event>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(RuntimeEvent::from_core(&ctx.value)))?;
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        match list.as_mut() {
            Some(l) => {
                l.push(((event != "*").then_some(event), tsfn));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Called by the keeper (or the closing thread): queues the event for every listener.
    pub(crate) fn emit(&self, event: &Event) {
        let list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        for (filter, tsfn) in list.iter().flatten() {
            if filter.is_none_or(|f| f == event.name()) {
                let _ = tsfn.call(event.clone(), ThreadsafeFunctionCallMode::NonBlocking);
            }
        }
    }

    /// Drops every listener (queued events are still delivered); later `add`s are refused.
    pub(crate) fn close(&self) {
        let taken = self.list.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(taken);
    }
}
