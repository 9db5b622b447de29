//! # cosid for Node.js
//!
//! A napi-rs addon over `cosid-core`: `await Runtime.create(config)`, then `rt.next()` returns
//! a unique 64-bit id as a `bigint`. The binding holds no logic of its own: every id, lease and
//! shutdown decision is the core's.
//!
//! Contracts:
//! - Nothing that touches the store runs on the event loop: creating a runtime (store I/O,
//!   acquiring a slot), closing it (releasing the slot) and the `...Async` methods run on their
//!   own threads and return promises.
//! - The synchronous id methods never wait on the store (see `ops`): they issue at once or throw
//!   an `Error` whose `code` says why (`COSID_ERR_WINDOW_CLOSED`, ...).
//! - A `Runtime` can be used from any number of worker threads' runtimes at once, each with its
//!   own slot; ids of one generator are unique across every process of the namespace and
//!   strictly increase per generator within one binding.
//! - Nothing keeps the process alive once `close()` resolved: listeners are weak, the keeper
//!   thread is joined.

#![deny(clippy::all)]

mod config;
mod error;
mod events;
mod methods;
mod offload;
mod ops;
mod raw;
mod text;

// The exported functions of `text`, at the crate's root like `toBase62`: napi-rs registers them
// in the addon's build, and a test build (which registers nothing) sees them used through this.
pub use text::{format_id, parse_id};

use crate::error::{coded, throwing, type_error, Res};
use crate::events::{JsEvent, Listeners};
use crate::ops::GenCtx;
use crate::raw::{type_name, type_of, Raw};
use cosid_core::ErrorKind;
use napi::bindgen_prelude::{FromNapiValue, Function, JavaScriptClassExt, Object, Unknown};
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

thread_local! {
    /// The runtimes made on this JavaScript thread (one per main thread or worker thread) and
    /// not yet collected: `_closeAtExit` closes the ones still open when that thread exits.
    static LIVE: RefCell<Vec<Weak<cosid_core::Runtime>>> = const { RefCell::new(Vec::new()) };
}

/// Closes, synchronously, every runtime of this JavaScript thread still open, releasing each
/// slot with its exact last timestamp. Called by `index.js` on the `exit` event of `process`
/// (a normal end, `process.exit()`, a signal whose handler calls `process.exit()`); nothing
/// else may block the event loop like this. Errors cannot be reported at exit and are dropped.
#[napi(js_name = "_closeAtExit", skip_typescript)]
pub fn close_at_exit() {
    let live: Vec<Arc<cosid_core::Runtime>> = LIVE.with(|l| {
        l.borrow_mut()
            .drain(..)
            .filter_map(|w| w.upgrade())
            .collect()
    });
    for rt in live {
        if !rt.is_closed() {
            let _ = rt.close();
        }
    }
}

/// An id taken apart by `parse(id)`.
#[napi(object, object_from_js = false)]
pub struct IdInfo {
    /// The id.
    pub id: u64,
    /// The start of the id's time unit, ms since the Unix epoch.
    pub timestamp: f64,
    /// `timestamp` as RFC 3339 in UTC with milliseconds, e.g. `2026-05-01T12:00:00.000Z`.
    pub time: String,
    /// The slot that issued it.
    pub slot: u32,
    /// Its sequence number within the time unit.
    pub sequence: u32,
}

