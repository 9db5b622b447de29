//! `cosid`: issue ids, decode them, inspect and migrate a namespace.
//!
//! Errors go to stderr as one line (`cosid: error: …`) with a non-zero exit status.

mod follow;

use clap::{Args, Parser, Subcommand};
use cosid_core::config::{Config, Machine};
use cosid_core::convert::{self, IdFormat, TextFormat};
use cosid_core::lease::LeaseClient;
use cosid_core::{Error, ErrorKind, Layout, Runtime};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "cosid",
    version,
    about = "Distributed Snowflake ids, unique whatever the clocks do"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print ids, one a line, then release the slot.
    Next(NextArgs),
    /// Decode ids: one JSON object a line (id, timestamp_ms, time, slot, sequence).
    Parse(ParseArgs),
    /// Show a namespace's slots: a summary, then holder, renewal, window, next floor.
    ///
    /// The summary: slots held by a live lease, expired ones (free to take, counted in free),
    /// free ones (limit - held), the limit and the layout. Per slot: holder,
    /// fence, last renewal (derived: expires - the namespace's ttl, as a renewal sets the expiry
    /// to its store time + ttl), floor, ceiling, expiry and next floor (where the slot's next
    /// holder starts). A free slot's holder, floor, ceiling and expiry are its previous
    /// holder's, shown in parentheses: history.
    Slots(SlotsArgs),
    /// Raise a namespace's (or a static state file's) floor to a 4.x cut-over time.
    Migrate(MigrateArgs),
    /// Change a namespace's life: raise its slot limit, or delete it.
    #[command(subcommand)]
    Namespace(NamespaceCommand),
}

#[derive(Subcommand, Debug)]
enum NamespaceCommand {
    /// Raise a namespace's slot limit (never lower it).
    ///
    /// Never beyond what the namespace's id layout holds (2^node-bits). One compare-and-set of
    /// the namespace record: running runtimes keep their slots and take new ones at their next
    /// acquisition; new runtimes use the new limit, whatever bits they are configured with
    /// below it.
    RaiseSlots(RaiseSlotsArgs),
    /// Delete a namespace no live lease holds (needs --yes).
    ///
    /// Refused while any slot has an unexpired lease, naming it. Its slot records go; a small
    /// tombstone record stays, with the layout and a not-before above every id the namespace
    /// issued, so that a namespace created again under this name never issues one of them
    /// again (docs/stores.md, "Deleting a namespace"). Freeing a crashed holder's slot early
    /// gains nothing, so no command does it: the next holder's floor is the old ceiling.
    Delete(DeleteArgs),
}

#[derive(Args, Debug)]
struct RaiseSlotsArgs {
    /// Store URL.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Namespace.
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// The new slot limit: at least the current one, at most 2^node-bits of the layout.
    #[arg(long, value_name = "N")]
    slots: u32,
}

#[derive(Args, Debug)]
struct DeleteArgs {
    /// Store URL.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Namespace.
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// Confirms the deletion (required).
    #[arg(long)]
    yes: bool,
}

#[derive(Args, Debug, Clone)]
struct RuntimeArgs {
    /// Configuration file (YAML or JSON). Without it: the embedded SQLite store.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store URL (memory:, sqlite://PATH, redis://…, redis+sentinel://…, redis+cluster://…,
    /// postgres://…, etcd://…, mysql://…).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Namespace.
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Owner key (default host:pid).
    #[arg(long, value_name = "KEY")]
    owner_key: Option<String>,
    /// Lease duration, e.g. 30s.
    #[arg(long, value_name = "DUR")]
    ttl: Option<String>,
    /// Tolerance, e.g. 1s (recorded per namespace).
    #[arg(long, value_name = "DUR")]
    tolerance: Option<String>,
}

