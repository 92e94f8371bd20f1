#pragma once
// How far codegen's element of an op (elementwise.h) may stray from the exact value, beyond the
// few f32 ulps every f32 operation is allowed: the short forms that results rounded to bf16/f16
// take (math.h's *_16bit). The check against the float64 reference (runtime/check.h) draws its
// noise for such a node from this bound.
#include "compiler/graph/graph.h"

namespace tilefuse {

// A relative error bound of `op`'s element for a result of `dtype`; 0 where f32's own rounding
// and the f32 functions' few ulps bound it.
double short_form_error(Op op, DType dtype);

}  // namespace tilefuse
