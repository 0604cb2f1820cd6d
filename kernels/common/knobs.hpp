// The one reader of the C++ run-time knobs (KRONLINALG_* environment variables).  Every knob a
// kernel reads goes through these two functions, so `grep kl::knob_` lists them all; their
// names, types and meanings are listed once, with the Python ones, in kronlinalg/common/config.py.
#ifndef KRONLINALG_KNOBS_HPP
#define KRONLINALG_KNOBS_HPP

#include <cstdlib>
#include <cstring>

namespace kl {

// The knob's integer value, or `fallback` when it is unset or empty.
inline int knob_int(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return (v && *v) ? std::atoi(v) : fallback;
}

// Whether the knob is set to exactly `value`.
inline bool knob_is(const char *name, const char *value) {
  const char *v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

// Whether the knob is set at all (to anything non-empty).
inline bool knob_set(const char *name) {
  const char *v = std::getenv(name);
  return v && *v;
}

}  // namespace kl

#endif
