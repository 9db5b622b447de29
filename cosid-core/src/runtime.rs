//! The `Runtime`: one slot (leased or static), one keeper thread, any number of named
//! generators sharing the slot's window.
//!
//! Shutdown is ordered (spec): every generator closes and reports its exact last timestamp,
//! then the slot is released with the largest of them, then the store is dropped. `close()` does
//! it explicitly; dropping the last handle does it too.
//!
//! Fork (see `crate::fork` for the rule): the slot, the keeper, its thread and its store
//! connections belong to one process, the `Process` part of the runtime. A forked child never
//! uses or drops the parent's: under `cosid.fork: new-slot` the first use in the child builds a
//! `Process` of its own (a new incarnation on a new slot, from the same configuration) and
//! rebinds the window to it; under `fail`, or where the store cannot be shared with a child,
//! every call fails with `Forked`. The parent's `Process` is left in the child's memory as it
//! was, never closed, joined or freed.

use crate::clock::{SharedClock, SystemClock};
use crate::config::{Config, ForkPolicy, LeaseConfig, Machine};
use crate::error::{Error, ErrorKind, Result};
use crate::generator::{AfterFork, Generator, TryNext};
use crate::layout::Layout;
use crate::lease::events::{Counters, EventBus};
use crate::lease::{
    Event, EventListener, KeeperConfig, LeaseClient, LeaseKeeper, Owner, SlotLease, Stats, Terms,
};
use crate::static_slot::StaticSlot;
use crate::store::SharedStore;
use crate::window::Window;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
enum Keeper {
    // Boxed: a lease keeper is much larger than a static slot, and there is one per runtime.
    Lease(Box<LeaseKeeper>),
    Static(StaticSlot),
}

impl Keeper {
    fn tick(&self) -> Duration {
        match self {
            Keeper::Lease(k) => k.tick(),
            Keeper::Static(s) => s.tick(),
        }
    }

    fn release(&self, last_issued: Option<i64>) -> Result<()> {
        match self {
            Keeper::Lease(k) => k.release(last_issued),
            Keeper::Static(s) => s.release(last_issued),
        }
    }
}

#[derive(Debug, Default)]
struct Stop {
    requested: Mutex<bool>,
    wake: Condvar,
}