#[derive(Args, Debug)]
struct NextArgs {
    /// How many ids.
    #[arg(short = 'n', long = "count", default_value_t = 1, value_name = "COUNT")]
    count: u64,
    /// Print ids until SIGTERM or SIGINT, then shut down in order and exit 0.
    #[arg(long)]
    follow: bool,
    /// With --follow: at most this many ids per second (0.001 to 1000000000); a pause is not
    /// made up for with a burst.
    #[arg(long, value_name = "PER_SECOND", requires = "follow")]
    rate: Option<f64>,
    /// Output format: dec, hex, base62 (radix62), radix36, friendly or json; options follow
    /// the name: radix62,pad-start=false,char-size=10 or friendly,zone=Asia/Shanghai,pad-start=true,
    /// and in every form prefix=, suffix= and date-prefix=yyMMdd (docs/id-text.md).
    #[arg(long, default_value = "dec", value_name = "FORMAT")]
    format: String,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args, Debug)]
struct ParseArgs {
    /// Ids to decode.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
    /// Input format: dec (default; 0x… is read as hex), hex, base62 (radix62), radix36 or
    /// friendly, with the options the text was written with: radix62,pad-start=false or
    /// friendly,zone=Asia/Shanghai,pad-start=true (docs/id-text.md).
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// Configuration whose layout the ids use (default: the millisecond layout).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct SlotsArgs {
    /// Store URL.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Namespace.
    #[arg(long, value_name = "NS", default_value = cosid_core::config::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Print JSON lines instead of a table, one a slot record: slot, state, holder,
    /// incarnation, fence, floor, ceiling, expires_at, next_floor (the record as stored; for a
    /// free slot the window and expiry are the previous holder's), previous_holder (for a free
    /// slot: key, floor, ceiling, expires_at; null while held) and renewed_at (a holder's last
    /// write, derived as expires_at - the namespace's ttl; null when free or unknown).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct MigrateArgs {
    /// Store URL (with --namespace).
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "state_file",
        required_unless_present = "state_file"
    )]
    store: Option<String>,
    /// Namespace.
    #[arg(long, value_name = "NS", default_value = cosid_core::config::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Static slot state file.
    #[arg(long, value_name = "PATH")]
    state_file: Option<PathBuf>,
    /// No id on any slot will carry a time at or before this (RFC 3339).
    #[arg(long, value_name = "TIME")]
    not_before: String,
    /// Raise not-before even when it lies more than a day ahead of the store's clock or
    /// outside the namespace's id layout (every runtime of the namespace then waits until
    /// then: not-before never goes back).
    #[arg(long)]
    force: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return argument_error(e),
    };
    let result = match cli.command {
        Command::Next(a) => match cmd_next(a) {
            // Cut short by SIGINT or SIGTERM: the slot was released.
            Ok(Some(status)) => return ExitCode::from(status),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Parse(a) => cmd_parse(a),
        Command::Slots(a) => cmd_slots(a),
        Command::Migrate(a) => cmd_migrate(a),
        Command::Namespace(NamespaceCommand::RaiseSlots(a)) => cmd_raise_slots(a),
        Command::Namespace(NamespaceCommand::Delete(a)) => cmd_delete(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cosid: error: {}", one_line(&e.to_string()));
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

/// A command line clap refused, as one `cosid: error: …` line (exit status 2) like every other
/// error, instead of clap's usage text; help and version are printed as clap prints them.
fn argument_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Kind;
    let said = match e.kind() {
        Kind::DisplayHelp
        | Kind::DisplayVersion
        | Kind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
        // clap does not say which one: the first, shown lossily and cut.
        Kind::InvalidUtf8 => match std::env::args_os()
            .enumerate()
            .skip(1)
            .find(|(_, a)| a.to_str().is_none())
        {
            Some((n, a)) => format!(
                "argument {n} ('{}') is not valid UTF-8; give paths and values as UTF-8 text",
                cosid_core::bounds::quote_at_most(&a.to_string_lossy(), 80)
            ),
            None => "an argument is not valid UTF-8; give paths and values as UTF-8 text".into(),
        },
        // clap's first line names the problem ("unexpected argument 'x' found"); its usage
        // lines follow, which `--help` shows.
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            format!(
                "{}; see cosid --help",
                cosid_core::bounds::quote_at_most(first, 300)
            )
        }
    };
    eprintln!("cosid: error: {}", one_line(&said));
    ExitCode::from(2)
}

/// Distinct exit codes per kind of failure, so scripts can tell them apart.
fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Config | ErrorKind::InvalidArgument | ErrorKind::NamespaceMismatch => 2,
        ErrorKind::Store | ErrorKind::Exhausted => 3,
        _ => 1,
    }
}

