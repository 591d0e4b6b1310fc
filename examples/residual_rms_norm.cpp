// Runs the fused residual add and RMSNorm and its derived backward on the GPU against the
// fp64 interpreter (check_example.hpp).
#include "residual_rms_norm.hpp"

#include "check_example.hpp"

int main() {
  return check_example("residual_rms_norm", residual_rms_norm());
}