/// What belongs to one process: the slot's keeper (with its store connections) and the thread
/// that steps it. Never used, dropped or joined by another process.
#[derive(Debug)]
struct Process {
    /// The fork generation (`crate::fork`) of the process that built it.
    generation: u64,
    keeper: Arc<Keeper>,
    stop: Arc<Stop>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Process {
    fn start(keeper: Keeper) -> Result<Process> {
        let keeper = Arc::new(keeper);
        let stop = Arc::new(Stop::default());
        let thread = {
            let (keeper, stop) = (keeper.clone(), stop.clone());
            std::thread::Builder::new()
                .name("cosid-keeper".into())
                .spawn(move || keeper_loop(&keeper, &stop))
                .map_err(|e| {
                    Error::new(ErrorKind::Store, "cannot start the keeper thread").with_source(e)
                })?
        };
        Ok(Process {
            generation: crate::fork::current(),
            keeper,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn is_ours(&self) -> bool {
        self.generation == crate::fork::current()
    }

    /// Stops the keeper thread and releases the slot with `last`. Only in the owning process.
    fn stop_and_release(&self, last: Option<i64>) -> Result<()> {
        *self
            .stop
            .requested
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        self.keeper.release(last)
    }
}

/// Where a lease runtime's store came from: only a URL can be opened again in a forked child.
#[derive(Debug)]
enum StoreSource {
    Url,
    Injected,
}

/// No process is building its own `Process` right now (see `Inner::take_own_slot`).
const NOT_RELOCATING: u64 = u64::MAX;

#[derive(Debug)]
struct Inner {
    config: Config,
    clock: SharedClock,
    window: Arc<Window>,
    /// The current process's part. Replaced only in a forked child (the parent's is leaked
    /// there, never freed); freed when the runtime drops in the process that built it.
    process: AtomicPtr<Process>,
    /// The fork generation whose `Process` is being built (one builder per child).
    relocating: AtomicU64,
    store_source: StoreSource,
    owner_key: Option<String>,
    default_generator: Arc<Generator>,
    generators: RwLock<HashMap<String, Arc<Generator>>>,
    events: Arc<EventBus>,
    counters: Arc<Counters>,
    closed: AtomicBool,
}

/// A running id source: a slot, its keeper, and its generators.
///
/// Thread-safe: share it (it is cheap to clone; clones are handles to one runtime) and call
/// `next` from any number of threads. Ids of one generator are unique across every process of
/// the namespace, and strictly increase per generator within one binding.
///
/// ```
/// use cosid_core::{Event, Runtime};
///
/// let config = cosid_core::Config::from_yaml(
///     "cosid: {namespace: docs-rt, machine: {lease: {store: 'memory:docs-rt'}}}",
/// )?;
/// let rt = Runtime::builder()
///     .config(config)
///     .on_event(|e: &Event| eprintln!("cosid: {e}"))
///     .build()?;
/// let handle = rt.clone(); // one Arc: both issue from the same slot
/// let id = std::thread::spawn(move || handle.next()).join().unwrap()?;
/// assert!(rt.next()? > id);
/// rt.close()?;
/// # Ok::<(), cosid_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// Builds a [`Runtime`] with injected parts (a clock, a store, listeners).
#[derive(Default)]
pub struct RuntimeBuilder {
    config: Option<Config>,
    clock: Option<SharedClock>,
    store: Option<SharedStore>,
    listeners: Vec<EventListener>,
    owner: Option<Owner>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// The configuration (default: the embedded default).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// The clock (default: the system clock). Memory and SQLite stores opened by the builder use
    /// it as their store clock too.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// A store to use instead of opening the configured URL.
    pub fn store(mut self, store: SharedStore) -> Self {
        self.store = Some(store);
        self
    }

    /// The owner identity (default: the configured owner key or `host:pid`, fresh incarnation).
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// A listener that also sees the events of start-up (the first `SlotAcquired`).
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Acquires a slot (retrying for `acquire-timeout`), starts the keeper thread, returns the
    /// runtime.
    pub fn build(self) -> Result<Runtime> {
        let config = match self.config {
            Some(c) => c,
            None => Config::embedded_default()?,
        };
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        config.layout.check_epoch(clock.now_ms())?;
        check_slot_fits(&config)?;
        // Registers the fork handlers before anything a fork could catch half-done.
        crate::fork::generation();
        let events = Arc::new(EventBus::default());
        for l in self.listeners {
            events.subscribe(l);
        }
        let counters = Arc::new(Counters::default());
        let window = Arc::new(Window::new());
        let store_source = if self.store.is_some() {
            StoreSource::Injected
        } else {
            StoreSource::Url
        };
        let owner_key = self.owner.as_ref().map(|o| o.key.clone());
        let keeper = start_keeper(
            &config, &clock, self.store, self.owner, &window, &events, &counters,
        )?;
        let process = Box::new(Process::start(keeper)?);
        wait_for_a_restart_guard(&config, &window, &clock, &events);
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let hook: Weak<dyn AfterFork> = weak.clone();
            Inner {
                default_generator: Arc::new(
                    Generator::new(
                        "",
                        config.layout,
                        window.clone(),
                        clock.clone(),
                        config.max_wait,
                    )
                    .with_fork_hook(hook),
                ),
                config,
                clock,
                window,
                process: AtomicPtr::new(Box::into_raw(process)),
                relocating: AtomicU64::new(NOT_RELOCATING),
                store_source,
                owner_key,
                generators: RwLock::default(),
                events,
                counters,
                closed: AtomicBool::new(false),
            }
        });
        Ok(Runtime { inner })
    }
}

/// Opens the store (unless given), acquires a slot or reads the static slot's state, and binds
/// `window`: the part of a runtime each process builds for itself.
fn start_keeper(
    config: &Config,
    clock: &SharedClock,
    store: Option<SharedStore>,
    owner: Option<Owner>,
    window: &Arc<Window>,
    events: &Arc<EventBus>,
    counters: &Arc<Counters>,
) -> Result<Keeper> {
    Ok(match &config.machine {
        Machine::Lease(lease) => {
            let store = match store {
                Some(s) => s,
                None => crate::store::open_with_clock(&lease.store, clock.clone())?,
            };
            let owner = owner.unwrap_or_else(|| Owner::new(owner_key(lease)));
            // A configuration built in code skips the parser's checks: the bounds hold here too.
            crate::bounds::check_len(
                "the namespace",
                &config.namespace,
                crate::bounds::MAX_NAMESPACE_BYTES,
            )?;
            crate::bounds::check_len(
                "the owner key",
                &owner.key,
                crate::bounds::MAX_OWNER_KEY_BYTES,
            )?;
            let terms = Terms {
                ttl_ms: lease.ttl.as_millis() as i64,
                tolerance_ms: lease.tolerance.as_millis() as i64,
            };
            // The layout is recorded in the namespace: runtimes that would compose ids
            // differently never share one.
            let client = LeaseClient::new(store, &config.namespace, lease.bits, terms)?
                .with_layout(&config.layout)
                .with_restart_guard();
            Keeper::Lease(Box::new(LeaseKeeper::start(
                client,
                window.clone(),
                clock.clone(),
                KeeperConfig {
                    ttl: lease.ttl,
                    acquire_timeout: lease.acquire_timeout,
                    preferred_slot: lease.preferred_slot,
                    owner,
                },
                events.clone(),
                counters.clone(),
            )?))
        }
        Machine::Static(s) => Keeper::Static(StaticSlot::start(
            s.clone(),
            window.clone(),
            clock.clone(),
            events.clone(),
            counters.clone(),
        )?),
    })
}

/// A window that opens later than now (the restart guard, `docs/protocol.md` section 7: a
/// namespace created on a network store, or an acquisition on a store that lost data lately,
/// starts ttl + tolerance later; or the namespace's not-before): the runtime says so with a
/// `window_ahead` event, and waits here, its keeper renewing meanwhile, until its clock has
/// passed the floor, so its first `next()` does not fail with `ClockBehind`. A floor farther
/// ahead than the guard can set (a `cosid migrate --not-before` in the future) is said, not
/// waited for.
fn wait_for_a_restart_guard(
    config: &Config,
    window: &Window,
    clock: &SharedClock,
    events: &EventBus,
) {
    let Machine::Lease(lease) = &config.machine else {
        return;
    };
    // The guard's floor is at most ttl + tolerance + 1 s (a whole-second uptime) ahead.
    let longest = lease.ttl + lease.tolerance + Duration::from_secs(2);
    let binding = window.read();
    let ahead = binding.floor.saturating_sub(clock.now_ms());
    if ahead > WINDOW_AHEAD_SAID_MS {
        events.emit(Event::WindowAhead {
            slot: binding.slot,
            floor_ms: binding.floor,
            reason: if ahead <= longest.as_millis() as i64 {
                format!(
                    "{:.1} s from now: the restart guard, which starts the first windows of a \
                     namespace on a network store, and every window of a store that lost data \
                     lately, ttl + tolerance after the server's start, above any window the \
                     store may have granted and forgotten (docs/protocol.md section 7); for a \
                     server that never restarts empty (persistence on, or a throwaway server), \
                     add ?restart-guard=off to the store URL to start at once",
                    ahead as f64 / 1000.0
                )
            } else {
                format!(
                    "{:.1} s from now: the namespace's not-before (cosid migrate \
                     --not-before); ids fail with clock_behind until then",
                    ahead as f64 / 1000.0
                )
            },
        });
    }
    if ahead < 0 || ahead > longest.as_millis() as i64 {
        return;
    }
    let deadline = clock.monotonic() + longest;
    // An interrupt ends this wait; the first id call then waits (and is interrupted) itself.
    let _interruptible = crate::interrupt::section();
    while window.read().floor >= clock.now_ms()
        && clock.monotonic() < deadline
        && !crate::interrupt::stops_here()
    {
        let left = window.read().floor.saturating_sub(clock.now_ms()) + 1;
        clock.sleep(Duration::from_millis(left.clamp(1, 50) as u64));
    }
}

/// A start that waits longer than this for its window says so (`Event::WindowAhead`).
const WINDOW_AHEAD_SAID_MS: i64 = 500;

/// A slot above the layout's `max_slot` would spill into the timestamp bits of the ids it
/// composes (and could repeat another slot's ids), so a configuration built in code, which skips
/// the parser's checks, is checked here too.
fn check_slot_fits(config: &Config) -> Result<()> {
    let node_bits = config.layout.node_bits();
    match &config.machine {
        Machine::Lease(lease) if lease.bits > node_bits => Err(Error::config(format!(
            "cosid.machine.lease.bits {} is larger than the layout's node-bits ({node_bits}); use 0 to {node_bits}",
            lease.bits
        ))),
        Machine::Static(s) if s.slot > config.layout.max_slot() => Err(Error::config(format!(
            "cosid.machine.static.slot {} does not fit the layout's {node_bits} node bits; use 0 to {}",
            s.slot,
            config.layout.max_slot()
        ))),
        _ => Ok(()),
    }
}

fn keeper_loop(keeper: &Keeper, stop: &Stop) {
    loop {
        // Never sleep long: a manual clock in tests moves without waking us.
        let wait = keeper.tick().min(Duration::from_millis(200));
        let requested = stop.requested.lock().unwrap_or_else(|p| p.into_inner());
        if *requested {
            return;
        }
        let (requested, _) = stop
            .wake
            .wait_timeout(requested, wait.max(Duration::from_millis(1)))
            .unwrap_or_else(|p| p.into_inner());
        if *requested {
            return;
        }
    }
}

/// `host:pid`, the default owner key.
pub fn default_owner_key() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    };
    format!("{host}:{}", std::process::id())
}