// This declaration gives `index.d.ts` its type (napi-rs writes each field in camelCase); the
// object itself is built from the core's `Stats::fields` ([`stats_object`]), so its keys cannot
// differ from the core's table (`cosid_core::lease::stats::STATS_FIELDS`).
/// The counters and current window of a runtime (`rt.stats()`): cosid's stats fields in
/// camelCase, the same words as the C API's `cosid_stats` members and Python's `Stats`
/// attributes (`ids_issued` is `idsIssued`, `floor_ms` is `floorMs`).
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)]
pub struct Stats {
    /// Ids issued by all generators (exact after close).
    pub ids_issued: f64,
    /// Calls that had to wait (next tick, floor, ceiling).
    pub waits: f64,
    /// Successful renewals.
    pub renewals: f64,
    /// Failed renewals (store errors).
    pub renewal_failures: f64,
    /// Slots acquired (1 at start, +1 per rebinding).
    pub acquisitions: f64,
    /// Leases lost.
    pub slots_lost: f64,
    /// Clock-skew events raised.
    pub clock_skew_events: f64,
    /// The bound slot; `null` while none is bound (before the first acquisition, after a loss,
    /// after `close()`), as Python's `Stats.slot` is `None`.
    #[napi(ts_type = "number | null")]
    pub slot: u32,
    /// Whether a slot is bound now.
    pub bound: bool,
    /// The current window's lower bound (excluded), ms since the Unix epoch.
    pub floor_ms: f64,
    /// The current window's upper bound (included), ms since the Unix epoch.
    pub ceiling_ms: f64,
}

/// A core stats field's name in camelCase: `ids_issued` → `idsIssued`, `floor_ms` → `floorMs`.
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// `rt.stats()` as a JavaScript object: each of the core's fields under its camelCase name
/// (numbers as `number`: counts and milliseconds since the epoch are far below 2^53); `slot` is
/// `null` while no slot is bound, as in Python.
fn stats_object(env: sys::napi_env, stats: &cosid_core::Stats) -> Res<sys::napi_value> {
    use cosid_core::lease::stats::StatsValue;
    let obj = raw::object(env)?;
    for (name, value) in stats.fields() {
        let v = match value {
            StatsValue::U32(_) if name == "slot" && !stats.bound => raw::null(env)?,
            StatsValue::U32(n) => raw::number(env, n.into())?,
            StatsValue::U64(n) => raw::number(env, n as f64)?,
            StatsValue::I64(n) => raw::number(env, n as f64)?,
            StatsValue::Bool(b) => raw::boolean(env, b)?,
        };
        raw::set_named(env, obj, &camel_case(name), v)?;
    }
    Ok(obj)
}

/// The bit layout of a runtime's ids (`rt.layout`).
#[napi(object, object_from_js = false)]
pub struct IdLayout {
    /// The epoch, ms since the Unix epoch.
    pub epoch_ms: f64,
    /// The time unit: `ms` or `s`.
    pub unit: String,
    /// Bits of the timestamp field.
    pub timestamp_bits: u32,
    /// Bits of the slot (node) field.
    pub node_bits: u32,
    /// Bits of the sequence field.
    pub sequence_bits: u32,
}

/// A running id source: a slot (leased from the store, or static), its keeper, and its
/// generators. Make one with `await Runtime.create(config)`; end it with `await rt.close()`.
///
/// Ids of one generator are unique across every process and thread of the namespace, and
/// strictly increase within one binding of the slot. `next()` and the other synchronous methods
/// never wait on the store; the `...Async` methods wait off the event loop. Each worker thread
/// creates its own runtime (each holds its own slot).
#[napi]
pub struct Runtime {
    /// `None` only while being dropped. The `Arc` is this object's alone: `LIVE` holds it
    /// weakly, so a collected runtime is not kept alive for the exit hook.
    core: Option<Arc<cosid_core::Runtime>>,
    ctx: Arc<GenCtx>,
    listeners: Arc<Listeners>,
}

impl Runtime {
    fn core(&self) -> &cosid_core::Runtime {
        self.core.as_deref().expect("present until drop")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Collected without close(): release the slot, but not on the JavaScript thread.
        self.listeners.close();
        if let Some(rt) = self.core.take() {
            if !rt.is_closed() {
                let _ = std::thread::Builder::new()
                    .name("cosid-drop".into())
                    .spawn(move || drop(rt));
            }
        }
    }
}