fn build_config(args: &RuntimeArgs) -> cosid_core::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::from_path(path)?,
        None => Config::embedded_default()?,
    };
    if let Some(ns) = &args.namespace {
        if ns.is_empty() {
            return Err(Error::new(ErrorKind::Config, "--namespace is empty"));
        }
        cosid_core::bounds::check_len("--namespace", ns, cosid_core::bounds::MAX_NAMESPACE_BYTES)?;
        config.namespace = ns.clone();
    }
    let lease_flags = args.store.is_some()
        || args.owner_key.is_some()
        || args.ttl.is_some()
        || args.tolerance.is_some();
    match &mut config.machine {
        Machine::Static(_) if lease_flags => {
            return Err(Error::new(
                ErrorKind::Config,
                "--store, --owner-key, --ttl and --tolerance apply to leased slots, but the \
                 configuration uses machine.static",
            ))
        }
        Machine::Static(_) => {}
        Machine::Lease(lease) => {
            if let Some(s) = &args.store {
                cosid_core::store::StoreUrl::parse(s).map_err(|e| {
                    Error::new(ErrorKind::Config, format!("--store: {}", e.message()))
                })?;
                lease.store = s.clone();
            }
            if let Some(k) = &args.owner_key {
                lease.owner_key = Some(k.clone());
            }
            let dur = |flag: &str, v: &str| {
                cosid_core::time::parse_duration(v)
                    .map_err(|e| Error::new(ErrorKind::Config, format!("{flag}: {}", e.message())))
            };
            if let Some(t) = &args.ttl {
                lease.ttl = dur("--ttl", t)?;
                if args.config.is_none() {
                    lease.acquire_timeout = lease.ttl;
                }
            }
            if let Some(t) = &args.tolerance {
                lease.tolerance = dur("--tolerance", t)?;
            }
            // The checks a configuration file's values get, for the flags' values too.
            lease.check().map_err(|e| {
                let flagged = e
                    .message()
                    .replacen("cosid.machine.lease.ttl", "--ttl", 1)
                    .replacen("cosid.machine.lease.tolerance", "--tolerance", 1)
                    .replacen("cosid.machine.lease.owner-key", "--owner-key", 1);
                Error::new(ErrorKind::Config, flagged)
            })?;
        }
    }
    Ok(config)
}

/// An output format of `cosid next`.
#[derive(Clone, Debug)]
pub(crate) enum OutFormat {
    /// Boxed: a format with its affixes is some 200 bytes, read once per id printed.
    Id(Box<TextFormat>),
    Json,
}

fn out_format(spec: &str) -> cosid_core::Result<OutFormat> {
    if spec == "json" {
        return Ok(OutFormat::Json);
    }
    TextFormat::parse(spec)
        .map(|f| OutFormat::Id(Box::new(f)))
        .map_err(|e| {
            let m = e.message().replacen(
                "expected dec,",
                "expected json (one decoded id a line), dec,",
                1,
            );
            Error::new(ErrorKind::InvalidArgument, format!("--format: {m}"))
        })
}

pub(crate) fn render(layout: &Layout, format: &OutFormat, id: u64) -> cosid_core::Result<String> {
    match format {
        OutFormat::Id(f) => f.format(layout, id),
        OutFormat::Json => convert::decode(layout, id).map(|i| i.to_json()),
    }
}

/// A start that has waited this long for its store says so (once).
const STORE_WAIT_SAID_MS: i64 = 1000;