/// The configured owner key, or `host:pid` for the first runtime of this process and
/// `host:pid#N` for the N-th: two runtimes of one process on one namespace are two owners, not
/// one owner seen twice (which would raise `duplicate_owner_key`).
fn owner_key(lease: &LeaseConfig) -> String {
    static RUNTIMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    lease
        .owner_key
        .clone()
        .unwrap_or_else(|| match RUNTIMES.fetch_add(1, Ordering::Relaxed) {
            0 => default_owner_key(),
            n => format!("{}#{}", default_owner_key(), n + 1),
        })
}

impl Runtime {
    /// A builder.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A runtime from a configuration.
    pub fn new(config: Config) -> Result<Runtime> {
        Runtime::builder().config(config).build()
    }

    /// A runtime on the embedded default store (`$XDG_STATE_HOME/cosid/slots.db`).
    pub fn embedded_default() -> Result<Runtime> {
        Runtime::new(Config::embedded_default()?)
    }

    /// A runtime from a YAML or JSON document.
    pub fn from_yaml(text: &str) -> Result<Runtime> {
        Runtime::new(Config::from_yaml(text)?)
    }

    /// A runtime from a configuration file.
    pub fn from_path(path: &Path) -> Result<Runtime> {
        Runtime::new(Config::from_path(path)?)
    }

