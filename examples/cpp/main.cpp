// A complete C++ program using libcosid through include/cosid.hpp.
//
//   c++ -std=c++17 main.cpp $(pkg-config --cflags --libs cosid) -o cosid-example-cpp
//   ./cosid-example-cpp [CONFIG]
#include <cosid.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char **argv) {
  try {
    // nullptr: the embedded SQLite store at $XDG_STATE_HOME/cosid/slots.db.
    cosid::runtime rt{argc > 1 ? argv[1] : nullptr};
    for (int i = 0; i < 3; i++) std::cout << rt.next() << '\n';
    for (uint64_t id : rt.next_batch(4)) std::cout << id << '\n';

    cosid::generator orders = rt.get_generator("orders");
    uint64_t id = orders.next();
    cosid_id_parts p = rt.parse(id);
    std::cout << cosid::to_base62(id) << ": timestamp_ms=" << p.timestamp_ms
              << " slot=" << p.slot << " sequence=" << p.sequence << '\n';
    rt.close();  // optional: the destructor closes too, silently
  } catch (const cosid::error &e) {
    std::cerr << e.what() << '\n';  // e.g. "COSID_ERR_CONFIG: cosid_runtime_new: ..."
    return 1;
  }
  return 0;
}