/// `Ok(Some(status))`: a `--count` run cut short by a signal, to exit with `status`.
fn cmd_next(a: NextArgs) -> cosid_core::Result<Option<u8>> {
    let format = out_format(&a.format)?;
    if let Some(rate) = a.rate {
        if !(follow::MIN_RATE..=follow::MAX_RATE).contains(&rate) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "--rate {} is out of range; give {} to {} ids per second",
                    // 1e-300, not three hundred digits.
                    if rate.is_finite() && rate != 0.0 && !(1e-3..1e9).contains(&rate.abs()) {
                        format!("{rate:e}")
                    } else {
                        rate.to_string()
                    },
                    follow::MIN_RATE,
                    follow::MAX_RATE
                ),
            ));
        }
    }
    let config = build_config(&a.runtime)?;
    follow::install_signal_handlers();
    let interrupted = || (!a.follow).then(follow::signal_exit_status);
    // Waits that end at a signal, and (with --follow) the keeper's events on stderr: a store
    // that fails shows why, not only the errors ids then run into.
    let mut builder = Runtime::builder()
        .config(config)
        .clock(std::sync::Arc::new(follow::StopClock));
    let follow = a.follow;
    let said_store_wait = std::sync::atomic::AtomicBool::new(false);
    builder = builder.on_event(move |e| {
        // A start that waits for its window, or for its store for a second or more, says why,
        // whatever the mode (the store's wait once; with --follow, as every event, at each
        // attempt): a pause is never a mystery.
        if let cosid_core::Event::WindowAhead { .. } = e {
            eprintln!("cosid: {}", one_line(&e.to_string()));
        } else if let (cosid_core::Event::StoreUnavailable { waited_ms, .. }, false) = (e, follow) {
            if *waited_ms >= STORE_WAIT_SAID_MS
                && !said_store_wait.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                eprintln!("cosid: {}", one_line(&e.to_string()));
            }
        } else if follow
            && !matches!(
                e,
                cosid_core::Event::SlotAcquired { .. } | cosid_core::Event::SlotReleased { .. }
            )
        {
            eprintln!("cosid: event: {}: {}", e.name(), one_line(&e.to_string()));
        }
    });
    let rt = match builder.build() {
        Ok(rt) => rt,
        // Interrupted while waiting for a slot or the store: nothing was acquired.
        Err(_) if follow::stopped() => {
            eprintln!("cosid: stopped by a signal before a slot was acquired; nothing is held");
            return Ok(interrupted());
        }
        Err(e) => return Err(e),
    };
    let result = if a.follow {
        follow::run(&rt, &format, a.rate)
    } else {
        print_count(&rt, &format, a.count)
    };
    // Ordered shutdown, also after an error: generators close, the slot is released.
    let closed = rt.close();
    if !a.follow && follow::stopped() {
        eprintln!("cosid: stopped by a signal before every id was printed; the slot is released");
        closed?;
        return Ok(interrupted());
    }
    result?;
    closed.map(|()| None)
}

fn print_count(rt: &Runtime, format: &OutFormat, count: u64) -> cosid_core::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut buf = vec![0u64; count.min(4096) as usize];
    let mut left = count;
    while left > 0 && !follow::stopped() {
        let n = left.min(buf.len() as u64) as usize;
        match rt.next_batch(&mut buf[..n]) {
            Ok(()) => {}
            Err(_) if follow::stopped() => break,
            Err(e) => return Err(e),
        }
        for id in &buf[..n] {
            if writeln!(out, "{}", render(rt.layout(), format, *id)?).is_err() {
                return Ok(()); // stdout closed (e.g. `| head`): stop quietly.
            }
        }
        left -= n as u64;
    }
    let _ = out.flush();
    Ok(())
}

fn cmd_parse(a: ParseArgs) -> cosid_core::Result<()> {
    let layout = match &a.config {
        Some(p) => Config::from_path(p)?.layout,
        None => Layout::MILLIS,
    };
    let forced = a
        .format
        .as_deref()
        .map(TextFormat::parse)
        .transpose()
        .map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("--format: {}", e.message()),
            )
        })?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for text in &a.ids {
        let fmt = forced.clone().unwrap_or_else(|| {
            TextFormat::new(if text.starts_with("0x") || text.starts_with("0X") {
                IdFormat::Hex
            } else {
                IdFormat::Decimal
            })
        });
        let id = match fmt.parse_id(&layout, text) {
            Ok(id) => id,
            Err(e) if forced.is_none() => return Err(with_format_hint(e, &layout, text)),
            Err(e) => return Err(e),
        };
        let _ = writeln!(out, "{}", convert::decode(&layout, id)?.to_json());
    }
    Ok(())
}