    /// Issues one id from the default generator, waiting at most `max-wait`.
    #[inline]
    pub fn next(&self) -> Result<u64> {
        self.inner.default_generator.next()
    }

    /// Tries to issue one id without waiting.
    #[inline]
    pub fn try_next(&self) -> Result<TryNext<u64>> {
        self.inner.default_generator.try_next()
    }

    /// Fills `out` with ids from the default generator ([`Generator::next_batch`]: all or
    /// nothing, waiting like [`Runtime::next`]).
    pub fn next_batch(&self, out: &mut [u64]) -> Result<()> {
        self.inner.default_generator.next_batch(out)
    }

    /// The default generator.
    pub fn default_generator(&self) -> &Arc<Generator> {
        &self.inner.default_generator
    }

    /// The generator called `name` (created on first use), sharing this runtime's slot. Each
    /// name is its own id space: ids are unique per name across the namespace. `""` is the
    /// default generator.
    pub fn generator(&self, name: &str) -> Result<Arc<Generator>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the runtime is closed"));
        }
        if name.is_empty() {
            return Ok(self.inner.default_generator.clone());
        }
        if name.len() > 128 || name.chars().any(char::is_control) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "generator name '{}' must be 1 to 128 printable characters",
                    name.escape_debug()
                ),
            ));
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the runtime is closed"));
        }
        // Gated: a fork never copies this map's lock while it is held (see `crate::fork`).
        let found = crate::fork::gate(|| {
            self.inner
                .generators
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned()
        });
        if let Some(g) = found {
            return Ok(g);
        }
        // Built outside the lock (it allocates); a racing caller's generator wins.
        let hook: Weak<dyn AfterFork> = Arc::downgrade(&self.inner) as Weak<Inner>;
        let fresh = Arc::new(
            Generator::new(
                name,
                self.inner.config.layout,
                self.inner.window.clone(),
                self.inner.clock.clone(),
                self.inner.config.max_wait,
            )
            .with_fork_hook(hook),
        );
        crate::fork::gate(|| {
            let mut map = self
                .inner
                .generators
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::new(ErrorKind::Closed, "the runtime is closed"));
            }
            Ok(map.entry(name.to_string()).or_insert(fresh).clone())
        })
    }

    /// The id layout.
    pub fn layout(&self) -> &Layout {
        &self.inner.config.layout
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The current lease (lease mode, while bound).
    ///
    /// In a forked child this is the child's own lease: under `cosid.fork: new-slot` the first
    /// call takes it; `None` if the child cannot have one.
    pub fn lease(&self) -> Option<SlotLease> {
        let process = self.inner.own_process().ok()?;
        match &*process.keeper {
            Keeper::Lease(k) => k.lease(),
            Keeper::Static(_) => None,
        }
    }

    /// The window as generators see it now (in a forked child, after taking its own slot as
    /// `lease` does).
    pub fn binding(&self) -> crate::window::Binding {
        let _ = self.inner.own_process();
        self.inner.window.read()
    }

    /// Adds an event listener (called on the keeper's thread; keep it quick).
    pub fn subscribe(&self, listener: impl Fn(&Event) + Send + Sync + 'static) {
        self.inner.events.subscribe(Arc::new(listener));
    }

    /// The runtime's counters. In a forked child, the slot, window and `bound` are the child's
    /// own (taken as `lease` does); a child that cannot have one shows `bound: false`.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        self.inner.counters.fill(&mut s);
        let ours = self.inner.own_process().is_ok();
        let gens: Vec<Arc<Generator>> = crate::fork::gate(|| {
            self.inner
                .generators
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect()
        });
        for g in std::iter::once(&self.inner.default_generator).chain(gens.iter()) {
            s.ids_issued += g.issued();
            s.waits += g.waits();
        }
        let b = self.inner.window.read();
        s.slot = b.slot;
        s.bound = ours && b.status == crate::window::WindowStatus::Active;
        s.floor_ms = b.floor;
        s.ceiling_ms = b.ceiling;
        s
    }

    /// Whether `close` ran.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Ordered shutdown: generators close and report their last timestamp, the keeper stops,
    /// the slot is released with the largest last timestamp. A second call returns `Closed`.
    /// In a forked child that never took a slot of its own it closes the generators and leaves
    /// the parent's lease, keeper and store alone (nothing of the child's to release).
    ///
    /// May be called from an event listener: listeners run with no lock of the keeper held, and
    /// a close on the keeper's own thread releases the slot there and lets the thread end when
    /// the listener returns (it is not waited for).
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::new(
                ErrorKind::Closed,
                "the runtime is already closed",
            ));
        }
        self.inner.shutdown()
    }
}

