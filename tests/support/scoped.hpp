#pragma once
// Test fixtures that undo what they change when they go out of scope, also when a REQUIRE throws:
// an environment variable, and the library's warning handler.

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/runtime/log.hpp"

namespace tilenorm::testing {

// Sets `name` to `value` (unsets it for a null value) and restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_value_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_value_) {
      ::setenv(name_.c_str(), old_value_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_value_;
};

// Collects warnings instead of printing them, for as long as it lives (from any thread).
class WarningCapture {
 public:
  WarningCapture()
      : previous_(tilenorm::set_warning_handler([this](std::string_view message) {
          std::lock_guard lock(mutex_);
          messages_.emplace_back(message);
        })) {}
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  ~WarningCapture() { tilenorm::set_warning_handler(previous_); }

  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  tilenorm::WarningHandler previous_;
};

}  // namespace tilenorm::testing
