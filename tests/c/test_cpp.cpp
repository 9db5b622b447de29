// The C++ wrapper (include/cosid.hpp): RAII, exceptions carrying the status, generators,
// batches, parsing, base 62, events, moves, many threads on one runtime.
#include <cosid.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);  \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

// `body` must throw cosid::error with `want`; returns its message.
template <class F>
static std::string expect_error(cosid_status want, F body) {
  try {
    body();
  } catch (const cosid::error &e) {
    if (e.status() != want) {
      std::fprintf(stderr, "expected %s, got %s: %s\n", cosid_status_name(want), e.name(),
                   e.what());
      std::exit(1);
    }
    return e.what();
  }
  std::fprintf(stderr, "expected %s, nothing thrown\n", cosid_status_name(want));
  std::exit(1);
}

static std::string config(const char *name) {
  const char *dir = std::getenv("COSID_TEST_DIR");
  return std::string("cosid:\n  namespace: cpp\n  machine:\n    lease:\n      store: sqlite://") +
         (dir ? dir : "/tmp") + "/" + name + ".db\n      bits: 4\n";
}

int main() {
  CHECK(std::string(cosid::version()) == COSID_VERSION_STRING);

  // Errors carry the status and the detail naming the key.
  std::string msg = expect_error(COSID_ERR_CONFIG, [] {
    cosid::runtime rt{"cosid: {machine: {lease: {tll: 3s}}}"};
  });
  CHECK(msg.find("COSID_ERR_CONFIG: cosid_runtime_new: ") == 0);
  CHECK(msg.find("tll") != std::string::npos);

  std::atomic<int> released{0};
  uint64_t last = 0;
  {
    cosid::runtime rt{config("cpp")};
    uint64_t a = rt.next(), b = rt.next();
    CHECK(b > a);
    std::vector<uint64_t> batch = rt.next_batch(5000);
    CHECK(batch.size() == 5000 && batch.front() > b);
    CHECK(std::is_sorted(batch.begin(), batch.end()));
    CHECK(std::adjacent_find(batch.begin(), batch.end()) == batch.end());
    CHECK(rt.next_batch(0).empty());

    cosid_id_parts p = rt.parse(b);
    cosid_stats s = rt.stats();
    CHECK(s.bound && p.slot == s.slot);
    CHECK(rt.layout().sequence_bits == 12);
    expect_error(COSID_ERR_INVALID_ARGUMENT, [&] { rt.parse(UINT64_MAX); });

    cosid::generator g = rt.get_generator("orders");
    uint64_t x = g.next();
    std::vector<uint64_t> gb = g.next_batch(10);
    CHECK(gb.front() > x);
    expect_error(COSID_ERR_INVALID_ARGUMENT, [&] { rt.get_generator("bad\nname"); });

    std::string text = cosid::to_base62(b);
    CHECK(text.size() == COSID_BASE62_LEN && cosid::from_base62(text) == b);
    std::string bad = expect_error(COSID_ERR_INVALID_ARGUMENT, [] { cosid::from_base62("x"); });
    CHECK(bad.find("base-62") != std::string::npos);

    // Many threads on one runtime.
    std::vector<std::vector<uint64_t>> per(4);
    std::vector<std::thread> threads;
    for (auto &v : per)
      threads.emplace_back([&rt, &v] {
        for (int i = 0; i < 50000; i++) v.push_back(rt.next());
      });
    for (auto &t : threads) t.join();
    std::vector<uint64_t> all;
    for (auto &v : per) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());

    // Events; a throwing callback does not take the process down.
    rt.on_event([](const cosid_event &) { throw std::runtime_error("ignored"); });
    rt.on_event([&released](const cosid_event &e) {
      if (e.kind == COSID_EVENT_SLOT_RELEASED) released++;
    });

    // Moves keep the runtime (and its callback) alive.
    cosid::runtime moved{std::move(rt)};
    last = moved.next();
    expect_error(COSID_ERR_NULL_ARGUMENT, [&] { rt.next(); });  // moved-from
    moved.close();
    CHECK(released == 1);
    expect_error(COSID_ERR_CLOSED, [&] { moved.next(); });
    expect_error(COSID_ERR_CLOSED, [&] { moved.close(); });
    expect_error(COSID_ERR_CLOSED, [&] { g.next(); });
  }
  CHECK(released == 1);

  // Destruction without close releases the slot (and reaches the callback); move-assignment
  // frees the assigned-over runtime first.
  {
    cosid::runtime a{config("cpp")};
    a.on_event([&released](const cosid_event &e) {
      if (e.kind == COSID_EVENT_SLOT_RELEASED) released++;
    });
    CHECK(a.next() > last);
    cosid::runtime b{config("cpp2")};
    a = std::move(b);
    CHECK(released == 2);
    a.next();
  }
  CHECK(released == 2);

  // A callback may replace itself, and may destroy its own runtime: the function that is
  // running stays alive until it returns (AddressSanitizer sees it if not).
  {
    int calls = 0, replaced = 0;
    cosid::runtime rt{config("cpp3")};
    rt.on_event([&](const cosid_event &e) {
      std::string keep(64, 'x');  // state of the running function, read after the swap
      if (e.kind != COSID_EVENT_SLOT_RELEASED) return;
      rt.on_event([&replaced](const cosid_event &) { replaced++; });
      calls++;  // a capture, read through the running function after the swap
      CHECK(keep.size() == 64);
    });
    rt.close();
    CHECK(calls == 1);
    CHECK(replaced == 0);
  }
  {
    int calls = 0;
    auto owner = std::make_unique<cosid::runtime>(config("cpp4"));
    owner->next();
    owner->on_event([&](const cosid_event &e) {
      std::string keep(64, 'y');
      if (e.kind != COSID_EVENT_SLOT_RELEASED || calls > 0) return;
      owner.reset();  // destroys the runtime whose close is calling us
      calls++;        // a capture, read through the running function after it
      CHECK(keep.size() == 64);
    });
    owner->close();
    CHECK(calls >= 1);
    CHECK(owner == nullptr);
  }
  std::printf("test_cpp: ok\n");
  return 0;
}