impl Inner {
    /// The process part in force now; possibly the parent's, in a fork child.
    fn current_process(&self) -> &Process {
        // SAFETY: the pointer always holds a `Box<Process>` that is freed only when `Inner`
        // drops (in the process that built it); one replaced in a forked child is leaked, never
        // freed, so a reference taken before the replacement stays valid.
        unsafe { &*self.process.load(Ordering::Acquire) }
    }

    /// This process's part, taking a slot of its own first in a forked child (policy allowing).
    fn own_process(&self) -> Result<&Process> {
        let p = self.current_process();
        if p.is_ours() {
            return Ok(p);
        }
        self.take_own_slot()?;
        Ok(self.current_process())
    }

    /// Why a forked child cannot take a slot of its own, if it cannot.
    fn refuse_in_child(&self) -> Option<String> {
        let lease = match &self.config.machine {
            Machine::Static(s) => {
                return Some(format!(
                    "static slot {} belongs to one process, the one that built the runtime; \
                     build a runtime in each process with a slot of its own",
                    s.slot
                ))
            }
            Machine::Lease(lease) => lease,
        };
        if self.config.fork == ForkPolicy::Fail {
            return Some(
                "the runtime's cosid.fork is fail; build a new runtime in the child, or set \
                 cosid.fork: new-slot to take a new slot automatically"
                    .into(),
            );
        }
        if matches!(self.store_source, StoreSource::Injected) {
            return Some(
                "the runtime was built with a store object, which a child cannot reopen; \
                 build a new runtime in the child"
                    .into(),
            );
        }
        if lease.store.starts_with("memory:") {
            return Some(format!(
                "store '{}' lives in one process's memory and cannot coordinate a child with \
                 its parent; use a shared store (sqlite://, redis://, postgres://, etcd://)",
                lease.store
            ));
        }
        None
    }

    /// Builds this process's part in a forked child: a new store connection, a new incarnation
    /// on a new slot, a keeper thread of its own; then rebinds the shared window to it. The
    /// parent's part is left as it is, in memory, untouched.
    fn relocate(&self, generation: u64) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the runtime is closed"));
        }
        // The parent's keeper may have been writing the window at the fork.
        self.window.take_over_in_child();
        let owner = self.owner_key.clone().map(Owner::new);
        let keeper = start_keeper(
            &self.config,
            &self.clock,
            None,
            owner,
            &self.window,
            &self.events,
            &self.counters,
        )?;
        let process = Box::new(Process::start(keeper)?);
        debug_assert_eq!(process.generation, generation);
        // The replaced part is the parent's: leaked on purpose (see `current_process`).
        self.process
            .store(Box::into_raw(process), Ordering::Release);
        Ok(())
    }

    fn shutdown(&self) -> Result<()> {
        // 1. Generators: after this no id can be issued, and we know the exact last one.
        let mut last: Option<i64> = self.default_generator.close();
        let gens: Vec<Arc<Generator>> = crate::fork::gate(|| {
            self.generators
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect()
        });
        for g in gens {
            last = last.max(g.close());
        }
        let process = self.current_process();
        if !process.is_ours() {
            // A forked child that never took a slot: the lease, the keeper thread and the
            // store connections belong to the parent. Nothing of ours to release.
            return Ok(());
        }
        // 2. The keeper thread. 3. The slot, with the exact last timestamp. 4. The store drops
        // with the keeper.
        process.stop_and_release(last)
    }
}

