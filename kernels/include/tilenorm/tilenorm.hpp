#pragma once
// tilenorm: normalization kernels written in a tile language embedded in C++, compiled at
// run time with NVRTC and launched through the CUDA driver API. The one header users include.
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/runtime.hpp"
#include "tilenorm/runtime/tensor.hpp"
#include "tilenorm/runtime/tuning_db.hpp"
