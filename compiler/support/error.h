#pragma once
// Typed errors. Every message names the op, the shapes/dtypes involved and what to do.
#include <stdexcept>
#include <string>

namespace tilefuse {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shapes that cannot broadcast, bad axes, wrong ranks.
class ShapeError : public Error {
  using Error::Error;
};
// Mixed dtypes without a cast, unsupported dtype for an op.
class DTypeError : public Error {
  using Error::Error;
};
// Malformed graphs: an output not in the graph, a dangling operand, duplicate names.
class GraphError : public Error {
  using Error::Error;
};
// Bad inputs at run time: a missing input, a buffer of the wrong size or dtype.
class InputError : public Error {
  using Error::Error;
};
// Unknown or unsupported compilation target.
class TargetError : public Error {
  using Error::Error;
};
// Valid graphs that tilefuse cannot compile yet (the message says what would work).
class UnsupportedError : public Error {
  using Error::Error;
};
// Code generation failures (LLVM could not emit, ptxas rejected).
class CodegenError : public Error {
  using Error::Error;
};
// CUDA Driver API failures, including "no GPU present".
class CudaError : public Error {
  using Error::Error;
};

}  // namespace tilefuse