impl AfterFork for Inner {
    fn take_own_slot(&self) -> Result<()> {
        let generation = crate::fork::current();
        let started = Instant::now();
        loop {
            if self.current_process().generation == generation {
                return Ok(());
            }
            if let Some(why) = self.refuse_in_child() {
                return Err(Error::new(
                    ErrorKind::Forked,
                    format!(
                        "this process is a fork of the one that built the runtime, which still \
                         holds its slot, and {why}"
                    ),
                ));
            }
            let seen = self.relocating.load(Ordering::Acquire);
            if seen != generation
                && self
                    .relocating
                    .compare_exchange(seen, generation, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                let result = self.relocate(generation);
                if result.is_err() {
                    // Let the next call try again.
                    self.relocating.store(NOT_RELOCATING, Ordering::Release);
                }
                return result;
            }
            // Another thread of this child is taking the slot: wait for it, bounded.
            if started.elapsed() > self.relocation_wait() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "waited too long for another thread of this forked process to take a slot",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Inner {
    /// How long a thread of a forked child waits for another that is taking the slot.
    fn relocation_wait(&self) -> Duration {
        match &self.config.machine {
            Machine::Lease(l) => l.acquire_timeout + Duration::from_secs(5),
            Machine::Static(_) => Duration::from_secs(5),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let _ = self.shutdown();
        }
        let process = self.process.load(Ordering::Acquire);
        // SAFETY: the pointer came from `Box::into_raw` and nothing else frees it. A part of
        // another process (the parent's, in a fork child) is never freed here: its keeper owns
        // store connections and a thread that are not this process's to close.
        if unsafe { &*process }.is_ours() {
            drop(unsafe { Box::from_raw(process) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::lease::LeaseClient;
    use crate::store::SlotWrite;

    fn memory_config(name: &str) -> Config {
        Config::from_yaml(&format!(
            "cosid:\n  namespace: rt\n  machine:\n    lease:\n      store: 'memory:{name}'\n      bits: 3\n"
        ))
        .unwrap()
    }

    /// A store that says a missing namespace may be a lost one, as every network store does.
    #[derive(Debug)]
    struct Forgetful;

    impl crate::store::hooked::Hook for Forgetful {
        fn call(
            &self,
            inner: &dyn crate::store::SlotStore,
            call: crate::store::hooked::Call<'_>,
        ) -> Result<crate::store::hooked::Reply> {
            call.on(inner)
        }

        fn may_forget_namespaces(&self, _inner: &dyn crate::store::SlotStore) -> bool {
            true
        }
    }

    /// A runtime whose window opens later than now (here: the first runtime of a namespace on a
    /// store that may have lost it) says so with a `window_ahead` event naming the floor and how
    /// to avoid the wait, before it waits; its first id lies above that floor.
    #[test]
    fn a_start_that_waits_for_its_window_says_why() {
        let config = Config::from_yaml(
            "cosid:\n  namespace: ahead\n  machine:\n    lease:\n      store: 'memory:unused'\n      ttl: 1s\n      tolerance: 200ms\n",
        )
        .unwrap();
        let store = crate::store::hooked::Hooked::new(
            crate::store::memory::MemoryStore::new(Arc::new(SystemClock)),
            Forgetful,
        );
        let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
        let sink = seen.clone();
        let t0 = crate::clock::system_now_ms();
        let rt = Runtime::builder()
            .config(config)
            .store(store)
            .on_event(move |e| sink.lock().unwrap().push(e.clone()))
            .build()
            .unwrap();
        let ahead: Vec<Event> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.name() == "window_ahead")
            .cloned()
            .collect();
        let [Event::WindowAhead {
            floor_ms, reason, ..
        }] = ahead.as_slice()
        else {
            panic!("one window_ahead event: {ahead:?}");
        };
        assert!(*floor_ms >= t0 + 1_200, "{floor_ms} {t0}");
        for part in ["s from now: the restart guard", "?restart-guard=off"] {
            assert!(reason.contains(part), "{part:?} in {reason}");
        }
        let id = rt.next().unwrap();
        let parts = rt.layout().decompose(id).unwrap();
        assert!(rt.layout().unit_start_ms(parts.timestamp) > *floor_ms);
        rt.close().unwrap();
    }

    #[test]
    fn issues_and_releases_with_the_exact_last_timestamp() {
        let rt = Runtime::new(memory_config("rt1")).unwrap();
        let lease = rt.lease().unwrap();
        let a = rt.next().unwrap();
        let b = rt.next().unwrap();
        assert!(b > a);
        let mut batch = [0u64; 100];
        rt.next_batch(&mut batch).unwrap();
        assert!(batch.windows(2).all(|w| w[0] < w[1]) && batch[0] > b);
        let last = rt
            .layout()
            .unit_start_ms(rt.layout().decompose(batch[99]).unwrap().timestamp);
        assert_eq!(rt.stats().ids_issued, 102);
        rt.close().unwrap();
        assert_eq!(rt.close().unwrap_err().kind(), ErrorKind::Closed);
        assert_eq!(rt.next().unwrap_err().kind(), ErrorKind::Closed);
        let store = crate::store::open("memory:rt1").unwrap();
        let (_, rec) = store.read_slot("rt", lease.slot).unwrap();
        let rec = rec.unwrap().value;
        assert_eq!((rec.owner, rec.next_floor), (None, last));
    }

    #[test]
    fn runtimes_sharing_a_store_get_distinct_slots_and_named_generators_share_the_slot() {
        let a = Runtime::new(memory_config("rt2")).unwrap();
        let b = Runtime::new(memory_config("rt2")).unwrap();
        assert_ne!(a.lease().unwrap().slot, b.lease().unwrap().slot);
        let orders = a.generator("orders").unwrap();
        let id = orders.next().unwrap();
        assert_eq!(
            a.layout().decompose(id).unwrap().slot,
            a.lease().unwrap().slot
        );
        assert!(Arc::ptr_eq(&orders, &a.generator("orders").unwrap()));
        let c = Runtime::new(memory_config("rt2")).unwrap();
        c.close().unwrap();
        assert_eq!(c.generator("").unwrap_err().kind(), ErrorKind::Closed);
        assert_eq!(
            a.generator("bad\nname").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        drop(a);
        drop(b);
        // Dropping released both slots.
        let store = crate::store::open("memory:rt2").unwrap();
        let snap = store.snapshot("rt").unwrap();
        assert!(snap.slots.slots.iter().all(|r| r.value.owner.is_none()));
    }

    #[test]
    fn a_runtime_whose_layout_differs_from_the_namespace_is_refused() {
        let cfg = |epoch: &str| {
            Config::from_yaml(&format!(
                "cosid:\n  namespace: rt\n  snowflake: {{epoch: '{epoch}'}}\n  machine:\n    lease:\n      store: 'memory:rt-layout'\n      bits: 3\n"
            ))
            .unwrap()
        };
        let a = Runtime::new(cfg("2019-12-24T16:00:00Z")).unwrap();
        // Epochs 2 s apart would compose the same ids for different times.
        let e = Runtime::new(cfg("2019-12-24T16:00:02Z")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
        assert!(e.message().contains("2019-12-24T16:00:02"), "{e}");
        a.close().unwrap();
    }

    #[test]
    fn two_runtimes_of_one_process_are_two_owners_not_a_duplicate_key() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let a = Runtime::new(memory_config("rt-two-owners")).unwrap();
        let b = Runtime::builder()
            .config(memory_config("rt-two-owners"))
            .on_event(move |e| ev.lock().unwrap().push(e.name()))
            .build()
            .unwrap();
        let (la, lb) = (a.lease().unwrap(), b.lease().unwrap());
        assert_ne!(la.slot, lb.slot);
        assert_ne!(la.owner.key, lb.owner.key);
        assert!(
            !events.lock().unwrap().contains(&"duplicate_owner_key"),
            "{:?}",
            events.lock().unwrap()
        );
    }

    /// Fails every write of `owner_key`'s records while `cut` is set: the runtime's keeper
    /// cannot reach the store, everyone else can.
    #[derive(Debug)]
    struct CutOff {
        owner_key: &'static str,
        cut: std::sync::atomic::AtomicBool,
    }

    impl crate::store::hooked::Hook for CutOff {
        fn call(
            &self,
            inner: &dyn crate::store::SlotStore,
            call: crate::store::hooked::Call<'_>,
        ) -> Result<crate::store::hooked::Reply> {
            use crate::store::hooked::Call;
            if let Call::CasSlot { write, .. } | Call::CasSlotTimed { write, .. } = call {
                let ours =
                    write.record.owner.as_ref().map(|o| o.key.as_str()) == Some(self.owner_key);
                if ours && self.cut.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(Error::store("store unreachable for the runtime (test)"));
                }
            }
            call.on(inner)
        }
    }

    #[test]
    fn lost_lease_fails_fast_then_rebinds_to_a_new_window() {
        let clock = ManualClock::shared(1_800_000_000_000);
        let memory = crate::store::open_with_clock("memory:rt3", clock.clone()).unwrap();
        let store = crate::store::hooked::Hooked::new(
            memory.clone(),
            CutOff {
                owner_key: "rt-owner",
                cut: false.into(),
            },
        );
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let rt = Runtime::builder()
            .config(memory_config("rt3"))
            .clock(clock.clone())
            .store(store.clone())
            .owner(Owner::new("rt-owner"))
            .on_event(move |e| ev.lock().unwrap().push(e.name()))
            .build()
            .unwrap();
        let lease = rt.lease().unwrap();
        rt.next().unwrap();
        // Someone takes the slot over after expiry: the keeper could not renew in time. (Without
        // the cut, the keeper's thread could renew the expired lease between the clock's jump
        // and the thief's acquisition, and the thief would rightly take another slot.)
        store.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        clock.advance(Duration::from_secs(31));
        let thief = LeaseClient::new(
            store.clone() as SharedStore,
            "rt",
            3,
            Terms {
                ttl_ms: 30_000,
                tolerance_ms: 1_000,
            },
        )
        .unwrap();
        let stolen = thief
            .acquire(&crate::lease::AcquireRequest {
                owner: Owner::new("thief"),
                preferred_slot: Some(lease.slot),
                floor_at_least: 0,
            })
            .unwrap();
        assert_eq!(stolen.lease.slot, lease.slot);
        assert!(
            stolen.lease.floor >= lease.ceiling,
            "the thief starts above our ceiling"
        );
        store.cut.store(false, std::sync::atomic::Ordering::SeqCst);
        // The keeper notices at its next renewal and rebinds (another slot, or the same one once
        // the thief's lease runs out): in both cases a new ownership whose window starts above
        // every ceiling this runtime was granted.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !events.lock().unwrap().contains(&"slot_lost") && std::time::Instant::now() < deadline
        {
            clock.advance(Duration::from_millis(100));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            events.lock().unwrap().contains(&"slot_lost"),
            "the keeper never noticed"
        );
        while rt.lease().is_none() && std::time::Instant::now() < deadline {
            clock.advance(Duration::from_millis(100));
            std::thread::sleep(Duration::from_millis(5));
        }
        let new = rt.lease().expect("rebound");
        assert!(new.fence != lease.fence || new.slot != lease.slot);
        assert!(
            new.floor >= lease.ceiling,
            "{} < {}",
            new.floor,
            lease.ceiling
        );
        let p = rt.layout().decompose(rt.next().unwrap()).unwrap();
        assert_eq!(p.slot, new.slot);
        rt.close().unwrap();
    }

    /// What a listener saw of the runtime from inside the event.
    #[derive(Debug, Default)]
    struct SeenFromListener {
        lease_slot: Option<u32>,
        bound: bool,
        close: Option<Result<()>>,
    }

    #[test]
    fn a_listener_can_call_the_runtime_even_close() {
        let clock = ManualClock::shared(1_800_000_000_000);
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::default();
        let answer: Arc<Mutex<Option<SeenFromListener>>> = Arc::default();
        let (s2, a2) = (slot.clone(), answer.clone());
        let rt = Runtime::builder()
            .config(memory_config("rt4"))
            .clock(clock.clone())
            .on_event(move |e| {
                if e.name() == "renewal_failed" || e.name() == "slot_acquired" {
                    return;
                }
                let rt = s2.lock().unwrap().clone();
                if let (Some(rt), true) = (rt, e.name() == "slot_lost") {
                    // The keeper is between steps: none of these waits for it.
                    let seen = SeenFromListener {
                        lease_slot: rt.lease().map(|l| l.slot),
                        bound: rt.stats().bound,
                        close: Some(rt.close()),
                    };
                    *a2.lock().unwrap() = Some(seen);
                }
            })
            .build()
            .unwrap();
        *slot.lock().unwrap() = Some(rt.clone());
        // Make the keeper raise an event on its own thread: a skewed store clock would need a
        // store; instead let the lease expire and be noticed as lost by a renewal.
        let store = crate::store::open("memory:rt4").unwrap();
        let lease = rt.lease().unwrap();
        store
            .cas_slot(
                "rt",
                SlotWrite::new(None, &crate::lease::SlotRecord::vacant(lease.slot)),
            )
            .ok();
        let (_, rec) = store.read_slot("rt", lease.slot).unwrap();
        let mut stolen = rec.unwrap();
        stolen.value.owner = Some(Owner::new("other"));
        store
            .cas_slot("rt", SlotWrite::new(Some(stolen.version), &stolen.value))
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while answer.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
            clock.advance(Duration::from_secs(1));
            std::thread::sleep(Duration::from_millis(5));
        }
        let seen = answer.lock().unwrap().take().expect("the listener ran");
        // It saw the runtime rebound to a new lease, then closed it from the keeper's thread.
        assert!(seen.lease_slot.is_some(), "{seen:?}");
        assert!(seen.bound, "{seen:?}");
        assert!(matches!(seen.close, Some(Ok(()))), "{seen:?}");
        assert!(rt.is_closed());
        assert_eq!(rt.next().unwrap_err().kind(), ErrorKind::Closed);
        assert_eq!(rt.close().unwrap_err().kind(), ErrorKind::Closed);
        // The new lease was released: the store holds no live owner on the slot.
        let new_slot = seen.lease_slot.unwrap();
        let (_, rec) = store.read_slot("rt", new_slot).unwrap();
        assert_eq!(rec.unwrap().value.owner, None, "slot {new_slot} still held");
        slot.lock().unwrap().take();
    }
}