fn make_runtime(
    env: sys::napi_env,
    rt: cosid_core::Runtime,
    listeners: Arc<Listeners>,
) -> Res<sys::napi_value> {
    let ctx = GenCtx::new(rt.default_generator().clone());
    let rt = Arc::new(rt);
    LIVE.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|w| w.strong_count() > 0);
        l.push(Arc::downgrade(&rt));
    });
    let js = Runtime {
        core: Some(rt),
        ctx: ctx.clone(),
        listeners,
    };
    let obj = js.into_instance(&Env::from_raw(env))?.value;
    methods::install_methods(env, obj, &ctx)?;
    Ok(obj)
}

fn make_generator(env: sys::napi_env, gen: Arc<cosid_core::Generator>) -> Res<sys::napi_value> {
    let ctx = GenCtx::new(gen);
    let js = Generator { ctx: ctx.clone() };
    let obj = js.into_instance(&Env::from_raw(env))?.value;
    methods::install_methods(env, obj, &ctx)?;
    Ok(obj)
}

fn closed() -> error::Failure {
    coded(ErrorKind::Closed, "the runtime is closed")
}

#[napi]
impl Runtime {
    /// Creates a runtime: reads the configuration, opens the store and acquires a slot, off the
    /// event loop. `config` is a YAML or JSON document, a path to a configuration file, or an
    /// object of the same shape (`{ cosid: { namespace: 'orders', machine: { lease: { store:
    /// 'sqlite:///var/lib/cosid/slots.db' } } } }`); none is the embedded default
    /// (`$XDG_STATE_HOME/cosid/slots.db`). Rejects with `COSID_ERR_CONFIG`, `COSID_ERR_STORE`,
    /// `COSID_ERR_EXHAUSTED`, `COSID_ERR_NAMESPACE_MISMATCH`, ... or a `TypeError`.
    ///
    /// `options.onEvent`: a listener of every keeper event from the start, the first
    /// `slot_acquired` included (`rt.on` comes too late for that one), as `rt.on('*', listener)`
    /// would call it.
    #[napi(
        ts_args_type = "config?: string | Record<string, unknown> | null, options?: CreateOptions",
        ts_return_type = "Promise<Runtime>"
    )]
    pub fn create(
        env: Env,
        config: Option<Unknown>,
        options: Option<Unknown>,
    ) -> napi::Result<Raw> {
        let env = env.raw();
        let source = match config {
            None => Ok(config::Source::Default),
            Some(v) => config::read(env, v.raw()),
        };
        let listeners = Arc::new(Listeners::new());
        let source = source.and_then(|source| {
            if let Some(listener) = create_options(env, options)? {
                listeners.add("*", listener)?;
            }
            Ok(source)
        });
        let r = match source {
            Err(f) => raw::rejected(env, f),
            Ok(source) => {
                let emitter = listeners.clone();
                offload::promise(
                    env,
                    "create",
                    move || {
                        let config = source.into_config()?;
                        Ok(cosid_core::Runtime::builder()
                            .config(config)
                            .on_event(move |e| emitter.emit(e))
                            .build()?)
                    },
                    move |env, rt| make_runtime(env, rt, listeners),
                )
            }
        };
        throwing(env, r.map(Raw))
    }

    /// The generator called `name` (created on first use), sharing this runtime's slot. Each
    /// name is its own id space. `''` is the default generator. Keep the returned object: each
    /// call makes a new one (for the same generator).
    #[napi(ts_args_type = "name: string", ts_return_type = "Generator")]
    pub fn generator(&self, env: Env, name: Unknown) -> napi::Result<Raw> {
        let env = env.raw();
        let r = (|| {
            let name = raw::string_arg(env, name.raw(), "generator(name): name")?;
            let gen = self.core().generator(&name)?;
            make_generator(env, gen)
        })();
        throwing(env, r.map(Raw))
    }

    /// The runtime's counters and current window.
    #[napi(ts_return_type = "Stats")]
    pub fn stats(&self, env: Env) -> napi::Result<Raw> {
        let env = env.raw();
        let r = stats_object(env, &self.core().stats());
        throwing(env, r.map(Raw))
    }

    /// The bit layout of the ids.
    #[napi(getter)]
    pub fn layout(&self) -> IdLayout {
        let l = self.core().layout();
        IdLayout {
            epoch_ms: l.epoch_ms() as f64,
            unit: l.unit().name().to_string(),
            timestamp_bits: l.timestamp_bits() as u32,
            node_bits: l.node_bits() as u32,
            sequence_bits: l.sequence_bits() as u32,
        }
    }

    /// The namespace of the runtime's slot.
    #[napi(getter)]
    pub fn namespace(&self) -> String {
        self.core().config().namespace.clone()
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.core().is_closed()
    }

    /// Calls `listener` on the JavaScript thread for every keeper event named `event` (`'*'`:
    /// every event). Listeners do not keep the process alive and are dropped by `close()`.
    #[napi(
        ts_args_type = "event: 'slot_acquired' | 'slot_lost' | 'duplicate_owner_key' | 'clock_skew' | 'renewal_failed' | 'store_reset' | 'acquire_failed' | 'slot_released' | 'window_ahead' | 'store_unavailable' | '*', listener: (event: RuntimeEvent) => void"
    )]
    pub fn on(&self, env: Env, event: Unknown, listener: Unknown) -> napi::Result<&Self> {
        let raw_env = env.raw();
        let r = (|| {
            let name = raw::string_arg(raw_env, event.raw(), "on(event, listener): event")?;
            let Some(name) = events::names().find(|n| *n == name) else {
                return Err(type_error(format!(
                    "on(event, listener): unknown event '{}'; events are {}",
                    name.escape_debug(),
                    events::names().collect::<Vec<_>>().join(", ")
                )));
            };
            let t = type_of(raw_env, listener.raw())?;
            if t != sys::ValueType::napi_function {
                return Err(type_error(format!(
                    "on(event, listener): listener must be a function, got {}",
                    type_name(t)
                )));
            }
            // SAFETY: `listener` is a function value (checked above) of this env, on its thread.
            let f = unsafe { Function::<JsEvent, ()>::from_napi_value(raw_env, listener.raw())? };
            if self.core().is_closed() || !self.listeners.add(name, f)? {
                return Err(closed());
            }
            Ok(())
        })();
        throwing(raw_env, r).map(|()| self)
    }

    /// Ordered shutdown, off the event loop: the generators stop (later calls throw
    /// `COSID_ERR_CLOSED`), the keeper stops, the slot is released with the exact last
    /// timestamp. A second call rejects with `COSID_ERR_CLOSED`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self, env: Env) -> napi::Result<Raw> {
        let rt: cosid_core::Runtime = self.core().clone();
        let listeners = self.listeners.clone();
        let r = offload::promise(
            env.raw(),
            "close",
            move || {
                let r = rt.close();
                listeners.close();
                Ok(r?)
            },
            |env, ()| raw::undefined(env),
        );
        throwing(env.raw(), r.map(Raw))
    }
}

