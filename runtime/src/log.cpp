#include "tilenorm/runtime/log.hpp"

#include <iostream>
#include <mutex>
#include <string>

namespace tilenorm {
namespace {
std::mutex handler_mutex;
WarningHandler& current_handler() {
  static WarningHandler handler;
  return handler;
}
}  // namespace

void warn(std::string_view message) {
  std::lock_guard lock(handler_mutex);
  if (current_handler()) {
    current_handler()(message);
  } else {
    std::cerr << "tilenorm: warning: " << message << '\n';
  }
}

WarningHandler set_warning_handler(WarningHandler handler) {
  std::lock_guard lock(handler_mutex);
  std::swap(current_handler(), handler);
  return handler;
}

}  // namespace tilenorm