/// The refusal of an id read as decimal (no --format) that another text form reads: the
/// `--format` to give (what `cosid next --format base62` prints reads back with
/// `--format base62`). Only forms with their default options are tried, and each one that
/// reads the text is named, as a short text may read in more than one.
fn with_format_hint(e: Error, layout: &Layout, text: &str) -> Error {
    let fits: Vec<&str> = ["base62", "radix36", "friendly", "hex"]
        .into_iter()
        .filter(|spec| {
            TextFormat::parse(spec)
                .and_then(|f| f.parse_id(layout, text))
                .is_ok()
        })
        .collect();
    if fits.is_empty() {
        return e;
    }
    let how: Vec<String> = fits.iter().map(|f| format!("--format {f}")).collect();
    Error::new(
        e.kind(),
        format!(
            "{}; it reads as a {} id: add {}",
            e.message(),
            fits.join(" or "),
            how.join(" or ")
        ),
    )
}

/// Opens a store that must exist already: `cosid slots` and `cosid migrate` read or change a
/// store that runtimes use, so a mistyped SQLite path is an error, not a new empty database (and
/// directories); an in-process `memory:` store is refused, as no runtime could share it.
fn open_existing_store(
    url: &str,
    flag: &str,
) -> cosid_core::Result<cosid_core::store::SharedStore> {
    use cosid_core::store::StoreUrl;
    match StoreUrl::parse(url)? {
        StoreUrl::Sqlite { path } if !path.is_file() => {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "{flag}: there is no store file at '{}'; check the path (this command \
                     reads an existing store and creates none)",
                    path.display()
                ),
            ))
        }
        StoreUrl::Memory { .. } => {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "{flag}: a memory: store lives inside one process, so no runtime shares it \
                     with this command; give the store URL the runtimes use"
                ),
            ))
        }
        _ => {}
    }
    cosid_core::store::open(url)
}