/// The options of `Runtime.create(config, options)`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)]
pub struct CreateOptions {
    /// Called on the JavaScript thread for every keeper event, from the first `slot_acquired`
    /// on (as `rt.on('*', listener)` is for later ones). Never keeps the process alive.
    #[napi(ts_type = "(event: RuntimeEvent) => void")]
    pub on_event: Option<String>,
}

/// The option names of `Runtime.create`, as [`CreateOptions`] declares them.
const CREATE_OPTIONS: &[&str] = &["onEvent"];

/// Reads the `options` argument of `Runtime.create`: the `onEvent` listener, if any.
fn create_options<'a>(
    env: sys::napi_env,
    options: Option<Unknown<'a>>,
) -> Res<Option<Function<'a, JsEvent, ()>>> {
    const WHAT: &str = "Runtime.create(config, options)";
    let Some(options) = options else {
        return Ok(None);
    };
    let t = type_of(env, options.raw())?;
    match t {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => return Ok(None),
        sys::ValueType::napi_object if !raw::is_array(env, options.raw())? => {}
        _ => {
            return Err(type_error(format!(
                "{WHAT}: options must be an object like {{ onEvent: (event) => {{}} }}, got {}",
                // The type only: a string here may be a store URL with its password.
                if t == sys::ValueType::napi_object {
                    "an array"
                } else {
                    type_name(t)
                }
            )));
        }
    }
    let mut listener = None;
    for (name, value) in raw::own_properties(env, options.raw())? {
        if !CREATE_OPTIONS.contains(&name.as_str()) {
            return Err(type_error(format!(
                "{WHAT}: unknown option '{}'; the options are {}",
                cosid_core::bounds::quote(&name),
                CREATE_OPTIONS.join(", ")
            )));
        }
        let t = type_of(env, value)?;
        match t {
            sys::ValueType::napi_undefined => {}
            // SAFETY: `value` is a function value (checked) of this env, on its thread.
            sys::ValueType::napi_function => {
                listener = Some(unsafe { Function::<JsEvent, ()>::from_napi_value(env, value)? })
            }
            _ => {
                return Err(type_error(format!(
                    "{WHAT}: options.onEvent must be a function (event) => {{}}, got {}",
                    type_name(t)
                )))
            }
        }
    }
    Ok(listener)
}

