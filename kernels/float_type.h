// The floating-point element types the kernels read and write, named in the
// launchers' argument structs (host code sees this header; the device-side
// conversions are in float_convert.cuh).
#pragma once

namespace gputrain::kernels {

enum class FloatType { kFloat32, kBFloat16, kFloat16 };

}  // namespace gputrain::kernels
