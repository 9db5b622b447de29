//! `rt.on(event, listener)`: keeper events delivered on the JavaScript thread.
//!
//! Each listener is a weak (unref'd) threadsafe function, so a listener never keeps the process
//! alive. The keeper calls them without blocking; `close()` drops them once the slot is
//! released (the `slot_released` event is already queued by then and is still delivered).

use crate::error::Res;
use crate::raw;
use cosid_core::lease::events::{FieldValue, EVENT_KINDS};
use cosid_core::Event;
use napi::bindgen_prelude::{Function, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{sys, Status};
use napi_derive::napi;
use std::sync::Mutex;

/// The names a listener can subscribe to: the core's event kinds, and `*` for every event.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    EVENT_KINDS.iter().map(|k| k.name).chain(["*"])
}

/// What a listener receives: the core's event vocabulary in camelCase, as every object of this
/// package names its fields (`next_floor_ms` is `nextFloorMs`, as `rt.stats()` has `floorMs`);
/// the same words as the C struct's members and Python's `Event` attributes. This declaration
/// gives `index.d.ts` its type (napi-rs writes each field in camelCase); the object itself is
/// built from the core's `Event::fields` ([`JsEvent`]) through the same camelCase conversion, so
/// its keys cannot differ from the core's. A field that does not belong to the event's kind is
/// absent.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)]
pub struct RuntimeEvent {
    /// The event's kind: `slot_acquired`, `slot_lost`, `duplicate_owner_key`, `clock_skew`,
    /// `renewal_failed`, `store_reset`, `acquire_failed`, `slot_released`, `window_ahead` or
    /// `store_unavailable`.
    #[napi(
        ts_type = "'slot_acquired' | 'slot_lost' | 'duplicate_owner_key' | 'clock_skew' | 'renewal_failed' | 'store_reset' | 'acquire_failed' | 'slot_released' | 'window_ahead' | 'store_unavailable'"
    )]
    pub kind: String,
    /// The whole event as one English line.
    pub message: String,
    /// The slot concerned (every kind but `clock_skew`, `acquire_failed` and
    /// `store_unavailable`).
    pub slot: Option<u32>,
    /// `slot_acquired`: the fence of the new ownership.
    pub fence: Option<f64>,
    /// `slot_acquired`, `window_ahead`: the window's lower bound (excluded), ms since the Unix
    /// epoch.
    pub floor_ms: Option<f64>,
    /// `slot_acquired`: the window's upper bound (included), ms since the Unix epoch.
    pub ceiling_ms: Option<f64>,
    /// `slot_released`: the floor the slot's next holder gets, ms since the Unix epoch.
    pub next_floor_ms: Option<f64>,
    /// `clock_skew`: this host's clock minus the store's, ms (positive: this host is ahead).
    pub skew_ms: Option<f64>,
    /// `renewal_failed`, `store_unavailable`: consecutive failures so far (1 the first time).
    pub attempt: Option<u32>,
    /// `slot_lost`: why the lease was lost; `window_ahead`: why the window opens later than now.
    pub reason: Option<String>,
    /// `renewal_failed`, `acquire_failed`, `store_unavailable`: the error.
    pub error: Option<String>,
    /// `duplicate_owner_key`: the owner key that two live runtimes hold.
    pub key: Option<String>,
    /// `store_unavailable`: how long the start has waited so far, ms.
    pub waited_ms: Option<f64>,
    /// `store_unavailable`: how long the start waits at most (`acquire-timeout`), ms.
    pub timeout_ms: Option<f64>,
}

/// An event as the JavaScript object a listener receives: `kind`, `message` and the event's
/// fields under the camelCase of the core's names (numbers as `number`: slots, fences and milliseconds since the
/// epoch are far below 2^53).
pub(crate) struct JsEvent(pub(crate) Event);

impl JsEvent {
    fn build(&self, env: sys::napi_env) -> Res<sys::napi_value> {
        let obj = raw::object(env)?;
        let text = |s: &str| raw::utf8_string(env, s);
        raw::set_named(env, obj, "kind", text(self.0.kind_name())?)?;
        raw::set_named(env, obj, "message", text(&self.0.to_string())?)?;
        for (name, value) in self.0.fields() {
            let v = match value {
                FieldValue::U32(n) => raw::number(env, n.into())?,
                FieldValue::U64(n) => raw::number(env, n as f64)?,
                FieldValue::I64(n) => raw::number(env, n as f64)?,
                FieldValue::Text(t) => text(t)?,
            };
            raw::set_named(env, obj, &crate::camel_case(name), v)?;
        }
        Ok(obj)
    }
}

impl ToNapiValue for JsEvent {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        val.build(env).map_err(|f| {
            napi::Error::new(
                Status::GenericFailure,
                format!("cosid: event object: {f:?}"),
            )
        })
    }
}

type Listener = ThreadsafeFunction<Event, (), JsEvent, Status, false, true>;
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

    /// Adds `listener` for `event` (a name from [`names`]). False once the runtime is closed.
    pub(crate) fn add(
        &self,
        event: &'static str,
        listener: Function<'_, JsEvent, ()>,
    ) -> napi::Result<bool> {
        let tsfn: Listener = listener
            .build_threadsafe_function::<Event>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(JsEvent(ctx.value)))?;
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
            if filter.is_none_or(|f| f == event.kind_name()) {
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
