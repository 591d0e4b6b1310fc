#pragma once
// Storage data types. Compute is always fp32 on the device (fp64 in the interpreter).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tilenorm {

enum class DType : std::uint8_t { f32, f16, bf16 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16};

constexpr std::size_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "fp32";
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

// Accepts "fp32"/"f32"/"float32", "fp16"/"f16"/"float16"/"half", "bf16"/"bfloat16".
// Throws tilenorm::Error naming the text on anything else.
DType parse_dtype(std::string_view text);

// Rounds a value to the nearest value representable in `t` (round-to-nearest-even), as a
// device store would. Used by the interpreter and by tests to build exact inputs.
double round_to_dtype(double value, DType t);

// Bit-level conversions between fp32 and the 16-bit storage formats (host side).
std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(std::uint16_t bits);

}  // namespace tilenorm
