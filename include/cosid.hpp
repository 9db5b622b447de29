/*
 * cosid.hpp: a small header-only C++17 wrapper over the C API of cosid (cosid.h).
 *
 *   cosid::runtime rt{"cosid: {namespace: orders}"};   // RAII: freed (and closed) on scope exit
 *   uint64_t id = rt.next();                            // throws cosid::error on failure
 *   std::vector<uint64_t> ids = rt.next_batch(1000);
 *
 * Every failing call throws cosid::error, which carries the cosid_status (error::status(), e.g.
 * COSID_ERR_SLOT_LOST) and the library's detail message (what()). Thread-safety is the C API's:
 * a runtime and a generator may be used from many threads at once (next, next_batch,
 * get_generator, parse, stats); destroying or moving one must not race with other uses.
 *
 * Link with libcosid: `pkg-config --cflags --libs cosid`. See docs/c-api.md.
 */
#ifndef COSID_HPP
#define COSID_HPP

#include <cosid.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cosid {

/// A failed call of the C API: its status and the detail message.
class error : public std::runtime_error {
 public:
  error(cosid_status status, const std::string &detail)
      : std::runtime_error(std::string(cosid_status_name(status)) + ": " + detail),
        status_(status) {}

  /// The status, e.g. COSID_ERR_CONFIG.
  cosid_status status() const noexcept { return status_; }

  /// The status's name, e.g. "COSID_ERR_CONFIG".
  const char *name() const noexcept { return cosid_status_name(status_); }

 private:
  cosid_status status_;
};

namespace detail {

/// This thread's last error detail.
inline std::string last_error() {
  std::string s(cosid_last_error_length(), '\0');
  size_t n = 0;
  if (cosid_last_error_message(&s[0], s.size() + 1, &n) != COSID_OK) return std::string();
  s.resize(n);
  return s;
}

/// Throws cosid::error unless `status` is COSID_OK.
inline void check(cosid_status status) {
  if (status != COSID_OK) throw error(status, last_error());
}

using event_function = std::function<void(const cosid_event &)>;

/// A runtime's current callback. The library calls the trampoline with this slot; each call
/// holds its own reference to the function it runs, so a callback may replace itself
/// (`on_event`) or destroy its runtime while it runs: the running function lives until it
/// returns.
struct event_slot {
  std::mutex lock;
  std::shared_ptr<event_function> current;

  std::shared_ptr<event_function> get() {
    std::lock_guard<std::mutex> held(lock);
    return current;
  }
  void set(std::shared_ptr<event_function> f) {
    std::lock_guard<std::mutex> held(lock);
    current.swap(f);
    // The previous function (now in `f`) is released after the lock, by its last holder.
  }
};

/// The C callback: calls the slot's function, never lets an exception into the library.
inline void event_trampoline(const cosid_event *event, void *user_data) noexcept {
  std::shared_ptr<event_function> f = static_cast<event_slot *>(user_data)->get();
  if (!f) return;
  try {
    (*f)(*event);
  } catch (...) {
    // An exception must not unwind through the library's keeper thread; it is dropped.
  }
}

}  // namespace detail

/// The library's version, "MAJOR.MINOR.PATCH" (COSID_VERSION_STRING is the header's).
inline const char *version() noexcept { return cosid_version(); }

/// The 11-character base-62 text of an id (sorting the texts sorts the ids).
inline std::string to_base62(uint64_t id) {
  char buf[COSID_BASE62_BUFFER_SIZE];
  size_t n = 0;
  detail::check(cosid_id_to_base62(id, buf, sizeof buf, &n));
  return std::string(buf, n);
}

/// The id whose base-62 text is `text`; throws COSID_ERR_INVALID_ARGUMENT for other text.
inline uint64_t from_base62(const std::string &text) {
  uint64_t id = 0;
  detail::check(cosid_id_from_base62(text.c_str(), &id));
  return id;
}

/// A named generator of a runtime (its own id space on the runtime's slot). Move-only.
class generator {
 public:
  /// One id.
  uint64_t next() const {
    uint64_t id = 0;
    detail::check(cosid_generator_next(g_.get(), &id));
    return id;
  }

  /// Fills out[0..n) with increasing ids (nothing written on error).
  void next_batch(uint64_t *out, size_t n) const {
    detail::check(cosid_generator_next_batch(g_.get(), out, n));
  }

  /// `n` increasing ids.
  std::vector<uint64_t> next_batch(size_t n) const {
    std::vector<uint64_t> ids(n);
    next_batch(ids.data(), n);
    return ids;
  }

