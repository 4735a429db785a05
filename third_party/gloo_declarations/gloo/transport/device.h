// See third_party/gloo_declarations/README.md: declarations only.
#pragma once
namespace gloo::transport {
class Device;
class UnboundBuffer;
}  // namespace gloo::transport