fn cmd_slots(a: SlotsArgs) -> cosid_core::Result<()> {
    cosid_core::bounds::check_len(
        "--namespace",
        &a.namespace,
        cosid_core::bounds::MAX_NAMESPACE_BYTES,
    )?;
    let store = open_existing_store(&a.store, "--store")?;
    let snap = store.snapshot(&a.namespace)?;
    let now = snap.slots.store_now;
    let Some(ns) = snap.namespace.map(|v| v.value) else {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "namespace '{}' does not exist in {}",
                printable(&a.namespace),
                store.describe()
            ),
        ));
    };
    let mut slots = snap.slots.slots;
    slots.sort_by_key(|r| r.value.slot);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let t = cosid_core::time::format_rfc3339_ms;
    let dur = |ms: i64| {
        cosid_core::time::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
    };
    // A renewal sets expires_at = its store time + ttl (an acquisition too), so a holder's last
    // write was at expires_at - ttl; the stores keep no other time of it.
    let renewed_at = |r: &cosid_core::lease::SlotRecord| {
        r.owner
            .as_ref()
            .and(ns.ttl_ms)
            .map(|ttl| r.expires_at.saturating_sub(ttl))
    };
    if !a.json {
        let _ = writeln!(
            out,
            "namespace {}  limit {}  tolerance {}  ttl {}  not-before {}  store time {}",
            printable(&a.namespace),
            ns.limit,
            dur(ns.tolerance_ms),
            ns.ttl_ms.map_or_else(|| "-".into(), dur),
            if ns.not_before_ms > 0 {
                t(ns.not_before_ms)
            } else {
                "-".into()
            },
            t(now)
        );
        let live = |r: &cosid_core::lease::SlotRecord| r.owner.is_some() && now < r.expires_at;
        let held = slots.iter().filter(|r| live(&r.value)).count();
        let expired = slots
            .iter()
            .filter(|r| r.value.owner.is_some() && !live(&r.value))
            .count();
        let layout = ns.layout.map_or_else(
            || "layout not recorded".to_string(),
            |l| {
                format!(
                    "layout {} ({l}; at most {} slots)",
                    l.encode(),
                    1u64 << l.node_bits.min(63)
                )
            },
        );
        if ns.limit == 0 {
            let _ = writeln!(
                out,
                "no slot limit: written by `cosid migrate` or left by `cosid namespace \
                 delete`; its next runtime creates it, every window above the not-before  {layout}"
            );
        } else {
            let _ = writeln!(
                out,
                "held {held}  expired {expired}  free {}  limit {}  {layout}  \
                 (parenthesised: a free slot's previous holder, history)",
                (ns.limit as usize).saturating_sub(held),
                ns.limit
            );
        }
        let _ = writeln!(
            out,
            "{:>5}  {:<8}  {:<32}  {:>6}  {:<12}  {:<26}  {:<26}  {:<26}  {:<24}",
            "slot",
            "state",
            "holder",
            "fence",
            "renewed",
            "floor",
            "ceiling",
            "expires",
            "next-floor"
        );
    }
    for v in &slots {
        let r = &v.value;
        let state = match &r.owner {
            None => "free",
            Some(_) if now >= r.expires_at => "expired",
            Some(_) => "held",
        };
        let renewed = renewed_at(r);
        if a.json {
            let previous = match (&r.owner, r.fence) {
                (None, fence) if fence > 0 => format!(
                    "{{\"key\":{},\"floor\":{},\"ceiling\":{},\"expires_at\":{}}}",
                    json_str(r.last_owner_key.as_deref()),
                    r.floor,
                    r.ceiling,
                    r.expires_at
                ),
                _ => "null".into(),
            };
            let _ = writeln!(
                out,
                "{{\"slot\":{},\"state\":\"{state}\",\"holder\":{},\"incarnation\":{},\"fence\":{},\"floor\":{},\"ceiling\":{},\"expires_at\":{},\"next_floor\":{},\"previous_holder\":{previous},\"renewed_at\":{}}}",
                r.slot,
                json_str(r.owner.as_ref().map(|o| o.key.as_str())),
                json_str(r.owner.as_ref().map(|o| o.incarnation.to_string()).as_deref()),
                r.fence,
                r.floor,
                r.ceiling,
                r.expires_at,
                r.next_floor,
                renewed.map_or_else(|| "null".into(), |ms| ms.to_string())
            );
            continue;
        }
        // Owner keys come from any process: escaped, so that none can forge rows or drive the
        // terminal.
        // A floor of 0 is no floor (a slot's first window), not a time in 1970.
        let floor = if r.floor > 0 { t(r.floor) } else { "-".into() };
        let (holder, window) = match &r.owner {
            Some(o) => (printable(&o.key), [floor, t(r.ceiling), t(r.expires_at)]),
            // The previous holder's, if any: history, parenthesised. What the next holder
            // gets is next-floor.
            None if r.fence > 0 => (
                format!(
                    "({})",
                    r.last_owner_key.as_deref().map_or("-".into(), printable)
                ),
                [floor, t(r.ceiling), t(r.expires_at)].map(|text| format!("({text})")),
            ),
            None => ("-".into(), ["-".to_string(), "-".into(), "-".into()]),
        };
        let renewed = match (renewed, &r.owner) {
            (Some(at), _) => format!("{} ago", dur(now.saturating_sub(at))),
            (None, Some(_)) => "?".into(),
            (None, None) => "-".into(),
        };
        let [floor, ceiling, expires] = window;
        let _ = writeln!(
            out,
            "{:>5}  {:<8}  {:<32}  {:>6}  {:<12}  {:<26}  {:<26}  {:<26}  {:<24}",
            r.slot,
            state,
            holder,
            r.fence,
            renewed,
            floor,
            ceiling,
            expires,
            t(r.next_floor)
        );
    }
    Ok(())
}

fn cmd_raise_slots(a: RaiseSlotsArgs) -> cosid_core::Result<()> {
    let store = open_namespace_store(&a.store, &a.namespace)?;
    let done = LeaseClient::raise_slots(&store, &a.namespace, a.slots)?;
    if done.before == done.namespace.limit {
        println!(
            "namespace {} in {}: the limit is {} slots already; nothing changed",
            printable(&a.namespace),
            store.describe(),
            done.before
        );
    } else {
        println!(
            "namespace {} in {}: the limit is now {} slots (was {}); running runtimes take \
             the new slots at their next acquisition",
            printable(&a.namespace),
            store.describe(),
            done.namespace.limit,
            done.before
        );
    }
    Ok(())
}