/// A named generator of a runtime (`rt.generator(name)`): its own id space on the runtime's
/// slot, with the same id methods as the runtime.
#[napi]
pub struct Generator {
    ctx: Arc<GenCtx>,
}

#[napi]
impl Generator {
    /// The generator's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.ctx.gen.name().to_string()
    }
}

/// The fixed-width base-62 text of an id: 11 characters of `0-9A-Za-z`, ordered like the ids.
#[napi(ts_args_type = "id: bigint", ts_return_type = "string")]
pub fn to_base62(env: Env, id: Unknown) -> napi::Result<Raw> {
    let env = env.raw();
    let r = ops::read_id(env, id.raw(), "toBase62(id)").and_then(|id| ops::base62(env, id));
    throwing(env, r.map(Raw))
}

/// Parses fixed-width base-62 text (exactly 11 characters of `0-9A-Za-z`) into an id.
#[napi(ts_args_type = "text: string", ts_return_type = "bigint")]
pub fn from_base62(env: Env, text: Unknown) -> napi::Result<Raw> {
    let env = env.raw();
    let r = (|| {
        let s = raw::string_arg(env, text.raw(), "fromBase62(text): text")?;
        raw::bigint(env, cosid_core::convert::parse_base62(&s)?)
    })();
    throwing(env, r.map(Raw))
}

/// The module's own setup: with the `bench-hooks` feature (benchmarks only), the hidden
/// `__bench` export.
#[napi(module_exports)]
pub fn init(env: Env, exports: Object) -> napi::Result<()> {
    #[cfg(feature = "bench-hooks")]
    methods::bench::export(env.raw(), exports.raw())
        .map_err(|f| napi::Error::new(napi::Status::GenericFailure, format!("{f:?}")))?;
    let _ = (env, exports);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::camel_case;
    use cosid_core::lease::stats::STATS_FIELDS;

    #[test]
    fn stats_keys_are_the_camel_case_of_the_core_names() {
        let keys: Vec<_> = STATS_FIELDS.iter().map(|f| camel_case(f.name)).collect();
        assert_eq!(
            keys,
            [
                "idsIssued",
                "waits",
                "renewals",
                "renewalFailures",
                "acquisitions",
                "slotsLost",
                "clockSkewEvents",
                "slot",
                "bound",
                "floorMs",
                "ceilingMs"
            ]
        );
    }
}
