// Runs the Gemma RMSNorm variant and its derived backward on the GPU against the fp64
// interpreter (check_example.hpp).
#include "gemma_rms_norm.hpp"

#include "check_example.hpp"

int main() {
  return check_example("gemma_rms_norm", gemma_rms_norm());
}