fn cmd_delete(a: DeleteArgs) -> cosid_core::Result<()> {
    if !a.yes {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "`cosid namespace delete` deletes namespace '{}' and every slot record of it; \
                 add --yes to confirm",
                printable(&a.namespace)
            ),
        ));
    }
    let store = open_namespace_store(&a.store, &a.namespace)?;
    let done = LeaseClient::delete_namespace(&store, &a.namespace)?;
    let t = cosid_core::time::format_rfc3339_ms;
    println!(
        "namespace {} in {}: deleted ({} slot records); a namespace created again under this \
         name keeps its layout and starts every window above {}",
        printable(&a.namespace),
        store.describe(),
        done.deleted,
        t(done.tombstone.not_before_ms)
    );
    if done.kept.is_empty() {
        return Ok(());
    }
    for (slot, owner, expires_at) in &done.kept {
        eprintln!(
            "cosid: warning: slot {slot} was written while the deletion ran (holder '{}', \
             expires {}); its record is kept and the namespace's next runtime respects it",
            owner.as_ref().map_or("-".into(), |o| printable(&o.key)),
            t(*expires_at)
        );
    }
    Err(Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "{} slot record(s) of namespace '{}' were written while it was deleted, by a \
             runtime that started meanwhile; stop it and run `cosid namespace delete` again",
            done.kept.len(),
            printable(&a.namespace)
        ),
    ))
}

/// The store of `cosid namespace …`, once the namespace's name passed the checks a runtime
/// makes (so that no command writes a namespace no runtime could use).
fn open_namespace_store(
    url: &str,
    namespace: &str,
) -> cosid_core::Result<cosid_core::store::SharedStore> {
    cosid_core::bounds::check_len(
        "--namespace",
        namespace,
        cosid_core::bounds::MAX_NAMESPACE_BYTES,
    )?;
    let store = open_existing_store(url, "--store")?;
    LeaseClient::new(
        store.clone(),
        namespace,
        0,
        cosid_core::lease::Terms {
            ttl_ms: 1,
            tolerance_ms: 0,
        },
    )
    .map_err(|e| Error::new(ErrorKind::Config, format!("--namespace: {}", e.message())))?;
    Ok(store)
}

/// Characters a terminal or a reader of JSON may act on: C0 and C1 controls, DEL, the line and
/// paragraph separators, and the bidirectional formatting characters (which reorder what is
/// shown around them).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// A message for stderr on one line: the characters of [`needs_escape`] (from owner keys or
/// namespaces another process wrote) as `\u{…}` escapes.
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if needs_escape(c) {
                format!("\\u{{{:04x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Text for the table: every character of [`needs_escape`] and the backslash as `\u{…}`
/// escapes, so one value is one cell on one line.
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn json_str(s: Option<&str>) -> String {
    match s {
        None => "null".into(),
        Some(s) => {
            let mut out = String::from("\"");
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if needs_escape(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
    }
}

fn cmd_migrate(a: MigrateArgs) -> cosid_core::Result<()> {
    let not_before = cosid_core::time::parse_rfc3339(&a.not_before).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("--not-before: {}", e.message()),
        )
    })?;
    if let Some(path) = &a.state_file {
        let next = cosid_core::static_slot::raise_not_before(path, not_before)?;
        println!(
            "state file {}: floor at restart is now {}",
            path.display(),
            cosid_core::time::format_rfc3339_ms(next)
        );
        return Ok(());
    }
    let url = a.store.as_deref().unwrap_or_default();
    let store = open_namespace_store(url, &a.namespace)?;
    let done = LeaseClient::raise_not_before(&store, &a.namespace, not_before, a.force)?;
    println!(
        "namespace {} in {}: every slot's next floor is now at least {}",
        a.namespace,
        store.describe(),
        cosid_core::time::format_rfc3339_ms(done.namespace.not_before_ms)
    );
    if done.held_below.is_empty() {
        return Ok(());
    }
    for (slot, key) in &done.held_below {
        eprintln!(
            "cosid: warning: slot {slot} is held by '{}' with a window that starts before --not-before; restart that process",
            printable(key)
        );
    }
    Err(Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "{} live holder(s) were granted windows before the migration; run `cosid migrate` before starting cosid 5 runtimes, or restart them",
            done.held_below.len()
        ),
    ))
}
