#include "tilenorm/dsl/dtype.hpp"

#include <bit>
#include <cmath>
#include <string>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

DType parse_dtype(std::string_view text) {
  if (text == "fp32" || text == "f32" || text == "float32" || text == "float") return DType::f32;
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  throw Error("unknown dtype '" + std::string(text) + "' (expected fp32, fp16 or bf16)");
}

std::uint16_t float_to_bf16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // keep it a NaN
  const std::uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_fp16_bits(float value) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(value));
}

float fp16_bits_to_float(std::uint16_t bits) {
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

double round_to_dtype(double value, DType t) {
  // Device code rounds from fp32, so round through fp32 first, exactly as a store does.
  const float as_float = static_cast<float>(value);
  switch (t) {
    case DType::f32:
      return as_float;
    case DType::f16:
      return fp16_bits_to_float(float_to_fp16_bits(as_float));
    case DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(as_float));
  }
  return as_float;
}

}  // namespace tilenorm
