// A helper shared by the tests of the per-layer kernel list (sim/analytic/layer_ops.h).
#pragma once

#include <gtest/gtest.h>

#include "sim/analytic/layer_ops.h"

namespace foresight::testing {

// The layer's kernel named `name`; a test failure (and the first kernel) when there is none.
inline const KernelCost& find_kernel(const LayerKernels& k, KernelName name) {
  for (int i = 0; i < k.count; ++i)
    if (k.fwd[i].name == name) return k.fwd[i];
  ADD_FAILURE() << "no kernel " << kernel_name(name);
  return k.fwd[0];
}

}  // namespace foresight::testing
