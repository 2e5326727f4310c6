// The CPU backend's fast paths for the kernels where the straightforward references are slow:
// attention as Eigen GEMMs per (sequence, head) and a fused softmax-cross-entropy forward+backward.
// Same contracts as kernels/reference.h (tests/runtime compares them); the references stay the
// oracle for the CUDA kernels.
#pragma once

#include "kernels/reference.h"

namespace foresight::runtime {

// = kernels::attention_forward_cpu.
void attention_forward_fast(float* out, float* probs, const float* qkv, const kernels::AttentionShape& s);
// = kernels::attention_backward_cpu (dqkv overwritten); `scratch` holds seq * seq floats.
void attention_backward_fast(float* dqkv, float* scratch, const float* dout, const float* probs, const float* qkv,
                             const kernels::AttentionShape& s);
// Losses of each row (= kernels::crossentropy_forward_cpu) and, in the same pass, the logits'
// gradient (= kernels::crossentropy_backward_cpu with `dloss`). Returns the sum of the losses.
double crossentropy_fused(float* losses, float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                          int vocab);

}  // namespace foresight::runtime
