#pragma once
#include <string>
#include <string_view>

namespace tilenorm {

// SHA-256 (FIPS 180-4) of `data` as 64 lowercase hexadecimal digits.
std::string sha256_hex(std::string_view data);

}  // namespace tilenorm