  /// The C handle (still owned by this object).
  const cosid_generator *get() const noexcept { return g_.get(); }

 private:
  friend class runtime;
  explicit generator(cosid_generator *g) noexcept : g_(g) {}
  struct deleter {
    void operator()(cosid_generator *g) const noexcept { cosid_generator_free(g); }
  };
  std::unique_ptr<cosid_generator, deleter> g_;
};

/// A running id source (cosid_runtime). Acquires its slot on construction; releases it in
/// order (close) on destruction. Move-only.
class runtime {
 public:
  /// The embedded default: the SQLite store at $XDG_STATE_HOME/cosid/slots.db.
  runtime() : runtime(static_cast<const char *>(nullptr)) {}

  /// From a YAML or JSON configuration (nullptr: the embedded default).
  explicit runtime(const char *config) {
    cosid_runtime *rt = nullptr;
    detail::check(cosid_runtime_new(config, &rt));
    rt_.reset(rt);
  }

  /// From a YAML or JSON configuration.
  explicit runtime(const std::string &config) : runtime(config.c_str()) {}

  runtime(runtime &&other) noexcept = default;

  runtime &operator=(runtime &&other) noexcept {
    // Free our runtime first: its final event may still call our callback.
    rt_ = std::move(other.rt_);
    callback_ = std::move(other.callback_);
    return *this;
  }

  runtime(const runtime &) = delete;
  runtime &operator=(const runtime &) = delete;
  ~runtime() = default;  // rt_ is freed before callback_ (reverse declaration order)

  /// One id from the default generator. Thread-safe.
  uint64_t next() const {
    uint64_t id = 0;
    detail::check(cosid_next(rt_.get(), &id));
    return id;
  }

  /// Fills out[0..n) with increasing ids (nothing written on error). Thread-safe.
  void next_batch(uint64_t *out, size_t n) const {
    detail::check(cosid_next_batch(rt_.get(), out, n));
  }

  /// `n` increasing ids. Thread-safe.
  std::vector<uint64_t> next_batch(size_t n) const {
    std::vector<uint64_t> ids(n);
    next_batch(ids.data(), n);
    return ids;
  }

  /// The generator called `name` ("" is the default one). Thread-safe.
  generator get_generator(const std::string &name) const {
    cosid_generator *g = nullptr;
    detail::check(cosid_generator_get(rt_.get(), name.c_str(), &g));
    return generator(g);
  }

  /// Takes an id apart with this runtime's layout.
  cosid_id_parts parse(uint64_t id) const {
    cosid_id_parts parts{};
    detail::check(cosid_parse(rt_.get(), id, &parts));
    return parts;
  }

  /// This runtime's layout.
  cosid_layout layout() const {
    cosid_layout l{};
    detail::check(cosid_runtime_layout(rt_.get(), &l));
    return l;
  }

  /// Counters and the current window.
  cosid_stats stats() const {
    cosid_stats s{};
    detail::check(cosid_runtime_stats(rt_.get(), &s));
    return s;
  }

  /// Ordered shutdown (generators close, the slot is released). Throws COSID_ERR_CLOSED when
  /// called twice. The destructor closes too, silently.
  void close() { detail::check(cosid_runtime_close(rt_.get())); }

  /// Calls `f` with every event from now on, on the keeper's thread (keep it quick; an
  /// exception it throws is dropped). An empty function removes the callback. `f` may call
  /// `on_event` (replacing itself) or destroy this runtime; the call that is running finishes
  /// with the function it started with.
  void on_event(std::function<void(const cosid_event &)> f) {
    if (!callback_) callback_ = std::make_unique<detail::event_slot>();  // a moved-from runtime
    if (!f) {
      detail::check(cosid_runtime_set_event_callback(rt_.get(), nullptr, nullptr));
      callback_->set(nullptr);
      return;
    }
    callback_->set(std::make_shared<detail::event_function>(std::move(f)));
    detail::check(
        cosid_runtime_set_event_callback(rt_.get(), &detail::event_trampoline, callback_.get()));
  }

  /// The C handle (still owned by this object).
  cosid_runtime *get() const noexcept { return rt_.get(); }

 private:
  struct deleter {
    void operator()(cosid_runtime *rt) const noexcept { cosid_runtime_free(rt); }
  };
  // Declared before rt_ so that it is destroyed after it (the runtime's final event may still
  // reach the slot).
  std::unique_ptr<detail::event_slot> callback_ = std::make_unique<detail::event_slot>();
  std::unique_ptr<cosid_runtime, deleter> rt_;
};

}  // namespace cosid

#endif  // COSID_HPP
